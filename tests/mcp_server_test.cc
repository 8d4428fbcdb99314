// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// McpServer: the Model Context Protocol's messages as an agent sends them,
// answered in process (python/tests/test_mcp.py drives `trainprof mcp` with
// the protocol's own client).
#include "trainprof/mcp.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_util.h"
#include "trainprof/trainprof.h"

namespace trainprof {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;

std::string record_run(const std::string& dir, int compute_ms) {
  ProfilerOptions o;
  o.output_path = dir;
  Profiler prof(o);
  for (int s = 0; s < 4; ++s) {
    {
      TRAINPROF_RANGE("mcp_compute");
      std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms));
    }
    if (s + 1 < 4) prof.step();
  }
  prof.stop();
  return prof.last_run().run_dir;
}

json ask(McpServer& server, const std::string& method, json params = json::object(), int id = 1) {
  json request = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
  std::string reply = server.handle(request.dump());
  EXPECT_EQ(reply.find('\n'), std::string::npos) << "one message a line";
  return json::parse(reply);
}

// A tool's answer: its text, and whether it is an error.
std::pair<std::string, bool> call(McpServer& server, const std::string& tool, json args) {
  json r = ask(server, "tools/call", {{"name", tool}, {"arguments", std::move(args)}});
  EXPECT_TRUE(r.contains("result")) << r.dump();
  if (!r.contains("result")) return {r.dump(), true};
  return {r["result"]["content"][0]["text"].get<std::string>(), r["result"]["isError"].get<bool>()};
}

TEST(McpServer, TheHandshakeAndTheProtocolsErrors) {
  TempDir dir;
  McpServer server({.root = dir.path()});
  json init = ask(server, "initialize",
                  {{"protocolVersion", "2025-06-18"},
                   {"capabilities", json::object()},
                   {"clientInfo", {{"name", "test"}, {"version", "1"}}}});
  EXPECT_EQ(init["result"]["protocolVersion"], "2025-06-18");  // a revision it speaks: the same
  EXPECT_EQ(init["result"]["serverInfo"]["name"], "trainprof");
  EXPECT_EQ(init["result"]["capabilities"]["tools"]["listChanged"], false);
  EXPECT_EQ(ask(server, "initialize", {{"protocolVersion", "2099-01-01"}})["result"]["protocolVersion"],
            "2025-11-25");  // one it does not: its latest
  EXPECT_EQ(server.handle(R"({"jsonrpc":"2.0","method":"notifications/initialized"})"), "");
  EXPECT_EQ(ask(server, "ping")["result"], json::object());

  json tools = ask(server, "tools/list")["result"]["tools"];
  std::vector<std::string> names;
  for (const json& t : tools) {
    names.push_back(t["name"]);
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t.dump();
    EXPECT_FALSE(t["description"].get<std::string>().empty());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"list_runs", "summary", "advise", "sql", "diff", "critical_path",
                                             "key_averages"}));

  EXPECT_EQ(ask(server, "resources/list")["error"]["code"], -32601);
  EXPECT_EQ(json::parse(server.handle("{not json"))["error"]["code"], -32700);
  EXPECT_EQ(server.handle(" \r"), "");  // a blank line between messages
  EXPECT_EQ(json::parse(server.handle(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})"))["error"]["code"],
            -32600);
  EXPECT_EQ(json::parse(server.handle("[1, 2]"))["error"]["code"], -32600);
  json unknown = ask(server, "tools/call", {{"name", "sumary"}, {"arguments", json::object()}});
  EXPECT_EQ(unknown["error"]["code"], -32602);
  EXPECT_NE(unknown["error"]["message"].get<std::string>().find("did you mean summary"), std::string::npos)
      << unknown.dump();
  EXPECT_EQ(ask(server, "tools/call", {{"name", "summary"}, {"arguments", 3}})["error"]["code"], -32602);
  auto [text, is_error] = call(server, "summary", json::object());
  EXPECT_TRUE(is_error);
  EXPECT_NE(text.find("'path' is required"), std::string::npos) << text;

  EXPECT_THROW(McpServer({.root = dir.sub("missing")}), std::invalid_argument);
}

