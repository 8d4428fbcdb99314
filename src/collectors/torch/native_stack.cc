// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/torch/native_stack.h"

#include <dlfcn.h>
#include <link.h>

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <utility>

namespace trainprof::torch {
namespace {

// The main program's path (its link map names it ""), read once.
const char* main_program_path() {
  static const std::string* path = [] {
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return new std::string(ec ? std::string() : p.string());
  }();
  return path->c_str();
}

// The module that holds `pc`: its path and the address its first segment is
// mapped at, "" when none does. _dl_find_object (glibc 2.35) is a lock-free
// binary search; dladdr, the fallback, also scans the module's symbols for
// the nearest one: in LibTorch's libraries that cost 4-10 ms per training
// step when stacks missed the cache.
std::pair<const char*, uintptr_t> module_of(void* pc) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
  dl_find_object found{};
  if (_dl_find_object(pc, &found) != 0 || found.dlfo_link_map == nullptr) return {"", 0};
  const char* path = found.dlfo_link_map->l_name;
  if (path == nullptr || path[0] == '\0') path = main_program_path();  // the main program's is ""
  return {path, reinterpret_cast<uintptr_t>(found.dlfo_map_start)};
#else
  Dl_info info{};
  if (dladdr(pc, &info) == 0 || info.dli_fname == nullptr) return {"", 0};
  return {info.dli_fname, reinterpret_cast<uintptr_t>(info.dli_fbase)};
#endif
}

}  // namespace

std::string format_native_frames(void* const* frames, int count) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    if (i > 0) text += ';';
    auto [path, base] = module_of(frames[i]);
    if (path[0] == '\0') {
      text += '?';
      continue;
    }
    char hex[20];
    char* end = std::to_chars(hex, hex + sizeof(hex), reinterpret_cast<uintptr_t>(frames[i]) - base, 16).ptr;
    text.append(path).append("+0x").append(hex, end);
  }
  return text;
}

}  // namespace trainprof::torch
