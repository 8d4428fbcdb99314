// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The callable behind trainprof::trace_handler().
//
// A Profiler whose on_trace_ready holds a TraceHandler writes its runs into
// the handler's directory with the handler's worker name (the constructor
// recognises it through std::function::target).
#ifndef TRAINPROF_CORE_TRACE_HANDLER_H_
#define TRAINPROF_CORE_TRACE_HANDLER_H_

#include <string>

namespace trainprof {
class Profiler;
namespace core {

struct TraceHandler {
  std::string dir;
  std::string worker_name;
  bool analyse = true;
  bool async = false;
  void operator()(Profiler& profiler) const;
};

}  // namespace core
}  // namespace trainprof

#endif  // TRAINPROF_CORE_TRACE_HANDLER_H_
