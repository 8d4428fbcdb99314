// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The flight recorder: always recording, into memory, and writing a run
// directory only when something goes wrong.
//
//   trainprof::FlightRecorderOptions o;
//   o.profiler.output_path = "./flight";
//   trainprof::FlightRecorder recorder(o);
//   for (...) {
//     train_one_step();
//     recorder.step();  // a step 3x slower than the median of the last 50 dumps
//   }
//   recorder.dump("checkpoint looked wrong");  // or on request
//
// What it records is what a Profiler records with the same ProfilerOptions,
// kept in a ring of `ring_mb` MiB of event buffers: the oldest buffers go
// first when it is full. A dump is a normal run directory (every analysis
// and output works on it) whose profiler_info.json says, under
// "flight_recorder", what triggered it and from which time its data is
// complete. Dumps run on a thread of the recorder's: step() only measures
// the step and compares it.
#ifndef TRAINPROF_FLIGHT_RECORDER_H_
#define TRAINPROF_FLIGHT_RECORDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainprof/options.h"

namespace trainprof {

// What a recorder samples by default (ProfilerOptions::sample_operators 0)
// when it records neither torch.distributed's calls nor memory: 1 operator
// call in 100, which keeps recording about 1 % of a step or under
// (docs/PERFORMANCE.md).
inline constexpr uint32_t kFlightRecorderOperatorSampling = 100;

struct FlightRecorderOptions {
  // What is recorded, and where dumps go (output_path); its schedule is not used.
  ProfilerOptions profiler;
  // The ring's size. 64 MiB holds about 2 M events: the last few hundred
  // steps of a typical PyTorch loop at operator level.
  uint32_t ring_mb = 64;
  // A slow step: longer than slow_step_factor x the median of the last
  // slow_step_window steps (0: no slow-step trigger). 3x: steady training
  // varies its step time by tens of percent, and a step that takes three
  // times the median is an event, not noise. 50 steps: a median that holds
  // through a few odd steps and follows a schedule's changes within a minute
  // or so of training.
  double slow_step_factor = 3.0;
  uint32_t slow_step_window = 50;
  // No slow-step dump before this many steps were measured: the first
  // steps (compilation, warm-up, caches) are slow by nature.
  uint32_t slow_step_min_steps = 10;
  // Consecutive slow steps are one incident: one dump, written when a
  // normal step ends them (or after 10 of them, or when recording stops),
  // holding them all, its reason saying whose time they were (the
  // training thread's wait for a CPU, data, communication, computing, or
  // blocked). At most one slow-step dump, and one out-of-memory dump, per
  // this many seconds; a slow step at least twice the ratio of the last one
  // dumped is dumped within it too (a larger incident is never held back).
  double cooldown_s = 300.0;
  // A hang: no step ended for this many seconds since the last one (0:
  // none). Armed by the first step (setup may take long), once per hang:
  // the next step re-arms it. 600 s: longer than a normal step, an
  // evaluation pass or a checkpoint, shorter than the collective timeouts
  // that end a hung job (NCCL's default is 30 minutes), so the dump is
  // written while the job still lives.
  double hang_timeout_s = 600.0;
  // A file that something else fills with the threads' stacks when no step
  // ended for hang_timeout_s (in Python, faulthandler's watchdog thread,
  // which needs no GIL); a hang's dump holds its text as hang_stacks.txt
  // (waiting up to 1 s for it), and the file is emptied for the next hang.
  std::string hang_stacks_file;
  // A hang's dump also holds every thread's native stack (native_stacks.txt:
  // each thread is signalled in turn and writes its backtrace, functions
  // exported by shared libraries by name, such as a communication
  // library's collective, the rest as file(+offset)). A thread that blocks
  // signals, or is in the kernel, is listed as such.
  bool hang_native_stacks = true;
  // A dump on request from outside the process: this signal (kill -USR1
  // PID; 0: none), or this file appearing (touch it; it is removed when the
  // dump is written; "": none). Both are looked at every 100 ms, and served
  // at most once a second: requests within a second of a dump wait, as one.
  int dump_signal = 10;  // SIGUSR1 on Linux
  std::string dump_file;
  // Each dump is analysed (its outputs written) after it is written.
  bool analyse = true;
  // Per-step health, always, without a trace: each step's time, the
  // training loop's wait for data ("wait" data stages: profiler.data_process
  // on), time in communication calls, the process's CPU time and the
  // training thread's time on a CPU and waiting for one, kept for
  // the last health_steps steps and written with each dump as
  // step_health.csv (not with a crash's).
  uint32_t health_steps = 1000;
  // The health as metrics for Prometheus (text format 0.0.4; steps and
  // seconds as counters, the last step, the median step and when the last
  // step ended as gauges, dumps by trigger; labels rank and pid):
  // - metrics_file: written every metrics_interval_s, atomically (a
  //   temporary file renamed), mode 0644 so that node_exporter, which
  //   often runs as another user, can read it: give a path ending in
  //   ".prom" in the directory of its --collector.textfile.directory;
  // - metrics_port >= 0: served at http://metrics_address:metrics_port/metrics
  //   by a thread of the recorder (0: a port the system picks, see
  //   metrics_url()). 127.0.0.1 by default: only a scraper on this machine
  //   reaches it; "0.0.0.0" opens it to the network, unauthenticated.
  std::string metrics_file;
  double metrics_interval_s = 5.0;
  int metrics_port = -1;  // -1: no endpoint
  std::string metrics_address = "127.0.0.1";
  // All ranks dump the same steps: in a job of several ranks (the world
  // size from the communication runtime or the launcher's environment),
  // a rank's dump is announced to the others under output_path, which every
  // rank must see (one machine or a shared file system). Every rank with a
  // recorder then dumps at once (polled every 100 ms) into one directory
  // flight_incident_{stamp}_{trigger}_{step}/, each dump saying which rank
  // announced it and why, and the last rank to finish runs the cluster
  // analysis there (cluster_analysis_output/): the straggler of the
  // incident's steps, and for a hang the collective some ranks entered and
  // others did not, the missing ranks and their stacks (the collectives of
  // torch.distributed are followed with profiler.profile_communication or
  // record_shapes, MPI's always). Ranks that trigger alike (all ranks of a
  // hung job) join the first one's incident. When a rank never dumps, the
  // announcer runs the cluster analysis after incident_wait_s on what is
  // there. false: each rank dumps on its own triggers only.
  bool all_ranks = true;
  double incident_wait_s = 60.0;
  // Wrong numbers are incidents. A loss reported with loss() that is NaN
  // or infinite dumps the ring ("non_finite_loss"), once per recorder (a
  // loss that went NaN stays so), in a job of several ranks on every rank
  // as one incident whose report names the first rank whose loss went
  // wrong. The Python recorder reports the tensor backward() is called
  // on, a step late when it is on a device (a copy that never waits).
  bool check_loss = true;
  // A finite loss above this many times the median of the window's losses
  // (after slow_step_min_steps of them) dumps too ("loss_spike", at most
  // once per cooldown_s; 0: off).
  double loss_spike_factor = 0;
  // The Python recorder also reports the gradients' norm each optimizer
  // step (a reduction over every gradient: measured in
  // docs/PERFORMANCE.md); a non-finite one dumps ("non_finite_gradients",
  // once). gradient_norm() reports it from C++ whatever this says.
  bool check_gradients = false;
};

// What one dump was.
struct FlightDump {
  std::string run_dir;  // "" when it failed
  // "slow_step", "hang", "request", "exception", "signal", "file",
  // "out_of_memory" (an allocation failed: written on the failing thread
  // before the error goes on, at most once per cooldown_s),
  // "non_finite_loss", "loss_spike", "non_finite_gradients". A crash's
  // dump is not listed: the process ends.
  std::string trigger;
  std::string reason;  // what fired, in words
  std::string error;   // why it failed ("" when it did not)
};

class FlightRecorder {
 public:
  // Starts recording (a message says why when it cannot: another profiler
  // recording, no memory for the ring; the training goes on).
  explicit FlightRecorder(FlightRecorderOptions options);
  // Stops recording; waits for the dumps under way.
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  bool recording() const;
  // Ends the current step (ProfilerStep#N) and checks it against the slow-step trigger.
  void step();
  int64_t step_num() const;
  // The loss of step `step` (-1: the step under way), and the norm of its
  // gradients: kept in the step health (step_health.csv) and checked as
  // check_loss, loss_spike_factor and check_gradients say.
  void loss(double value, int64_t step = -1);
  void gradient_norm(double value, int64_t step = -1);
  // Writes the ring now; `reason` is said in profiler_info.json, with
  // `trigger` ("request"; the Python package says "exception" for an
  // exception that ends the training). Returns the dump (waits for it to be
  // written, and analysed when options say so).
  FlightDump dump(std::string_view reason = "requested", std::string_view trigger = "request");
  // The dumps so far, oldest first (slow-step dumps once written).
  std::vector<FlightDump> dumps() const;
  // Waits until the dumps triggered so far are written (and analysed).
  void wait_for_dumps();
  // Stops recording (idempotent); what the ring holds is discarded.
  void stop();
  // Where the metrics are served ("http://127.0.0.1:PORT/metrics"), or "".
  std::string metrics_url() const;
  // The metrics now, in Prometheus' text format.
  std::string metrics_text() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainprof

#endif  // TRAINPROF_FLIGHT_RECORDER_H_
