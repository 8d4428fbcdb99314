// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// TRAINPROF_OPTIONS: profiling without code changes.
#include <cstdlib>
#include <exception>

#include "base/log.h"
#include "trainprof/env.h"
#include "trainprof/flight_recorder.h"
#include "trainprof/profiler.h"

namespace trainprof {
namespace {

Profiler* g_env_profiler = nullptr;               // leaked on purpose: stopped by atexit
FlightRecorder* g_env_flight_recorder = nullptr;  // likewise

void stop_env_profiler_at_exit() {
  if (g_env_profiler != nullptr && g_env_profiler->started()) g_env_profiler->stop();
}

void stop_env_flight_recorder_at_exit() {
  if (g_env_flight_recorder == nullptr) return;
  g_env_flight_recorder->stop();  // writes the dumps already triggered
  size_t dumps = g_env_flight_recorder->dumps().size();
  base::log_info("flight recorder: " + std::to_string(g_env_flight_recorder->step_num()) + " steps, " +
                 std::to_string(dumps) + (dumps == 1 ? " dump" : " dumps"));
}

// Runs when the library is loaded (linked or LD_PRELOADed), before main().
__attribute__((constructor)) void activate_from_environment() {
  const char* text = std::getenv(kOptionsEnvVar);
  if (text == nullptr) return;
  try {
    EnvOptions env = parse_options_json(text);
    if (!env.start) {
      base::log_info(std::string(kOptionsEnvVar) + " has \"start\": false; not profiling");
      return;
    }
    if (env.flight_recorder) {
      g_env_flight_recorder = new FlightRecorder(env.flight);
      std::atexit(stop_env_flight_recorder_at_exit);
      base::log_info("flight recorder on (from " + std::string(kOptionsEnvVar) + "): dumps go to " +
                     env.flight.profiler.output_path);
      return;
    }
    env.options.start_profile = true;
    if (env.analyse) env.options.on_trace_ready = trace_handler(env.options.output_path);
    g_env_profiler = new Profiler(env.options);
    std::atexit(stop_env_profiler_at_exit);
    base::log_info("profiling this process (from " + std::string(kOptionsEnvVar) + ") into " +
                   g_env_profiler->current_run_dir());
  } catch (const std::exception& e) {
    base::log_error(std::string(e.what()) + "; this process runs without profiling");
  }
}

}  // namespace

Profiler* env_profiler() {
  return g_env_profiler;
}

FlightRecorder* env_flight_recorder() {
  return g_env_flight_recorder;
}

}  // namespace trainprof
