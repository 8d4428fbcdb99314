// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Native call stacks (with_stack), symbolized at analysis time.
//
// The collector records each frame as "module path+0xoffset" (offset from
// the module's load address, so the text does not depend on where the
// process mapped it); frames are separated by ';'. Symbolizing reads each
// module's ELF symbol table (.symtab, else .dynsym) once and names the
// function that contains the offset, demangled. Frames of the profiler, of
// LibTorch and of the C/C++ runtimes are dropped: what remains is the code
// that called into the framework.
#ifndef TRAINPROF_ANALYSIS_SYMBOLIZER_H_
#define TRAINPROF_ANALYSIS_SYMBOLIZER_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trainprof::analysis {

class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();

  // "frame;frame;..." -> "function (module);function (module);..." in the
  // same order (innermost first), framework frames dropped. A frame that
  // cannot be symbolized (module gone, no symbol, malformed text) is kept as
  // "module+0xoffset" or as given.
  std::string symbolize(std::string_view frames);
  // What was refused: modules that are not regular files (never opened).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  class Module;
  Module& module(const std::string& path);
  std::string frame(std::string_view text);

  std::map<std::string, std::unique_ptr<Module>> modules_;
  std::vector<std::string> warnings_;
};

}  // namespace trainprof::analysis

#endif  // TRAINPROF_ANALYSIS_SYMBOLIZER_H_
