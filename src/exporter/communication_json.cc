// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/communication_json.h"
#include "base/json_stream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace trainprof::exporter {
namespace {

using analysis::CommTiming;

// The transports MindSpore's tables list, always all of them.
constexpr const char* kTransports[] = {"RDMA", "HCCS", "PCIE", "SDMA", "SIO"};

double round4(double v) {
  return std::round(v * 1e4) / 1e4;
}

double ratio(double part, double whole) {
  return whole > 0 ? round4(part / whole) : 0;
}

double ms(uint64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

double elapse_ms(const CommTiming& t) {
  return ms(t.elapse_ns());
}

double wait_ms(const CommTiming& t) {
  return ms(t.wait_ns);
}

double transit_ms(const CommTiming& t) {
  return std::max(0.0, elapse_ms(t) - wait_ms(t));
}

double megabytes(const CommTiming& t) {
  return static_cast<double>(t.bytes) / 1e6;
}

const char* transport(const CommTiming& t) {
  return t.one_host ? "SDMA" : "RDMA";
}

const char* kind(const CommTiming& t) {
  return t.transfer ? "p2p" : "collective";
}

std::string op_name(const CommTiming& t) {
  return std::string(t.operation) + "_" + std::to_string(t.sequence);
}

std::string op_key(const CommTiming& t) {
  return op_name(t) + "@" + std::string(t.group);
}

std::string step_key(const CommTiming& t) {
  return t.step >= 0 ? "step" + std::to_string(t.step) : "step";
}

// Python's text of a tuple of ints, the key msprof-analyze writes.
std::string rank_tuple(const std::set<int>& ranks) {
  std::string out = "(";
  for (int r : ranks) out += (out.size() > 1 ? ", " : "") + std::to_string(r);
  return out + (ranks.size() == 1 ? ",)" : ")");
}

// Sums over operations, for the "Total Op Info" entries.
struct Totals {
  double elapse = 0, transit = 0, wait = 0;
  struct PerTransport {
    double mb = 0, ms = 0;
    std::map<std::string, std::pair<uint64_t, double>> sizes;  // size (MB) -> count, ms
  };
  std::map<std::string, PerTransport> by_transport;
};

std::string size_label(double mb) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", mb);
  return text;
}

// The keys below are written in nlohmann's order (sorted), so that the
// text is the one a tree of the same document would dump.

// The time fields; `start_us` (>= 0) an operation's start.
void write_time_info(base::JsonStream& j, double elapse, double transit, double wait, double start_us = -1) {
  double wait_ratio = ratio(wait, wait + transit);
  j.begin_object()
      .field("Elapse Time(ms)", elapse)
      .field("Idle Time(ms)", std::max(0.0, elapse - transit - wait));
  if (start_us >= 0) j.field("Start Timestamp(us)", start_us);
  // A wait is all before the transfer: for a collective, the wait for the
  // last member; for a transfer, for the other side.
  j.field("Synchronization Time Ratio", wait_ratio)
      .field("Synchronization Time(ms)", wait)
      .field("Transit Time(ms)", transit)
      .field("Wait Time Ratio", wait_ratio)
      .field("Wait Time(ms)", wait)
      .end_object();
}

// The transports in nlohmann's (sorted) order.
const std::vector<std::string>& sorted_transports() {
  static const std::vector<std::string> kSorted = [] {
    std::vector<std::string> v(std::begin(kTransports), std::end(kTransports));
    std::sort(v.begin(), v.end());
    return v;
  }();
  return kSorted;
}

void write_op_info(base::JsonStream& j, const CommTiming& t, Totals* totals) {
  double elapse = elapse_ms(t), wait = wait_ms(t), transit = transit_ms(t), mb = megabytes(t);
  totals->elapse += elapse;
  totals->transit += transit;
  totals->wait += wait;
  Totals::PerTransport& p = totals->by_transport[transport(t)];
  p.mb += mb;
  p.ms += transit;
  auto& [count, size_ms] = p.sizes[size_label(mb)];
  ++count;
  size_ms += transit;

  j.begin_object().key("Communication Bandwidth Info").begin_object();
  for (const std::string& name : sorted_transports()) {
    bool mine = name == transport(t);
    double size = mine ? mb : 0, time_ms = mine ? transit : 0;
    j.key(name)
        .begin_object()
        .field("Bandwidth(GB/s)", ratio(size, time_ms))
        .key("Large Packet Ratio")
        .number(0);
    j.key("Size Distribution").begin_object();
    if (mine) j.key(size_label(mb)).begin_array().number(1).number(transit).end_array();
    j.end_object().field("Transit Size(MB)", size).field("Transit Time(ms)", time_ms).end_object();
  }
  j.end_object().key("Communication Time Info");
  write_time_info(j, elapse, transit, wait, static_cast<double>(t.start_ns) / 1e3);
  j.end_object();
}

// `with_bandwidth`: the cluster's totals carry each transport's bandwidth,
// a rank's (torch_npu's) do not.
void write_total_info(base::JsonStream& j, const Totals& t, bool with_bandwidth) {
  j.begin_object().key("Communication Bandwidth Info").begin_object();
  for (const std::string& name : sorted_transports()) {
    Totals::PerTransport p;
    if (auto it = t.by_transport.find(name); it != t.by_transport.end()) p = it->second;
    j.key(name).begin_object();
    if (with_bandwidth) j.field("Bandwidth(GB/s)", ratio(p.mb, p.ms));
    j.key("Size Distribution").begin_object();
    for (const auto& [size, entry] : p.sizes)
      j.key(size).begin_array().number(entry.first).number(entry.second).end_array();
    j.end_object().field("Transit Size(MB)", p.mb).field("Transit Time(ms)", p.ms).end_object();
  }
  j.end_object().key("Communication Time Info");
  write_time_info(j, t.elapse, t.transit, t.wait);
  j.end_object();
}

// One value's text, at depth `level` of a document indented by `indent`
// (-1: one line). Functions, not lambdas: clang before 16 cannot capture
// the structured bindings the callers hold.
std::string op_info_text(const CommTiming& t, Totals* totals, int indent = -1, int level = 0) {
  std::string out;
  base::JsonStream j(out, indent, level);
  write_op_info(j, t, totals);
  return out;
}

std::string total_info_text(const Totals& t, bool with_bandwidth, int indent = -1, int level = 0) {
  std::string out;
  base::JsonStream j(out, indent, level);
  write_total_info(j, t, with_bandwidth);
  return out;
}

// The rank's place in its group (links name ranks within the group).
int local_rank(const CommTiming& t, int world_rank) {
  const std::vector<int32_t>& members = *t.group_ranks;
  auto it = std::find(members.begin(), members.end(), world_rank);
  return it != members.end() ? static_cast<int>(it - members.begin()) : world_rank;
}

struct Link {
  std::string transport;
  double mb = 0, ms = 0;
  std::string op_name;
};
using Links = std::map<std::pair<int, int>, Link>;  // (src, dst) -> link

void write_links(base::JsonStream& j, const Links& links, bool with_op_name) {
  // Keyed "src-dst": in the text's order, not the numbers'.
  std::vector<std::pair<std::string, const Link*>> keyed;
  keyed.reserve(links.size());
  for (const auto& [ends, link] : links)
    keyed.emplace_back(std::to_string(ends.first) + "-" + std::to_string(ends.second), &link);
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  j.begin_object();
  for (const auto& [name, link] : keyed) {
    j.key(name).begin_object().field("Bandwidth(GB/s)", ratio(link->mb, link->ms));
    // Data moved with no transit time to measure a bandwidth over: every
    // operation's time was waiting for the peer. Said, not left to look slow.
    if (link->mb > 0 && link->ms <= 0) j.key("Only Waited").boolean(true);
    if (with_op_name) j.key("Op Name").string(link->op_name);
    j.field("Transit Size(MB)", link->mb)
        .field("Transit Time(ms)", link->ms)
        .key("Transport Type")
        .string(link->transport)
        .end_object();
  }
  j.end_object();
}

std::string links_text(const Links& links, bool with_op_name, int indent = -1, int level = 0) {
  std::string out;
  base::JsonStream j(out, indent, level);
  write_links(j, links, with_op_name);
  return out;
}

// One operation's links, in ranks within its group. A transfer's data is
// counted once, on its sending side (MindSpore's links are the tasks that
// move data); every side names its own place with a "<r>-<r>" link, which
// is how the cluster tool maps a group's ranks to world ranks.
Links instance_links(const CommTiming& t) {
  int self = local_rank(t, t.rank);
  Links links;
  Link own{transport(t), megabytes(t), transit_ms(t), op_name(t)};
  if (!t.transfer || t.peer < 0) {
    links[{self, self}] = own;
    return links;
  }
  links[{self, self}] = Link{"LOCAL", 0, 0, op_name(t)};
  if (t.sends) links[{self, local_rank(t, t.peer)}] = own;
  return links;
}

// "MPI_Iallreduce" -> "iallreduce".
std::string op_type(const std::string& operation) {
  std::string type = operation.rfind("MPI_", 0) == 0 ? operation.substr(4) : operation;
  std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
  return type;
}

// One matrix entry's links within its group. The group and whether it sums
// the instances are kept beside the key: names may hold '@' or "-total",
// so the key text cannot be parsed back.
struct MatrixEntry {
  std::string group;
  bool total = false;
  Links links;
};

// A rank's matrix entries: (step, kind, key) -> its entry.
using RankMatrix = std::map<std::tuple<std::string, std::string, std::string>, MatrixEntry>;

RankMatrix rank_matrix(const std::vector<const CommTiming*>& mine) {
  // (step, kind, type, group) -> instances, each with its bandwidth.
  std::map<std::tuple<std::string, std::string, std::string, std::string>,
           std::vector<std::pair<double, Links>>>
      instances;
  for (const CommTiming* t : mine) {
    instances[{step_key(*t), kind(*t), op_type(std::string(t->operation)), std::string(t->group)}]
        .emplace_back(ratio(megabytes(*t), transit_ms(*t)), instance_links(*t));
  }
  RankMatrix out;
  for (auto& [key, list] : instances) {
    const auto& [step, kind_name, type, group] = key;
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    size_t n = list.size();
    // Lambdas cannot capture structured bindings before clang 16: a loop.
    std::vector<std::pair<const char*, size_t>> picks = {{"top1", 0}, {"middle", n / 2}, {"bottom1", n - 1}};
    if (n >= 2) picks.emplace_back("bottom2", n - 2);
    if (n >= 3) picks.emplace_back("bottom3", n - 3);
    for (const auto& [label, index] : picks)
      out[{step, kind_name, type + "-" + label + "@" + group}] =
          MatrixEntry{group, false, list[index].second};
    Links total;
    for (const auto& [bandwidth, links] : list) {
      for (const auto& [ends, link] : links) {
        Link& sum = total[ends];
        sum.mb += link.mb;
        sum.ms += link.ms;
      }
    }
    for (auto& [ends, link] : total)
      link.transport = list.front().second.count(ends) ? list.front().second.at(ends).transport : "LOCAL";
    out[{step, kind_name, type + "-total@" + group}] = MatrixEntry{group, true, std::move(total)};
  }
  return out;
}

// Per (group, kind), the tuple text of the ranks with operations of that
// kind in it (made once: at 1,024 ranks it is 6 KB).
std::map<std::pair<std::string, std::string>, std::string> group_tuples(const std::vector<CommTiming>& all) {
  std::map<std::pair<std::string, std::string>, std::set<int>> ranks;
  for (const CommTiming& t : all) ranks[{std::string(t.group), kind(t)}].insert(t.rank);
  std::map<std::pair<std::string, std::string>, std::string> out;
  for (const auto& [key, set] : ranks) out[key] = rank_tuple(set);
  return out;
}

// A rank's table: step -> kind -> key -> the value's text, written at its
// depth (3) of a document indented by one space; both kinds in every step.
using RankTable = std::map<std::string, std::map<std::string, std::map<std::string, std::string>>>;
constexpr int kRankIndent = 1, kValueDepth = 3;

std::map<std::string, std::map<std::string, std::string>>& step_of(RankTable& table,
                                                                   const std::string& step) {
  auto& kinds = table[step];
  kinds["collective"];
  kinds["p2p"];
  return kinds;
}

std::string rank_table_text(const RankTable& table) {
  std::string out;
  base::JsonStream j(out, kRankIndent);
  j.begin_object();
  for (const auto& [step, kinds] : table) {
    j.key(step).begin_object();
    for (const auto& [kind_name, entries] : kinds) {
      j.key(kind_name).begin_object();
      for (const auto& [key, text] : entries) j.key(key).raw(text);
      j.end_object();
    }
    j.end_object();
  }
  j.end_object();
  return out + "\n";
}

}  // namespace

