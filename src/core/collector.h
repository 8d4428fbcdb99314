// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Collectors: optional sources of events that live in their own libraries
// (LibTorch operators, later CUPTI, MPI).
//
// A collector registers itself once, from its library's load-time
// constructor; the session starts it right after recording is turned on and
// stops it before the raw data is flushed. A collector registered while a
// session is already open (a library preloaded after TRAINPROF_OPTIONS opened
// one) is started at once. start() and stop() run under the registry's lock,
// never concurrently with each other.
#ifndef TRAINPROF_CORE_COLLECTOR_H_
#define TRAINPROF_CORE_COLLECTOR_H_

#include <string>
#include <string_view>

#include "trainprof/frontend.h"
#include "trainprof/options.h"

namespace trainprof::core {

class Collector {
 public:
  virtual ~Collector() = default;
  virtual std::string_view name() const = 0;
  // Begins recording with the session's options. Must not throw.
  virtual void start(const ProfilerOptions& options) noexcept = 0;
  virtual void stop() noexcept = 0;
  // What the last session should know of this collector (a JSON object's
  // text, "" for nothing), read after stop() for profiler_info.json.
  virtual std::string info_json() const { return {}; }
};

// `collector` must live until the process ends.
void register_collector(Collector* collector);

// Names of the registered collectors (profiler_info.json says what recorded).
std::string collector_names();

// The collectors' info_json() by name ("" when none has any).
std::string collectors_info_json();

// The host language's context of an operator (set_context_providers,
// trainprof/frontend.h), as the collectors read it.
detail::ContextProvider stack_provider() noexcept;
detail::ContextProvider module_provider() noexcept;

// The framework operator open on the calling thread (interned), or nullptr:
// registered by a collector that follows its operators' nesting (the
// LibTorch collector), read by others (the GPU collector names the operator
// that captured a CUDA graph node).
using OpenOperatorFn = const char* (*)() noexcept;
void register_open_operator(OpenOperatorFn fn) noexcept;
const char* open_operator() noexcept;  // nullptr when none is open or none registered

// Session side.
void start_collectors(const ProfilerOptions& options);
void stop_collectors();

}  // namespace trainprof::core

#endif  // TRAINPROF_CORE_COLLECTOR_H_
