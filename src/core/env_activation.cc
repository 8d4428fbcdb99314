// Copyright trainprof authors. TRAINPROF_OPTIONS: profiling without code changes.
#include <cstdlib>
#include <exception>

#include "base/log.h"
#include "trainprof/env.h"
#include "trainprof/profiler.h"

namespace trainprof {
namespace {

Profiler* g_env_profiler = nullptr;  // leaked on purpose: stopped by atexit

void stop_env_profiler_at_exit() {
  if (g_env_profiler != nullptr && g_env_profiler->started()) g_env_profiler->stop();
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

}  // namespace trainprof
