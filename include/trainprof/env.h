// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Activation without code changes.
//
// When the library loads and TRAINPROF_OPTIONS holds a JSON object such as
//   {"start": true, "output_path": "/tmp/prof", "buffer_mb": 128}
// a profiler is started for the whole process and stopped (and flushed) at exit.
// Keys are the ProfilerOptions field names; "start" is mandatory; "schedule"
// is {"wait": W, "warmup": W, "active": A, "repeat": R, "skip_first": S} (its
// steps are env_profiler()->step() calls; in Python, optimizer.step());
// "analyse": true analyses each run as it closes (trace_handler); a run's
// recorded "options" (profiler_info.json) plus "start" parse back to the same
// options. Callbacks cannot be given this way. A malformed value is reported on stderr and the
// program runs unprofiled.
//
// "flight_recorder": true (or an object of FlightRecorderOptions' fields:
// ring_mb, slow_step_factor, slow_step_window, slow_step_min_steps,
// cooldown_s, hang_timeout_s, hang_native_stacks, dump_signal, dump_file, analyse, health_steps,
// metrics_file, metrics_interval_s, metrics_port, metrics_address) starts a
// FlightRecorder instead: always recording into memory, dumping runs under
// output_path when a step is slow, the process hangs, crashes or is asked
// (its steps: env_flight_recorder()->step(); in Python, optimizer.step()).
// It has no schedule; the top-level "analyse", when given, says whether its
// dumps are analysed (they are by default).
#ifndef TRAINPROF_ENV_H_
#define TRAINPROF_ENV_H_

#include <string_view>

#include "trainprof/flight_recorder.h"
#include "trainprof/options.h"

namespace trainprof {

inline constexpr const char* kOptionsEnvVar = "TRAINPROF_OPTIONS";

struct EnvOptions {
  bool start = false;
  bool analyse = false;  // on_trace_ready = trace_handler(output_path) analysing each run
  ProfilerOptions options;
  // "flight_recorder": a FlightRecorder records instead of a Profiler, with
  // these settings (its `profiler` member is `options`).
  bool flight_recorder = false;
  FlightRecorderOptions flight;
};

// Parses the JSON text of TRAINPROF_OPTIONS. Throws std::invalid_argument with a
// message naming the problem (bad JSON, missing "start", unknown key, wrong type).
EnvOptions parse_options_json(std::string_view json);

// The profiler started from TRAINPROF_OPTIONS, or nullptr when there is none.
class Profiler;
Profiler* env_profiler();
// The flight recorder started from TRAINPROF_OPTIONS, or nullptr.
FlightRecorder* env_flight_recorder();

}  // namespace trainprof

#endif  // TRAINPROF_ENV_H_
