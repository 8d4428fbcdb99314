// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/cluster_summary.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "base/json_limits.h"

namespace trainprof::exporter {
namespace {

using analysis::CommTiming;
using nlohmann::json;

double ms(uint64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

double us(uint64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

double round4(double v) {
  return std::round(v * 1e4) / 1e4;
}

// Nearest-rank percentiles of `values` (reordered here): the value at or
// below which p % of them lie. Selected, not sorted.
json distribution(std::vector<double>& values) {
  if (values.empty()) return nullptr;
  auto [min, max] = std::minmax_element(values.begin(), values.end());
  json out = {{"min", round4(*min)}};
  double largest = *max;
  // Each selection leaves the values above its own after it.
  auto from = values.begin();
  for (auto [name, share] : {std::pair{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}}) {
    auto at = values.begin() + static_cast<std::ptrdiff_t>(analysis::nearest_rank(share, values.size()));
    std::nth_element(from, at, values.end());
    from = at;
    out[name] = round4(*at);
  }
  out["max"] = round4(largest);
  return out;
}

// The same of values counted at the reported resolution.
json distribution(const analysis::ValueCounts& values) {
  if (values.empty()) return nullptr;
  return {{"min", values.min()},
          {"p50", values.at_share(0.5)},
          {"p90", values.at_share(0.9)},
          {"p99", values.at_share(0.99)},
          {"max", values.max()}};
}

json group_json(bool transfer, const std::string& name, const analysis::GroupDigest& g) {
  json operations = json::array();
  for (const auto& [operation, p] : g.operations) {
    operations.push_back({{"operation", operation},
                          {transfer ? "transfers" : "collectives", p.operations},
                          {"rank_parts", p.parts},
                          {"bytes", p.bytes},
                          {"elapse_ms", distribution(p.elapse_ms)},
                          {"wait_ms", distribution(p.wait_ms)},
                          {"transit_ms", distribution(p.transit_ms)},
                          {"bandwidth_gb_per_s", distribution(p.gb_per_s)}});
  }
  return {{"group", name},
          {"kind", transfer ? "p2p" : "collective"},
          {"members", g.members != analysis::GroupDigest::kUnknownMembers ? g.members : g.ranks},
          {"ranks_with_operations", g.ranks},
          {"operations", operations}};
}

json collective_json(const analysis::CollectiveRow& c) {
  json arrivals = json::array();
  for (const analysis::MemberArrival& a : c.arrivals) {
    arrivals.push_back({{"rank", a.rank},
                        {"start_us", us(a.start_ns)},
                        {"wait_ms", round4(ms(a.wait_ns))},
                        {"elapse_ms", round4(ms(a.elapse_ns))}});
  }
  return {{"group", c.group},
          {"sequence", c.sequence},
          {"operation", c.last_operation},
          {"step", c.step},
          {"members", c.members},
          {"bytes", c.bytes},
          {"duration_ms", round4(ms(c.duration_ns()))},
          {"arrival_spread_ms", round4(ms(c.last_start_ns - c.first_start_ns))},
          {"after_last_arrival_ms", round4(ms(c.end_ns - std::min(c.end_ns, c.last_start_ns)))},
          {"members_waited_ms", round4(ms(c.wait_ns))},
          {"first_arrival", {{"rank", c.first_rank}, {"start_us", us(c.first_start_ns)}}},
          {"last_arrival", {{"rank", c.last_rank}, {"start_us", us(c.last_start_ns)}}},
          {"arrivals_listed", c.all_arrivals ? "all, latest first" : "the latest, latest first"},
          {"arrivals", arrivals}};
}

json transfer_json(const analysis::SlowTransfer& t) {
  return {{"group", t.group},
          {"operation", t.operation},
          {"rank", t.rank},
          {"peer", t.peer},
          {"side", t.sends ? "send" : "receive"},
          {"tag", t.tag},
          {"step", t.step},
          {"bytes", t.bytes},
          {"start_us", us(t.start_ns)},
          {"elapse_ms", round4(ms(t.elapse_ns))},
          {"wait_ms", round4(ms(t.wait_ns))},
          {"transit_ms", round4(ms(t.transit_ns))}};
}

json links_json(const std::vector<analysis::LinkBandwidth>& links) {
  std::map<std::string, std::vector<double>> bandwidths;
  std::map<std::string, uint64_t> counts, slow;
  for (const analysis::LinkBandwidth& l : links) {
    std::string like = std::string(l.collective ? "collective" : "p2p") + " " + l.transport;
    ++counts[like];
    slow[like] += l.slow ? 1 : 0;
    if (!l.only_waited) bandwidths[like].push_back(l.gb_per_s);
  }
  json kinds = json::array();
  for (auto& [like, count] : counts) {
    kinds.push_back({{"links", like},
                     {"count", count},
                     {"slow", slow[like]},
                     {"bandwidth_gb_per_s", distribution(bandwidths[like])}});
  }
  json slowest = json::array();
  for (size_t i = 0; i < links.size() && i < kSlowestListed; ++i) {
    slowest.push_back(link_json(links[i]));
  }
  return {{"count", links.size()}, {"by_kind", kinds}, {"slowest", slowest}};
}

}  // namespace

nlohmann::json link_json(const analysis::LinkBandwidth& l) {
  return {{"src", l.src},
          {"dst", l.dst},
          {"kind", l.collective ? "collective" : "p2p"},
          {"transport", l.transport},
          {"bytes", l.bytes},
          {"transit_ns", l.transit_ns},
          {"operations", l.operations},
          {"gb_per_s", l.gb_per_s},
          {"slow", l.slow},
          {"only_waited", l.only_waited}};
}

std::string cluster_communication_summary_json(const analysis::CommDigest& digest,
                                               const std::vector<analysis::LinkBandwidth>& links) {
  json groups = json::array();
  for (const auto& [key, g] : digest.groups) groups.push_back(group_json(key.first, key.second, g));
  json slowest_collectives = json::array(), slowest_transfers = json::array();
  for (const analysis::CollectiveRow& c : digest.slow_collectives)
    slowest_collectives.push_back(collective_json(c));
  for (const analysis::SlowTransfer& t : digest.slow_transfers) slowest_transfers.push_back(transfer_json(t));
  json out = {{"ranks", digest.ranks},
              {"collectives", digest.collectives},
              {"transfers", digest.transfers},
              {"rank_parts", digest.parts},
              {"groups", groups},
              {"slowest_collectives", slowest_collectives},
              {"slowest_transfers", slowest_transfers},
              {"links", links_json(links)},
              {"full_tables", "trainprof.db (tables communication, collectives, links, steps, ranks)"}};
  return base::json_text(out, 1) + "\n";
}

}  // namespace trainprof::exporter