std::string rank_communication_json(const std::vector<const CommTiming*>& mine) {
  RankTable table;
  std::map<std::pair<std::string, std::string>, Totals> totals;  // (step, kind)
  for (const CommTiming* t : mine) {
    std::string step = step_key(*t);
    Totals* total = &totals[{step, kind(*t)}];
    step_of(table, step)[kind(*t)][op_key(*t)] = op_info_text(*t, total, kRankIndent, kValueDepth);
  }
  for (const auto& [key, total] : totals) {
    table[key.first][key.second]["Total Op Info"] = total_info_text(total, false, kRankIndent, kValueDepth);
  }
  return rank_table_text(table);
}

std::string rank_communication_matrix_json(const std::vector<const CommTiming*>& mine) {
  RankTable table;
  for (const auto& [key, entry] : rank_matrix(mine)) {
    const auto& [step_name, kind_name, op] = key;
    step_of(table, step_name)[kind_name][op] =
        links_text(entry.links, !entry.total, kRankIndent, kValueDepth);
  }
  return rank_table_text(table);
}

namespace {

// Builds cluster_communication.json into `out`, handing it to `drain` after
// each entry (which may write it away and clear it).
void build_cluster_communication_json(const std::vector<CommTiming>& timings, std::string& out,
                                      const std::function<void(std::string&)>& drain) {
  // Written as it goes, not as one JSON tree: at 1,024 ranks the file holds
  // a few hundred thousand entries, and a tree of them would take gigabytes.
  auto tuples = group_tuples(timings);
  // Equal tuple texts are one object (a group's collectives and transfers
  // among the same ranks): numbered in text order, compared as numbers.
  std::map<std::string, size_t> tuple_order;
  for (const auto& [key, text] : tuples) tuple_order.emplace(text, 0);
  size_t next = 0;
  for (auto& [text, order] : tuple_order) order = next++;
  struct Entry {
    size_t tuple;
    std::string step, key;
    const CommTiming* timing;
  };
  std::vector<const std::string*> tuple_text(tuple_order.size());
  for (const auto& [text, order] : tuple_order) tuple_text[order] = &text;
  std::vector<Entry> entries;
  entries.reserve(timings.size());
  for (const CommTiming& t : timings)
    entries.push_back(
        Entry{tuple_order.at(tuples.at({std::string(t.group), kind(t)})), step_key(t), op_key(t), &t});
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.tuple, a.step, a.key, a.timing->rank) <
           std::tie(b.tuple, b.step, b.key, b.timing->rank);
  });
  out += "{";
  // The current (tuple, step)'s sums: group -> rank -> totals, written at its end.
  std::map<std::string, std::map<int, Totals>> totals;
  auto write_totals = [&out, &totals]() {
    for (const auto& [group, by_rank] : totals) {
      out += ",\n  " + base::json_quoted("Total Op Info@" + group) + ": {";
      for (const auto& [rank, total] : by_rank) {
        out += std::string(out.back() == '{' ? "" : ", ") + base::json_quoted(std::to_string(rank)) + ": " +
               total_info_text(total, true);
      }
      out += "}";
    }
    totals.clear();
  };
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    bool new_tuple = i == 0 || e.tuple != entries[i - 1].tuple;
    bool new_step = new_tuple || e.step != entries[i - 1].step;
    bool new_key = new_step || e.key != entries[i - 1].key;
    if (i > 0 && new_key) out += "}";
    if (i > 0 && new_step) {
      write_totals();
      out += "}";
    }
    if (i > 0 && new_tuple) out += "},";
    if (new_tuple) out += "\n" + base::json_quoted(*tuple_text[e.tuple]) + ": {";
    if (new_step) out += std::string(new_tuple ? "" : ",") + "\n " + base::json_quoted(e.step) + ": {";
    if (new_key) out += std::string(new_step ? "" : ",") + "\n  " + base::json_quoted(e.key) + ": {";
    const CommTiming& t = *e.timing;
    out += std::string(new_key ? "" : ", ") + base::json_quoted(std::to_string(t.rank)) + ": " +
           op_info_text(t, &totals[std::string(t.group)][t.rank]);
    drain(out);
  }
  if (!entries.empty()) {
    out += "}";
    write_totals();
    out += "}}";
  }
  out += "\n}\n";
}

