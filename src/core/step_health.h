// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Per-step health, without a trace: how long each step took, how much of it the
// training loop waited for data, spent in communication calls, and how much CPU
// the process used, kept for the last steps and summed, for the flight
// recorder's dumps (step_health.csv) and for monitoring systems (Prometheus'
// text format).
#ifndef TRAINPROF_CORE_STEP_HEALTH_H_
#define TRAINPROF_CORE_STEP_HEALTH_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace trainprof::core {

// The recording paths add to these as they record, whoever listens (relaxed
// atomics, a few nanoseconds): the training loop's waits for data ("wait"
// data stages) and communication calls, in ticks.
void add_data_wait_ticks(uint64_t ticks) noexcept;
void add_comm_ticks(uint64_t ticks) noexcept;

struct StepHealth {
  int64_t step = 0;
  uint64_t end_realtime_ns = 0;  // when it ended, Unix time
  uint64_t step_ns = 0;
  uint64_t data_wait_ns = 0;  // the loop waiting for a batch
  uint64_t comm_ns = 0;       // in collectives and point-to-point calls
  uint64_t cpu_ns = 0;        // the process's CPU time, all its threads
  // The thread that ends the steps (the training loop's): its time on a
  // CPU, and ready to run but waiting for one (another process or the
  // system held the CPUs), from the kernel's scheduler statistics; 0 where
  // the kernel keeps none, or when another thread ended the step before.
  uint64_t thread_cpu_ns = 0;
  uint64_t thread_cpu_wait_ns = 0;
  // What the training reported of the step (FlightRecorder::loss,
  // gradient_norm): NaN and infinities included.
  std::optional<double> loss;
  std::optional<double> gradient_norm;
};

// The last `capacity` steps' health and the totals since start(). Not
// thread-safe: its owner (the flight recorder) locks around it.
class HealthSeries {
 public:
  explicit HealthSeries(size_t capacity);
  ~HealthSeries();
  HealthSeries(const HealthSeries&) = delete;
  HealthSeries& operator=(const HealthSeries&) = delete;
  // The counters now are the first step's start.
  void start();
  // A step ended after `step_ns`: its health is what the counters gained since the last.
  const StepHealth& on_step(int64_t step, uint64_t step_ns);

  // The loss or the gradients' norm of step `step`, ended or under way
  // (reported a step late when read from a device without waiting for it).
  void set_loss(int64_t step, double value);
  void set_gradient_norm(int64_t step, double value);

  const std::deque<StepHealth>& steps() const { return steps_; }
  const StepHealth& totals() const { return totals_; }  // step: how many steps
  // The last step's health (zeros before the first).
  StepHealth last() const { return steps_.empty() ? StepHealth{} : steps_.back(); }
  // step_health.csv: a header, then a row per kept step, oldest first,
  // then the steps under way with only what was reported of them (loss,
  // gradient norm).
  std::string csv() const;

 private:
  // The calling thread's scheduler statistics (its file kept open while
  // the same thread ends the steps); false where the kernel keeps none.
  bool read_thread_schedstat(uint64_t* on_cpu_ns, uint64_t* waiting_ns);

  size_t capacity_;
  std::deque<StepHealth> steps_;
  StepHealth totals_;
  uint64_t data_wait_ticks_at_ = 0, comm_ticks_at_ = 0, cpu_ns_at_ = 0;
  // Reports for steps not ended yet, by step.
  std::map<int64_t, StepHealth> ahead_;
  // The kept step `step`, or the one ahead_ holds for it.
  StepHealth* reported_step(int64_t step);
  int schedstat_fd_ = -1;
  long schedstat_tid_ = 0;  // whose file schedstat_fd_ is; 0: none
  uint64_t thread_cpu_ns_at_ = 0, thread_wait_ns_at_ = 0;
  bool thread_known_ = false;  // the values above are the same thread's, read at the last step
};

// A reported number as the health writes it: "nan" (whatever its sign
// bit), "inf", "-inf", or the number in 9 significant digits.
std::string number_text(double value);

// What the metrics say besides the series.
struct HealthLabels {
  int rank = 0;
  long pid = 0;
};

// Prometheus' text exposition format (0.0.4) of a series' `totals` and
// `last` step: counters of steps and of seconds (step, data wait,
// communication, CPU: rate() of one over the steps' is its share), the last
// step as gauges, the median step of the slow-step window, when the last
// step ended (a hang shows as its age), and the dumps written by trigger.
std::string prometheus_text(const StepHealth& totals, const StepHealth& last, const HealthLabels& labels,
                            uint64_t median_step_ns, const std::map<std::string, uint64_t>& dumps_by_trigger);

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_STEP_HEALTH_H_
