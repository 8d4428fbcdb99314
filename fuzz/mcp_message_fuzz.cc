// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// `trainprof mcp`'s messages (whatever an agent sends on stdin): one reply
// line or none, never an exception, a crash or a read outside the bytes.
// The server's root is an empty directory: tools that name paths get their
// refusals and errors, which are part of what is fuzzed.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "trainprof/mcp.h"

namespace {

trainprof::McpServer& server() {
  static trainprof::McpServer* s = [] {
    std::string root = (std::filesystem::temp_directory_path() / "trainprof_fuzz_mcp_XXXXXX").string();
    if (mkdtemp(root.data()) == nullptr) std::abort();
    return new trainprof::McpServer({.root = root, .max_answer_bytes = 4096});
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string reply = server().handle(std::string_view(reinterpret_cast<const char*>(data), size));
  if (reply.find('\n') != std::string::npos) std::abort();  // one message a line
  return 0;
}