// Builds cluster_communication_matrix.json into `out`, handing it to
// `drain` after each entry.
void build_cluster_communication_matrix_json(const std::vector<CommTiming>& timings, std::string& out,
                                             const std::function<void(std::string&)>& drain) {
  auto tuples = group_tuples(timings);
  std::map<int, std::vector<const CommTiming*>> by_rank;
  std::map<std::string, const CommTiming*> any_of_group;  // for its world ranks
  for (const CommTiming& t : timings) {
    by_rank[t.rank].push_back(&t);
    any_of_group.emplace(t.group, &t);
  }
  // (tuple, step, key) -> links in world ranks, summed over the ranks.
  std::map<std::tuple<std::string, std::string, std::string>, MatrixEntry> merged;
  for (const auto& [rank, mine] : by_rank) {
    for (const auto& [key, entry] : rank_matrix(mine)) {
      const auto& [step, kind_name, op] = key;
      const std::vector<int32_t>& world = *any_of_group.at(entry.group)->group_ranks;
      auto global = [&world](int local) {
        return local >= 0 && local < static_cast<int>(world.size()) ? world[local] : local;
      };
      MatrixEntry& into = merged[{tuples.at({entry.group, kind_name}), step, op}];
      into.group = entry.group;
      into.total = entry.total;
      for (const auto& [ends, link] : entry.links) {
        Link& sum = into.links[{global(ends.first), global(ends.second)}];
        sum.transport = link.transport;
        sum.op_name = link.op_name;
        sum.mb += link.mb;
        sum.ms += link.ms;
      }
    }
  }
  // Written in key order; each (tuple, step) ends with its groups' totals
  // (the "-total@" entries summed per link).
  std::map<std::string, Links> totals;  // of the current (tuple, step), by group
  auto write_totals = [&out, &totals]() {
    for (const auto& [group, links] : totals)
      out += ",\n  " + base::json_quoted("Total Op Info@" + group) + ": " + links_text(links, true);
    totals.clear();
  };
  out += "{";
  const std::string* tuple_now = nullptr;
  const std::string* step_now = nullptr;
  for (const auto& [key, entry] : merged) {
    const auto& [tuple, step, op] = key;
    bool new_tuple = tuple_now == nullptr || tuple != *tuple_now;
    bool new_step = new_tuple || step != *step_now;
    if (tuple_now != nullptr && new_step) {
      write_totals();
      out += "}";
    }
    if (tuple_now != nullptr && new_tuple) out += "},";
    if (new_tuple) out += "\n" + base::json_quoted(tuple) + ": {";
    if (new_step) out += std::string(new_tuple ? "" : ",") + "\n " + base::json_quoted(step) + ": {";
    out += std::string(new_step ? "" : ",") + "\n  " + base::json_quoted(op) + ": " +
           links_text(entry.links, true);
    tuple_now = &tuple;
    step_now = &step;
    if (entry.total) {
      Links& total = totals[entry.group];
      for (const auto& [ends, link] : entry.links) {
        Link& sum = total[ends];
        sum.transport = link.transport;
        sum.op_name = link.op_name;
        sum.mb += link.mb;
        sum.ms += link.ms;
      }
    }
    drain(out);
  }
  if (tuple_now != nullptr) {
    write_totals();
    out += "}}";
  }
  out += "\n}\n";
}