TEST(McpServer, ToolsReadTheRunsUnderTheRootAndNothingElse) {
  TempDir dir;
  std::string a = record_run(dir.sub("runs/a"), 2);
  std::string b = record_run(dir.sub("runs/b"), 12);
  McpServer server({.root = dir.path()});

  auto [runs, runs_error] = call(server, "list_runs", json::object());
  ASSERT_FALSE(runs_error) << runs;
  json listed = json::parse(runs)["runs"];
  ASSERT_EQ(listed.size(), 2u) << runs;
  EXPECT_EQ(listed[0]["analysed"], false);
  EXPECT_EQ(listed[0]["run"], fs::relative(a, dir.path()).string());

  auto [summary, summary_error] = call(server, "summary", {{"path", "runs/a"}});  // analysed on the way
  ASSERT_FALSE(summary_error) << summary;
  EXPECT_NE(summary.find("mcp_compute"), std::string::npos) << summary;
  EXPECT_TRUE(fs::exists(fs::path(a) / "PROFILER_OUTPUT" / "critical_path.csv"));

  auto [advice, advice_error] = call(server, "advise", {{"path", "runs/a"}});
  ASSERT_FALSE(advice_error) << advice;
  EXPECT_TRUE(json::parse(advice)["findings"].is_array()) << advice;

  auto [path, path_error] = call(server, "critical_path", {{"run", "runs/a"}});
  ASSERT_FALSE(path_error) << path;
  EXPECT_NE(path.find("(the slowest)"), std::string::npos) << path;
  EXPECT_NE(path.find("mcp_compute"), std::string::npos) << path;
  auto [no_step, no_step_error] = call(server, "critical_path", {{"run", "runs/a"}, {"step", 99}});
  EXPECT_TRUE(no_step_error);
  EXPECT_NE(no_step.find("the steps are: "), std::string::npos) << no_step;

  auto [keys, keys_error] = call(server, "key_averages", {{"run", "runs/a"}, {"row_limit", 1}});
  ASSERT_FALSE(keys_error) << keys;
  EXPECT_NE(keys.find("more: raise row_limit"), std::string::npos) << keys;

  auto [diff, diff_error] = call(server, "diff", {{"run_a", "runs/a"}, {"run_b", "runs/b"}});
  ASSERT_FALSE(diff_error) << diff;
  EXPECT_NE(diff.find("mcp_compute"), std::string::npos) << diff;

  // SQL: the run's own database, read-only, one statement.
  AnalyseOptions db;
  db.export_db = true;
  ASSERT_TRUE(analyse(a, db).ok());
  auto [rows, rows_error] =
      call(server, "sql", {{"path", "runs/a"}, {"query", "SELECT COUNT(*) > 0 FROM slices"}});
  ASSERT_FALSE(rows_error) << rows;
  EXPECT_NE(rows.find("\n1\n"), std::string::npos) << rows;
  for (const char* write : {"DELETE FROM slices", "CREATE TABLE t(x)", "SELECT 1; DROP TABLE slices"}) {
    auto [refused, refused_error] = call(server, "sql", {{"path", "runs/a"}, {"query", write}});
    EXPECT_TRUE(refused_error) << write << ": " << refused;
  }
  auto [still, still_error] =
      call(server, "sql", {{"path", "runs/a"}, {"query", "SELECT COUNT(*) FROM slices"}});
  EXPECT_FALSE(still_error) << still;  // the refusals changed nothing
  EXPECT_NE(still.find("COUNT(*)\n"), std::string::npos) << still;
  auto [limited, limited_error] =
      call(server, "sql", {{"path", "runs/a"}, {"query", "SELECT * FROM slices"}, {"max_rows", 1}});
  ASSERT_FALSE(limited_error) << limited;
  EXPECT_NE(limited.find("more rows not shown"), std::string::npos) << limited;

  // Nothing outside the root: up, absolute, or through a symlink.
  fs::create_directory_symlink("/", dir.sub("out"));
  for (const char* outside : {"..", "/etc", "out/etc", "runs/../../"}) {
    auto [refused, refused_error] = call(server, "list_runs", {{"path", outside}});
    EXPECT_TRUE(refused_error) << outside;
    EXPECT_NE(refused.find("outside the root"), std::string::npos) << outside << ": " << refused;
  }
  auto [nul, nul_error] = call(server, "list_runs", {{"path", std::string("runs\0/../..", 11)}});
  EXPECT_TRUE(nul_error);
  EXPECT_EQ(nul, "a path cannot hold a NUL byte");

  // Every answer bounded, and said to be cut.
  McpServer small({.root = dir.path(), .max_answer_bytes = 200});
  auto [cut, cut_error] = call(small, "summary", {{"path", "runs"}});
  ASSERT_FALSE(cut_error) << cut;
  EXPECT_LT(cut.size(), 400u);
  EXPECT_NE(cut.find("[cut at 200 bytes of "), std::string::npos) << cut;
}

}  // namespace
}  // namespace trainprof
