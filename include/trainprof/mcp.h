// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// An agent's interface to the runs under one directory: the Model Context
// Protocol (MCP), JSON-RPC 2.0, one message a line. `trainprof mcp ROOT`
// reads messages from stdin and writes the replies to stdout:
//
//   trainprof::McpServer server({.root = "./prof"});
//   for (std::string line; std::getline(std::cin, line);) {
//     std::string reply = server.handle(line);
//     if (!reply.empty()) std::cout << reply << "\n" << std::flush;
//   }
//
// Its tools read what trainprof writes (docs/GUIDE.md, "Agents"): the runs
// under a path, a run's summary, the advisor's findings as JSON, SQL on a
// run's or a cluster's trainprof.db (read-only), the diff of two runs, a
// step's critical path and the key averages. Every path an agent names is
// taken under ROOT and refused outside it; every answer is cut at
// max_answer_bytes, saying so.
#ifndef TRAINPROF_MCP_H_
#define TRAINPROF_MCP_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace trainprof {

struct McpOptions {
  // The directory the tools may read under (a symlink below it that leads
  // out of it is refused too).
  std::string root;
  // The most a tool's answer holds, in bytes of text.
  size_t max_answer_bytes = 64 * 1024;
};

class McpServer {
 public:
  // Throws std::invalid_argument when `root` is not a directory.
  explicit McpServer(McpOptions options);
  ~McpServer();
  McpServer(const McpServer&) = delete;
  McpServer& operator=(const McpServer&) = delete;

  // One message in, its reply out: "" for a notification or anything that
  // asks for no reply. Never throws: a message that cannot be served gets
  // a JSON-RPC error, a tool that fails a result saying why (isError).
  std::string handle(std::string_view message);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainprof

#endif  // TRAINPROF_MCP_H_
