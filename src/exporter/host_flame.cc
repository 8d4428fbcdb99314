// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/host_flame.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "base/json_limits.h"

namespace trainprof::exporter {
namespace {

using nlohmann::json;
using ThreadKey = std::pair<int64_t, int64_t>;  // pid, tid

constexpr char kStepPrefix[] = "ProfilerStep#";

// The tree while it is read: nodes by index, each child found by name.
struct Tree {
  struct Node {
    std::string name;
    double us = 0;
    std::map<std::string, size_t> children;
  };
  std::vector<Node> nodes{Node{"host time per step", 0, {}}};

  size_t child(size_t parent, const std::string& name) {
    auto it = nodes[parent].children.find(name);
    if (it != nodes[parent].children.end()) return it->second;
    nodes.push_back({name, 0, {}});
    nodes[parent].children.emplace(name, nodes.size() - 1);
    return nodes.size() - 1;
  }

  FlameNode finish(size_t index, double steps) const {
    const Node& n = nodes[index];
    FlameNode out{n.name, n.us / steps, {}};
    for (const auto& [name, child_index] : n.children) out.children.push_back(finish(child_index, steps));
    std::stable_sort(out.children.begin(), out.children.end(),
                     [](const FlameNode& a, const FlameNode& b) { return a.us > b.us; });
    return out;
  }
};

// One step being read: its window, its thread, and the time each node gets
// once the step is whole (a step cut short by the slice limit adds nothing).
struct OpenStep {
  std::string number;
  double begin = 0, end = 0;
  ThreadKey thread;
  std::map<ThreadKey, std::vector<std::pair<double, size_t>>> stacks;  // per thread: open slices' ends, nodes
  std::vector<std::pair<size_t, double>> pending;                      // node, µs
};

class Reader {
 public:
  HostFlame read(std::istream& in, const CsvRows& python_outside, size_t max_slices) {
    std::string line;
    while (std::getline(in, line)) {
      size_t brace = line.find('{');
      if (brace == std::string::npos) continue;
      // Host slices: operators, ranges, and the data pipeline's stages
      // (the DataLoader workers' on tracks of their own).
      bool slice =
          line.find("\"X\"") != std::string::npos && (line.find("\"cpu_op\"") != std::string::npos ||
                                                      line.find("\"user_annotation\"") != std::string::npos ||
                                                      line.find("\"dataset\"") != std::string::npos);
      bool metadata = !slice && line.find("_name\"") != std::string::npos;
      if (!slice && !metadata) continue;
      while (!line.empty() && (line.back() == ',' || line.back() == '\r' || line.back() == ' '))
        line.pop_back();
      json e = json::parse(line.begin() + static_cast<std::ptrdiff_t>(brace), line.end(), nullptr, false);
      if (!e.is_object()) continue;
      if (metadata) {
        name_of(e);
        continue;
      }
      if (++out_.slices > max_slices) {
        out_.cut = true;
        break;
      }
      add(e);
    }
    if (!out_.cut && step_) close_step();  // the trace ended with the step
    add_python(python_outside);
    out_.root = tree_.finish(0, std::max<size_t>(out_.steps, 1));
    if (out_.steps == 0) out_.root.children.clear();
    out_.root.us = 0;  // all threads' time
    for (const FlameNode& thread : out_.root.children) out_.root.us += thread.us;
    return std::move(out_);
  }

 private:
  // The trace is read back, maybe edited: a field of another type is a
  // default, never an exception.
  static int64_t integer(const json& e, const char* key) {
    auto it = e.find(key);
    return it != e.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  }

  void name_of(const json& e) {
    if (!e.contains("args") || !e["args"].is_object()) return;
    std::string name = base::string_field(e["args"], "name");
    int64_t pid = integer(e, "pid"), tid = integer(e, "tid");
    std::string kind = base::string_field(e, "name");
    if (kind == "thread_name") thread_names_[{pid, tid}] = name;
    if (kind == "process_name") process_names_[pid] = name;
  }