// A builder's text whole, or written to a file as it is made.
using Builder = void (*)(const std::vector<CommTiming>&, std::string&,
                         const std::function<void(std::string&)>&);

std::string built(Builder build, const std::vector<CommTiming>& timings) {
  std::string out;
  build(timings, out, [](std::string&) {});
  return out;
}

std::string built_into(Builder build, const std::vector<CommTiming>& timings, const OutputPath& path) {
  OutputFile file(path);
  std::string buffer;
  build(timings, buffer, [&file](std::string& b) { file.drain(b); });
  file.commit(buffer);
  return file.error();
}

}  // namespace

std::string cluster_communication_json(const std::vector<CommTiming>& timings) {
  return built(build_cluster_communication_json, timings);
}

std::string write_cluster_communication_json(const std::vector<CommTiming>& timings, const OutputPath& path) {
  return built_into(build_cluster_communication_json, timings, path);
}

std::string cluster_communication_matrix_json(const std::vector<CommTiming>& timings) {
  return built(build_cluster_communication_matrix_json, timings);
}

std::string write_cluster_communication_matrix_json(const std::vector<CommTiming>& timings,
                                                    const OutputPath& path) {
  return built_into(build_cluster_communication_matrix_json, timings, path);
}

}  // namespace trainprof::exporter