  std::string thread_label(const ThreadKey& key) const {
    auto named = thread_names_.find(key);
    std::string thread =
        named != thread_names_.end() ? named->second : "thread " + std::to_string(key.second);
    if (step_ && key.first == step_->thread.first) return thread;
    auto process = process_names_.find(key.first);
    return (process != process_names_.end() ? process->second : "pid " + std::to_string(key.first)) + " / " +
           thread;
  }

  void add(const json& e) {
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) return;
    double ts = e["ts"].get<double>(), dur = std::max(0.0, e["dur"].get<double>());
    if (!std::isfinite(ts) || !std::isfinite(dur)) return;
    std::string name = base::string_field(e, "name");
    ThreadKey key{integer(e, "pid"), integer(e, "tid")};
    if (step_ && ts >= step_->end) close_step();
    if (name.rfind(kStepPrefix, 0) == 0) {
      if (step_) return;  // a step inside a step: not a new window
      step_ = OpenStep{name.substr(sizeof(kStepPrefix) - 1), ts, ts + dur, key, {}, {}};
      step_->pending.push_back({thread_node(key), dur});
      return;
    }
    if (!step_ || ts < step_->begin) return;
    double end = std::min(ts + dur, step_->end);
    auto& stack = step_->stacks[key];
    while (!stack.empty() && stack.back().first <= ts) stack.pop_back();
    size_t parent = stack.empty() ? thread_node(key) : stack.back().second;
    size_t node = tree_.child(parent, name);
    step_->pending.push_back({node, end - ts});
    // A slice on another thread than the step's counts toward its thread.
    if (stack.empty() && key != step_->thread) step_->pending.push_back({parent, end - ts});
    stack.push_back({end, node});
  }

  size_t thread_node(const ThreadKey& key) {
    auto it = thread_nodes_.find(key);
    if (it != thread_nodes_.end()) return it->second;
    size_t node = tree_.child(0, thread_label(key));
    thread_nodes_.emplace(key, node);
    return node;
  }

  void close_step() {
    for (const auto& [node, us] : step_->pending) tree_.nodes[node].us += us;
    steps_read_.insert(step_->number);
    step_thread_ = thread_nodes_[step_->thread];
    ++out_.steps;
    step_.reset();
  }

  // The functions the stack samples found outside every operator, in the
  // steps read, under the step's thread.
  void add_python(const CsvRows& rows) {
    if (rows.size() < 2 || out_.steps == 0) return;
    const std::vector<std::string>& h = rows[0];
    auto col = [&](const char* name) {
      auto it = std::find(h.begin(), h.end(), name);
      return it == h.end() ? h.size() : static_cast<size_t>(it - h.begin());
    };
    size_t step = col("Step"), function = col("Function"), file = col("File"), line = col("Line"),
           time = col("Time(us)");
    if (time >= h.size() || step >= h.size() || function >= h.size()) return;
    size_t outside = 0;
    for (size_t r = 1; r < rows.size(); ++r) {
      const std::vector<std::string>& row = rows[r];
      if (row.size() < h.size() || steps_read_.count(row[step]) == 0) continue;
      double us = std::strtod(row[time].c_str(), nullptr);
      if (!(us > 0)) continue;
      if (outside == 0) outside = tree_.child(step_thread_, "Python outside operators");
      std::string where = file < h.size() ? row[file] : "";
      if (line < h.size() && !row[line].empty()) where += ":" + row[line];
      tree_.nodes[tree_.child(outside, row[function] + " (" + where + ")")].us += us;
      tree_.nodes[outside].us += us;
    }
  }

  Tree tree_;
  HostFlame out_;
  std::optional<OpenStep> step_;
  std::map<ThreadKey, size_t> thread_nodes_;
  std::map<ThreadKey, std::string> thread_names_;
  std::map<int64_t, std::string> process_names_;
  std::set<std::string> steps_read_;
  size_t step_thread_ = 0;
};

}  // namespace

HostFlame read_host_flame(std::istream& trace_json, const CsvRows& python_outside, size_t max_slices) {
  return Reader().read(trace_json, python_outside, max_slices);
}

HostFlame read_host_flame(const std::string& trace_json, const CsvRows& python_outside, size_t max_slices) {
  std::ifstream in(trace_json);
  return read_host_flame(in, python_outside, max_slices);
}

}  // namespace trainprof::exporter
