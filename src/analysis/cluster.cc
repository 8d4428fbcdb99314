// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/cluster.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <set>
#include <tuple>
#include <unordered_map>

#include "analysis/group_ids.h"
#include "analysis/rank_indexed.h"

namespace trainprof::analysis {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

namespace {

// Means of a rank's computing, data wait and time in communication over `steps`.
// A rank's computing in a step, less its waiting where that waiting was
// counted as computing: at in-flight collectives (a DDP backward pass waits
// for its buckets' all-reduce where it needs the result, not inside a
// communication call) and for data (the loop's wait for the next batch,
// inside torch's DataLoader range). The step trace counts a wait as
// computing when a range or an operator encloses it and as free time when
// none does: the part of the waits beyond the step's free time was computing.
// Without this, a rank slow to load its data seemed slow to compute as much.
// Since version 4 the step trace keeps the data waits out of computing.
uint64_t computing_without_waits(const RankSummary& s, const RankStep& st,
                                 const std::map<int64_t, uint64_t>& in_flight_waited) {
  auto it = in_flight_waited.find(st.row.step);
  uint64_t waits =
      (s.data_wait_separate ? 0 : st.data_wait_ns) + (it != in_flight_waited.end() ? it->second : 0);
  if (waits <= st.row.free_ns) return st.row.computing_ns;
  uint64_t counted = waits - st.row.free_ns;
  return st.row.computing_ns > counted ? st.row.computing_ns - counted : 0;
}

void step_means(const RankSummary& s, const std::map<int64_t, uint64_t>& in_flight_waited,
                const std::set<int64_t>& steps, RankWaits* w) {
  double c = 0, d = 0, m = 0, o = 0;
  int n = 0;
  for (const RankStep& st : s.steps) {
    if (steps.count(st.row.step) == 0) continue;
    c += static_cast<double>(computing_without_waits(s, st, in_flight_waited));
    d += static_cast<double>(st.data_wait_ns);
    m += static_cast<double>(st.in_comm_ns);
    o += static_cast<double>(st.outside_ns);
    ++n;
  }
  w->computing_ns = n > 0 ? c / n : 0;
  w->data_wait_ns = n > 0 ? d / n : 0;
  w->in_comm_ns = n > 0 ? m / n : 0;
  w->outside_ns = n > 0 ? o / n : 0;
}

std::string ms_from_ns(double ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f ms", ns / 1e6);
  return text;
}

std::string signed_ms_from_ns(double ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%+.1f ms", ns / 1e6);
  return text;
}

}  // namespace

namespace {

struct PairHash {
  size_t operator()(const std::pair<size_t, int64_t>& p) const {
    return std::hash<uint64_t>()(static_cast<uint64_t>(p.first) * 0x9E3779B97F4A7C15ull ^
                                 static_cast<uint64_t>(p.second));
  }
};

// Whether every member of a group is on one host: that host, else nullptr.
const std::string* common_host(const std::vector<int32_t>& group, const std::map<int, std::string>& host) {
  const std::string* common = nullptr;
  for (int32_t r : group) {
    auto it = host.find(r);
    if (it == host.end() || (common != nullptr && it->second != *common)) return nullptr;
    common = &it->second;
  }
  return common;
}

// A member's part in a collective whose last member arrived at `last`.
CommTiming collective_timing(const RankGroup& group, std::string_view operation, int rank,
                             const RankCollective& c, uint64_t last, bool one_host) {
  CommTiming t;
  t.group = group.name;
  t.group_ranks = &group.world_ranks.list();
  t.sequence = c.sequence;
  t.operation = operation;
  t.rank = rank;
  t.step = c.step;
  t.start_ns = c.start_ns;
  t.end_ns = c.end_ns;
  t.bytes = c.bytes;
  t.wait_ns = std::min(last - c.start_ns, t.elapse_ns());
  t.one_host = one_host;
  t.run = c.run;
  return t;
}

// One side of a transfer, its wait left to the pairing; `sequence`: its
// count among the rank's transfers of the same operation in the group.
CommTiming transfer_timing(const RankSummary& s, const RankTransfer& x, int64_t sequence,
                           const std::map<int, std::string>& host) {
  const RankGroup& g = s.groups[x.group];
  CommTiming t;
  t.group = g.name;
  t.group_ranks = &g.world_ranks.list();
  t.sequence = sequence;
  t.operation = x.operation;
  t.rank = s.rank;
  t.step = x.step;
  t.start_ns = x.start_ns;
  t.end_ns = x.end_ns;
  t.bytes = x.bytes;
  t.transfer = true;
  t.peer = x.peer;
  t.sends = x.send;
  t.tag = x.tag;
  auto peer_host = host.find(x.peer);
  t.one_host = x.peer >= 0 && peer_host != host.end() && peer_host->second == s.host;
  t.run = x.run;
  return t;
}

// A side that arrived before its other side waited for it.
void wait_for_other_side(uint64_t other_start_ns, CommTiming* own) {
  if (other_start_ns > own->start_ns)
    own->wait_ns = std::min(other_start_ns - own->start_ns, own->elapse_ns());
}

// The transfers from `first` on, by (rank, start).
void sort_transfers(std::vector<CommTiming>* out, size_t first) {
  std::stable_sort(out->begin() + static_cast<std::ptrdiff_t>(first), out->end(),
                   [](const CommTiming& a, const CommTiming& b) {
                     return std::tie(a.rank, a.start_ns) < std::tie(b.rank, b.start_ns);
                   });
}

void add_collective_timings(const std::vector<RankSummary>& ranks, const std::map<int, std::string>& host,
                            std::vector<CommTiming>* out) {
  struct Member {
    const RankSummary* rank;
    const RankCollective* call;
  };
  // Each collective's members by (group, sequence), the groups numbered
  // (a map keyed by names would compare strings for each of 10^7 calls at
  // 10^5 ranks), then taken in (name, sequence) order.
  GroupIds ids;
  std::unordered_map<std::pair<size_t, int64_t>, std::vector<Member>, PairHash> by_key;
  struct Group {
    const RankGroup* group = nullptr;  // a summary's: the timings' name and member list
    bool host_known = false;           // `host` below found
    const std::string* host = nullptr;
  };
  std::vector<Group> groups;
  size_t calls = 0;
  for (const RankSummary& s : ranks) {
    std::vector<size_t> id_of;
    for (const RankGroup& g : s.groups) {
      id_of.push_back(ids.of(g.name));
      if (groups.size() < ids.size()) groups.resize(ids.size());
      groups[id_of.back()].group = &g;
    }
    for (const RankCollective& c : s.collectives) by_key[{id_of[c.group], c.sequence}].push_back({&s, &c});
    calls += s.collectives.size();
  }
  out->reserve(out->size() + calls);
  std::vector<std::pair<size_t, int64_t>> keys;
  for (const auto& [key, list] : by_key) keys.push_back(key);
  std::sort(keys.begin(), keys.end(), [&ids](const auto& a, const auto& b) {
    int names = ids.name(a.first).compare(ids.name(b.first));
    return names != 0 ? names < 0 : a.second < b.second;
  });
  for (const auto& key : keys) {
    const std::vector<Member>& list = by_key.at(key);
    Group& g = groups[key.first];
    const std::vector<int32_t>& members = g.group->world_ranks.list();
    if (!recorded_by_all(list.size(), members.size())) continue;
    if (!g.host_known) g = {g.group, true, common_host(members, host)};
    const bool one_host = g.host != nullptr && *g.host == host.at(list.front().rank->rank);
    uint64_t last = 0;
    for (const Member& m : list) last = std::max(last, m.call->start_ns);
    const std::string_view operation = list.front().call->operation;
    for (const Member& m : list) {
      const RankCollective& c = *m.call;
      out->push_back(collective_timing(*g.group, c.operation == operation ? operation : c.operation,
                                       m.rank->rank, c, last, one_host));
    }
  }
}

void add_transfer_timings(const std::vector<RankSummary>& ranks, const std::map<int, std::string>& host,
                          std::vector<CommTiming>* out) {
  // (group, sender, receiver, tag) -> the sends, the receives, in order.
  using Channel = std::tuple<std::string_view, int32_t, int32_t, int32_t>;
  std::map<Channel, std::pair<std::vector<size_t>, std::vector<size_t>>> channels;
  size_t first = out->size(), transfers = 0;
  for (const RankSummary& s : ranks) transfers += s.transfers.size();
  out->reserve(first + transfers);
  for (const RankSummary& s : ranks) {
    std::map<std::pair<uint32_t, std::string_view>, int64_t> count;  // (group, operation) -> instances so far
    for (const RankTransfer& x : s.transfers) {
      if (x.peer >= 0 && x.tag >= 0) {
        Channel c{s.groups[x.group].name, x.send ? s.rank : x.peer, x.send ? x.peer : s.rank, x.tag};
        (x.send ? channels[c].first : channels[c].second).push_back(out->size());
      }
      out->push_back(transfer_timing(s, x, count[{x.group, x.operation}]++, host));
    }
  }
  // Each side waited for the other's arrival when it came first.
  std::vector<CommTiming>& all = *out;
  for (auto& [channel, sides] : channels) {
    pair_in_order(
        sides.first, sides.second, [&all](size_t i) { return all[i].start_ns; },
        [&all](size_t send, size_t receive) {
          wait_for_other_side(all[receive].start_ns, &all[send]);
          wait_for_other_side(all[send].start_ns, &all[receive]);
        });
  }
  sort_transfers(out, first);
}

}  // namespace

std::vector<CommTiming> comm_timings(const std::vector<RankSummary>& ranks) {
  std::map<int, std::string> host;
  for (const RankSummary& s : ranks) host[s.rank] = s.host;
  std::vector<CommTiming> out;
  add_collective_timings(ranks, host, &out);
  add_transfer_timings(ranks, host, &out);
  return out;
}

std::vector<CommTiming> own_comm_timings(const std::vector<RankSummary>& ranks,
                                         const std::vector<MatchedEnds>& ends,
                                         const std::map<int, std::string>& host) {
  std::vector<CommTiming> out;
  auto end_of = [](const std::vector<uint64_t>& list, size_t j) {
    return j < list.size() ? list[j] : MatchedEnds::kUnmatched;
  };
  for (size_t i = 0; i < ranks.size() && i < ends.size(); ++i) {
    const RankSummary& s = ranks[i];
    std::vector<int8_t> one_host(s.groups.size(), -1);  // per group, found once
    for (size_t j = 0; j < s.collectives.size(); ++j) {
      const uint64_t last = end_of(ends[i].collective_last, j);
      if (last == MatchedEnds::kUnmatched) continue;
      const RankCollective& c = s.collectives[j];
      const RankGroup& g = s.groups[c.group];
      if (one_host[c.group] < 0) {
        const std::string* common = common_host(g.world_ranks.list(), host);
        one_host[c.group] = common != nullptr && *common == s.host ? 1 : 0;
      }
      out.push_back(collective_timing(g, c.operation, s.rank, c, last, one_host[c.group] == 1));
    }
  }
  std::sort(out.begin(), out.end(), [](const CommTiming& a, const CommTiming& b) {
    return std::tie(a.group, a.sequence, a.rank) < std::tie(b.group, b.sequence, b.rank);
  });
  const size_t first = out.size();
  for (size_t i = 0; i < ranks.size() && i < ends.size(); ++i) {
    const RankSummary& s = ranks[i];
    std::map<std::pair<uint32_t, std::string_view>, int64_t> count;  // as add_transfer_timings counts
    for (size_t j = 0; j < s.transfers.size(); ++j) {
      const RankTransfer& x = s.transfers[j];
      CommTiming t = transfer_timing(s, x, count[{x.group, x.operation}]++, host);
      const uint64_t other = end_of(ends[i].transfer_other_start, j);
      if (other != MatchedEnds::kUnmatched) wait_for_other_side(other, &t);
      out.push_back(t);
    }
  }
  sort_transfers(&out, first);
  return out;
}

namespace {

// Links are compared with their like: "SDMA collectives", "RDMA transfers".
// In words, with communication.json's transport (MindSpore's names: SDMA
// for a copy within a host, RDMA between hosts) for the reader of both.
std::string link_kind(const LinkBandwidth& l) {
  return std::string(l.collective ? "collectives" : "transfers") +
         (l.transport == "SDMA" ? " within a host (SDMA)" : " between hosts (RDMA)");
}

}  // namespace

std::vector<LinkBandwidth> link_sums(std::span<const CommTiming> timings) {
  // By (src, dst, collective, one host): hashed, since each of 10^7
  // operations at 10^5 ranks looks its link up.
  struct LinkKey {
    int src, dst;
    bool collective, one_host;
    bool operator==(const LinkKey&) const = default;
  };
  struct LinkHash {
    size_t operator()(const LinkKey& k) const {
      uint64_t v =
          (static_cast<uint64_t>(static_cast<uint32_t>(k.src)) << 32 | static_cast<uint32_t>(k.dst)) *
          0x9E3779B97F4A7C15ull;
      return std::hash<uint64_t>()(v ^ (k.collective ? 2 : 0) ^ (k.one_host ? 1 : 0));
    }
  };
  std::unordered_map<LinkKey, LinkBandwidth, LinkHash> links;
  auto link_of = [&links](const LinkKey& key) -> LinkBandwidth& {
    auto [it, fresh] = links.try_emplace(key);
    LinkBandwidth& l = it->second;
    if (fresh) {
      l.src = key.src;
      l.dst = key.dst;
      l.collective = key.collective;
      l.transport = key.one_host ? "SDMA" : "RDMA";
    }
    return l;
  };
  // A collective's link is its rank's own: summed by rank first, in a
  // dense table (a hash lookup per member of each collective, in member
  // order, missed the cache at every step at 10^5 ranks).
  struct Sums {
    uint64_t bytes = 0, transit_ns = 0, operations = 0;
  };
  RankIndexed<std::array<Sums, 2>> own;  // by rank, by one host
  for (const CommTiming& t : timings) {
    // A transfer counts once, on its sending side.
    if (t.transfer && (t.peer < 0 || !t.sends)) continue;
    if (!t.transfer) {
      Sums& sums = own[t.rank][t.one_host ? 1 : 0];
      sums.bytes += t.bytes;
      sums.transit_ns += t.transit_ns();
      ++sums.operations;
      continue;
    }
    LinkBandwidth& l = link_of(LinkKey{t.rank, t.peer, false, t.one_host});
    l.bytes += t.bytes;
    l.transit_ns += t.transit_ns();
    ++l.operations;
  }
  own.for_each([&link_of](int rank, const std::array<Sums, 2>& by_host) {
    for (bool one_host : {false, true}) {
      const Sums& sums = by_host[one_host ? 1 : 0];
      if (sums.operations == 0) continue;
      LinkBandwidth& l = link_of(LinkKey{rank, rank, true, one_host});
      l.bytes += sums.bytes;
      l.transit_ns += sums.transit_ns;
      l.operations += sums.operations;
    }
  });
  std::vector<LinkBandwidth> out;
  out.reserve(links.size());
  for (auto& [key, l] : links) out.push_back(std::move(l));
  return out;
}

std::vector<LinkBandwidth> finish_links(std::vector<LinkBandwidth> sums) {
  // In (src, dst, kind, transport) order ("RDMA" before "SDMA"), as the
  // medians see them.
  std::sort(sums.begin(), sums.end(), [](const LinkBandwidth& x, const LinkBandwidth& y) {
    return std::tie(x.src, x.dst, x.collective, x.transport) <
           std::tie(y.src, y.dst, y.collective, y.transport);
  });
  std::vector<LinkBandwidth> out;
  std::map<std::string, std::vector<double>> per_kind;
  for (LinkBandwidth& l : sums) {
    if (l.bytes == 0) continue;
    l.only_waited = l.transit_ns == 0;
    if (!l.only_waited) {
      l.gb_per_s = static_cast<double>(l.bytes) / static_cast<double>(l.transit_ns);
      per_kind[link_kind(l)].push_back(l.gb_per_s);
    }
    out.push_back(std::move(l));
  }
  // Each kind's median once (a kind can hold a link per rank).
  std::map<std::string, double> median_of;
  for (const auto& [kind, all] : per_kind) median_of[kind] = all.size() >= 3 ? median(all) : 0;
  for (LinkBandwidth& l : out)
    l.slow = !l.only_waited && l.gb_per_s < kSlowLinkShare * median_of[link_kind(l)];
  // Measured links slowest first, then those that only waited.
  std::sort(out.begin(), out.end(), [](const LinkBandwidth& a, const LinkBandwidth& b) {
    return std::tie(a.only_waited, a.gb_per_s, a.src, a.dst) <
           std::tie(b.only_waited, b.gb_per_s, b.src, b.dst);
  });
  return out;
}

std::vector<LinkBandwidth> link_bandwidths(const std::vector<CommTiming>& timings) {
  return finish_links(link_sums(timings));
}

std::string links_text(const std::vector<LinkBandwidth>& links) {
  if (links.empty()) return "";
  std::map<std::string, std::vector<const LinkBandwidth*>> per_kind;  // slowest first
  for (const LinkBandwidth& l : links) per_kind[link_kind(l)].push_back(&l);
  std::string out = "Links (bytes over transit time; a collective is its rank's own link r->r):\n";
  char line[200];
  for (const auto& [kind, list] : per_kind) {
    std::vector<double> speeds;
    size_t slow = 0;
    std::vector<const LinkBandwidth*> waited;
    for (const LinkBandwidth* l : list) {
      if (l->only_waited) {
        waited.push_back(l);
        continue;
      }
      speeds.push_back(l->gb_per_s);
      slow += l->slow ? 1 : 0;
    }
    if (!speeds.empty()) {
      std::snprintf(line, sizeof(line), "  %s: %zu links, median %.3f GB/s, %zu below half of it\n",
                    kind.c_str(), speeds.size(), median(speeds), slow);
    } else {
      std::snprintf(line, sizeof(line), "  %s: no link with measurable transit\n", kind.c_str());
    }
    out += line;
    size_t shown = 0;
    for (const LinkBandwidth* l : list) {
      if (l->only_waited || (slow > 0 ? !l->slow : shown >= 1)) continue;
      std::snprintf(line, sizeof(line), "    %s %d->%d: %.3f GB/s (%.3f MB in %.3f ms, %llu operations)\n",
                    l->slow ? "SLOW" : "slowest", l->src, l->dst, l->gb_per_s,
                    static_cast<double>(l->bytes) / 1e6, static_cast<double>(l->transit_ns) / 1e6,
                    static_cast<unsigned long long>(l->operations));
      out += line;
      ++shown;
    }
    // Present, with their data, but no bandwidth: every operation waited.
    for (const LinkBandwidth* l : waited) {
      std::snprintf(line, sizeof(line),
                    "    only waited %d->%d: %.3f MB in %llu operations, no transit time measurable\n",
                    l->src, l->dst, static_cast<double>(l->bytes) / 1e6,
                    static_cast<unsigned long long>(l->operations));
      out += line;
    }
  }
  return out;
}

std::string step_ranges(const std::vector<int64_t>& steps) {
  std::string out;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(steps[i]);
    if (j > i) out += "-" + std::to_string(steps[j]);
    i = j + 1;
  }
  return out;
}

StragglerReport describe_ranks(const std::vector<RankSummary>& ranks) {
  StragglerReport r;
  std::map<int, const RankSummary*> by_rank;
  for (const RankSummary& s : ranks) {
    by_rank[s.rank] = &s;
    r.world_size = std::max(r.world_size, s.world_size);
  }
  std::map<int, std::vector<int>> sizes;
  for (const auto& [rank, s] : by_rank) sizes[s->world_size].push_back(rank);
  if (sizes.size() > 1) r.world_sizes.assign(sizes.begin(), sizes.end());
  r.clocks_aligned = !by_rank.empty();
  r.one_host = !by_rank.empty() && !by_rank.begin()->second->host.empty();
  for (const auto& [rank, s] : by_rank) {
    r.ranks.push_back(rank);
    r.one_host = r.one_host && s->host == by_rank.begin()->second->host;
    if (r.one_host) r.host = s->host;
    r.clocks_aligned = r.clocks_aligned && s->clock_aligned;
    r.clock_offset_ns = std::max(r.clock_offset_ns, s->clock_offset_ns);
    r.clock_error_ns = std::max(r.clock_error_ns, s->clock_error_ns);
    if (!s->clock_problem.empty()) r.clock_problems.emplace_back(rank, s->clock_problem);
  }
  // Times compare with rank 0's when aligned to it, or on its host's clock.
  if (!by_rank.empty()) {
    auto reference = by_rank.find(0);
    const std::string& host = (reference != by_rank.end() ? reference : by_rank.begin())->second->host;
    for (const auto& [rank, s] : by_rank) {
      if (!s->clock_aligned && s->host != host) r.unaligned_ranks.push_back(rank);
    }
  }
  // The gaps between the ranks there (sorted), without a lookup per rank of the world.
  int next = 0;
  for (const auto& [rank, s] : by_rank) {
    for (; next < std::min(rank, r.world_size); ++next) r.missing_ranks.push_back(next);
    next = std::max(next, rank + 1);
  }
  for (; next < r.world_size; ++next) r.missing_ranks.push_back(next);
  for (const auto& [rank, s] : by_rank) {
    if (s->end == "killed") r.killed_ranks.push_back(rank);
    if (s->end == "signal") r.signaled_ranks.push_back(rank);
  }
  for (int rank : r.ranks) {
    RankWaits w;
    w.rank = rank;
    r.per_rank.push_back(w);
  }
  return r;
}

void add_ended_early(StragglerReport& r, const std::map<std::string, std::map<int, int64_t>>& last_by_group) {
  for (const auto& [group, lasts] : last_by_group) {
    int64_t group_last = 0;
    for (const auto& [rank, last] : lasts) group_last = std::max(group_last, last);
    for (const auto& [rank, last] : lasts) {
      // A named copy: lambdas cannot capture structured bindings before clang 16.
      const int this_rank = rank;
      bool listed =
          std::any_of(r.ended_early.begin(), r.ended_early.end(),
                      [this_rank](const StragglerReport::EarlyEnd& e) { return e.rank == this_rank; });
      if (last < group_last && !listed) r.ended_early.push_back({rank, last, group_last});
    }
  }
}

std::vector<int64_t> name_straggler(StragglerReport& r) {
  // The straggler: the others lost most of their waiting to it.
  const RankWaits* top = nullptr;
  for (const RankWaits& w : r.per_rank) {
    if (top == nullptr || w.waited_for_ns > top->waited_for_ns) top = &w;
  }
  if (top == nullptr || r.total_wait_ns == 0 ||
      static_cast<double>(top->waited_for_ns) < kStragglerShare * static_cast<double>(r.total_wait_ns)) {
    return {};
  }
  if (!r.unaligned_ranks.empty()) {  // never a straggler made by a clock's offset
    r.withheld_straggler = top->rank;
    return {};
  }
  r.straggler = top->rank;
  // Its late steps: those where the others lost at least a tenth of its mean per step.
  uint64_t most = 0;
  for (const auto& [step, lost] : top->waited_for_by_step) most = std::max(most, lost);
  for (const auto& [step, lost] : top->waited_for_by_step) {
    if (lost * 10 >= most) r.straggler_steps.push_back(step);
  }
  return r.straggler_steps;
}

void late_step_means(const RankSummary& s, const std::vector<int64_t>& late_steps, RankWaits* w) {
  std::set<int64_t> steps(late_steps.begin(), late_steps.end());
  step_means(s, w->in_flight_waited_by_step, steps, w);
}

void explain_straggler(StragglerReport& r) {
  std::vector<double> computing, data, comm, outside;
  const RankWaits* s = nullptr;
  for (const RankWaits& w : r.per_rank) {
    if (w.rank == r.straggler) {
      s = &w;
      continue;
    }
    computing.push_back(w.computing_ns);
    data.push_back(w.data_wait_ns);
    comm.push_back(w.in_comm_ns);
    outside.push_back(w.outside_ns);
  }
  if (s == nullptr) return;
  r.others_computing_ns = median(computing);
  r.others_data_wait_ns = median(data);
  r.others_in_comm_ns = median(comm);
  r.excess_computing_ns = s->computing_ns - r.others_computing_ns;
  r.excess_data_wait_ns = s->data_wait_ns - r.others_data_wait_ns;
  r.excess_in_comm_ns = s->in_comm_ns - r.others_in_comm_ns;
  r.others_outside_ns = median(outside);
  r.excess_outside_ns = s->outside_ns - r.others_outside_ns;
  // The cause: the largest excess, when it explains a fair part (a tenth)
  // of what the others lost per late step.
  double lost_per_step =
      r.straggler_steps.empty()
          ? 0
          : static_cast<double>(s->waited_for_ns) /
                static_cast<double>(r.straggler_steps.size() * std::max<size_t>(1, r.per_rank.size() - 1));
  std::vector<std::pair<double, std::string>> causes = {{r.excess_computing_ns, "compute"},
                                                        {r.excess_data_wait_ns, "data loading"},
                                                        {r.excess_in_comm_ns, "communication"},
                                                        {r.excess_outside_ns, "host work outside operators"}};
  auto best = std::max_element(causes.begin(), causes.end());
  r.cause = best->first > 0.1 * lost_per_step && best->first > 0 ? best->second : "unknown";
}

void match_collective(const std::vector<Arrival>& list, size_t members,
                      const std::function<RankWaits&(int rank)>& waits_of, MatchCounts* counts) {
  if (!recorded_by_all(list.size(), members)) {
    if (list.size() < members) ++counts->unmatched;
    return;
  }
  ++counts->matched;
  const Arrival& last = *std::max_element(list.begin(), list.end(), [](const Arrival& a, const Arrival& b) {
    return std::tie(a.start_ns, a.rank) < std::tie(b.start_ns, b.rank);
  });
  uint64_t lost = 0;
  for (const Arrival& a : list) {
    uint64_t wait = last.start_ns - a.start_ns;
    RankWaits& w = waits_of(a.rank);
    ++w.collectives;
    w.waited_ns += wait;
    if (a.step >= 0) w.waited_in_steps_ns += wait;
    if (a.in_flight && a.step >= 0) w.in_flight_waited_by_step[a.step] += wait;
    lost += wait;
  }
  RankWaits& late = waits_of(last.rank);
  late.waited_for_ns += lost;
  ++late.late_collectives;
  if (last.step >= 0) late.waited_for_by_step[last.step] += lost;
  counts->total_wait_ns += lost;
}

StragglerReport find_straggler(const std::vector<RankSummary>& ranks) {
  StragglerReport r = describe_ranks(ranks);
  std::map<int, const RankSummary*> by_rank;
  std::unordered_map<int, size_t> index;
  for (const RankSummary& s : ranks) by_rank[s.rank] = &s;
  for (size_t i = 0; i < r.per_rank.size(); ++i) index[r.per_rank[i].rank] = i;

  // (group, sequence) -> every member's arrival, the groups numbered (10^7
  // calls at 10^5 ranks); a group's size as its highest rank says.
  GroupIds ids;
  std::unordered_map<std::pair<size_t, int64_t>, std::vector<Arrival>, PairHash> arrivals;
  std::vector<size_t> members;
  // Each rank's last collective per group, against the group's last.
  std::map<std::string, std::map<int, int64_t>> last_by_group;
  for (const auto& [rank, s] : by_rank) {
    std::vector<size_t> id_of;
    for (const RankGroup& g : s->groups) {
      id_of.push_back(ids.of(g.name));
      members.resize(ids.size(), 0);
      members[id_of.back()] = g.world_ranks.size();
    }
    std::vector<int64_t> last(s->groups.size(), INT64_MIN);
    for (const RankCollective& c : s->collectives) {
      arrivals[{id_of[c.group], c.sequence}].push_back(Arrival{rank, c.start_ns, c.step, c.in_flight});
      last[c.group] = std::max(last[c.group], c.sequence);
    }
    for (size_t g = 0; g < last.size(); ++g) {
      if (last[g] == INT64_MIN) continue;
      int64_t& group_last = last_by_group[s->groups[g].name].try_emplace(rank, 0).first->second;
      group_last = std::max(group_last, last[g]);
    }
  }
  add_ended_early(r, last_by_group);
  MatchCounts counts;
  auto waits_of = [&](int rank) -> RankWaits& { return r.per_rank[index.at(rank)]; };
  for (const auto& [key, list] : arrivals) match_collective(list, members[key.first], waits_of, &counts);
  r.matched = counts.matched;
  r.unmatched = counts.unmatched;
  r.total_wait_ns = counts.total_wait_ns;
  for (RankWaits& w : r.per_rank) w.steps = by_rank[w.rank]->steps.size();
  std::vector<int64_t> late_steps = name_straggler(r);
  if (r.straggler < 0) return r;
  for (RankWaits& w : r.per_rank) late_step_means(*by_rank[w.rank], late_steps, &w);
  explain_straggler(r);
  r.straggler_outside_functions = by_rank[r.straggler]->outside_functions;
  return r;
}

std::string outside_function_list(const std::vector<std::pair<std::string, uint64_t>>& functions) {
  std::string out;
  for (const auto& [name, ns] : functions)
    out += (out.empty() ? "" : ", ") + name + " " + ms_from_ns(static_cast<double>(ns));
  return out;
}

namespace {

// The ranks missing, ended abnormally or early (straggler_text).
std::string ranks_text(const StragglerReport& r) {
  std::string out;
  if (!r.missing_ranks.empty()) {
    std::vector<int64_t> missing(r.missing_ranks.begin(), r.missing_ranks.end());
    out += "Missing: rank(s) " + step_ranges(missing) +
           " (no analysed run with communication data); their collectives cannot be matched.\n";
  }
  auto listed = [](const std::vector<int>& ranks) {
    return step_ranges(std::vector<int64_t>(ranks.begin(), ranks.end()));
  };
  if (!r.killed_ranks.empty()) {
    out += "Ended abnormally: rank(s) " + listed(r.killed_ranks) +
           " died without a final flush (killed or crashed); their data ends at their last flush.\n";
  }
  if (!r.signaled_ranks.empty()) {
    out += "Stopped by a signal: rank(s) " + listed(r.signaled_ranks) + " (the job was aborted or killed).\n";
  }
  for (const StragglerReport::EarlyEnd& e : r.ended_early) {
    out += "Ended early: rank " + std::to_string(e.rank) + " (its last collective is #" +
           std::to_string(e.last) + " of its group, the others reach #" + std::to_string(e.group_last) +
           ").\n";
  }
  return out;
}

// How the ranks' clocks were aligned, and the ranks whose alignment failed.
std::string clocks_text(const StragglerReport& r) {
  std::string out;
  if (r.clocks_aligned) {
    char text[160];
    std::snprintf(text, sizeof(text),
                  "Clocks: aligned to rank 0 (offsets up to %.3f ms removed, within +-%.1f us).\n",
                  static_cast<double>(r.clock_offset_ns) / 1e6, static_cast<double>(r.clock_error_ns) / 1e3);
    out += text;
  } else if (r.one_host) {
    // The system clock is one for every process of a machine.
    out += "Clocks: one host (" + r.host + "), one clock: nothing to align.\n";
  } else {
    out +=
        "Clocks: not aligned (some runs have no clock measurement): ranks on different machines may "
        "show waits that are clock offsets.\n";
  }
  constexpr size_t kProblemsShown = 8;  // the same cause repeats on many ranks
  for (size_t i = 0; i < r.clock_problems.size() && i < kProblemsShown; ++i) {
    out += "  rank " + std::to_string(r.clock_problems[i].first) + ": " + r.clock_problems[i].second + ".\n";
  }
  if (r.clock_problems.size() > kProblemsShown) {
    out += "  ... and " + std::to_string(r.clock_problems.size() - kProblemsShown) +
           " more rank(s) with a clock exchange unfinished or failed.\n";
  }
  return out;
}

// Who the straggler is and why, or why none is named.
std::string verdict_text(const StragglerReport& r) {
  std::string out;
  if (r.withheld_straggler >= 0) {
    out += "No straggler named: rank " + std::to_string(r.withheld_straggler) +
           " accounts for most of the waiting, but rank(s) " +
           step_ranges(std::vector<int64_t>(r.unaligned_ranks.begin(), r.unaligned_ranks.end())) +
           " are on other hosts than rank 0 with clocks not aligned to it, so who arrived last may be a "
           "clock's offset (libtrainprof_mpi and torch.distributed measure each rank's offset to rank 0 "
           "when profiling starts and stops).\n";
  } else if (r.straggler < 0) {
    out += r.total_wait_ns == 0 || r.matched == 0
               ? "No straggler: no matched collective kept a rank waiting.\n"
               : "No straggler: no rank accounts for half of the waiting (the ranks take turns arriving "
                 "last).\n";
  } else {
    const RankWaits* s = nullptr;
    for (const RankWaits& w : r.per_rank)
      if (w.rank == r.straggler) s = &w;
    double share = 100.0 * static_cast<double>(s->waited_for_ns) / static_cast<double>(r.total_wait_ns);
    char pct[16];
    std::snprintf(pct, sizeof(pct), "%.0f", share);
    out += "Straggler: rank " + std::to_string(r.straggler) + ". The others waited " +
           ms_from_ns(static_cast<double>(s->waited_for_ns)) + " for it (" + pct +
           " % of all waiting), arriving last at " + std::to_string(s->late_collectives) +
           " collectives, in step(s) " + step_ranges(r.straggler_steps) + ".\n";
    out +=
        "Cause: " + r.cause +
        (r.cause == "unknown" ? " (no part of its late steps is a tenth of what the others lost: look at its "
                                "timeline around the late collectives, and at its host's load)"
                              : "") +
        ". Per late step, rank " + std::to_string(r.straggler) + " against the others' median: computing " +
        ms_from_ns(s->computing_ns) + " vs " + ms_from_ns(r.others_computing_ns) + " (" +
        signed_ms_from_ns(r.excess_computing_ns) + "), waiting for data " + ms_from_ns(s->data_wait_ns) +
        " vs " + ms_from_ns(r.others_data_wait_ns) + " (" + signed_ms_from_ns(r.excess_data_wait_ns) +
        "), in communication " + ms_from_ns(s->in_comm_ns) + " vs " + ms_from_ns(r.others_in_comm_ns) + " (" +
        signed_ms_from_ns(r.excess_in_comm_ns) + "), outside operators " + ms_from_ns(s->outside_ns) +
        " vs " + ms_from_ns(r.others_outside_ns) + " (" + signed_ms_from_ns(r.excess_outside_ns) + ").\n";
    if (!r.straggler_outside_functions.empty())
      out += "Rank " + std::to_string(r.straggler) +
             "'s time outside operators, per step: " + outside_function_list(r.straggler_outside_functions) +
             ".\n";
  }
  return out;
}

}  // namespace

std::string straggler_text(const StragglerReport& r) {
  std::string out = "Cluster: " + std::to_string(r.ranks.size()) + " of " + std::to_string(r.world_size) +
                    " ranks, " + std::to_string(r.matched) + " collectives matched across their groups";
  if (r.unmatched > 0) out += ", " + std::to_string(r.unmatched) + " recorded by some members only";
  out += ".\n";
  if (!r.world_sizes.empty()) {
    out += "Two jobs? The runs disagree on the world's size:";
    for (const auto& [size, ranks] : r.world_sizes) {
      out += " " + std::to_string(size) + " (rank(s) " +
             step_ranges(std::vector<int64_t>(ranks.begin(), ranks.end())) + ")";
    }
    out +=
        "; collectives match only within one job's groups, and the missing ranks are counted in the "
        "largest.\n";
  }
  out += ranks_text(r) + clocks_text(r) + r.numbering;
  out += "Waiting at collectives, all ranks: " + ms_from_ns(static_cast<double>(r.total_wait_ns)) + ".\n";
  return out + verdict_text(r) + rank_table(r.per_rank);
}

std::string rank_table(const std::vector<RankWaits>& per_rank) {
  std::string out;
  std::vector<const RankWaits*> rows;
  for (const RankWaits& w : per_rank) rows.push_back(&w);
  if (rows.size() > kRankTableRows) {
    // Many ranks: how much they waited, then the ranks the others waited for most.
    std::vector<uint64_t> waited;
    for (const RankWaits& w : per_rank) waited.push_back(w.waited_ns);
    std::sort(waited.begin(), waited.end());
    auto ms_of = [](uint64_t ns) { return ms_from_ns(static_cast<double>(ns)); };
    out += "Waited for others, per rank of " + std::to_string(rows.size()) + ": minimum " +
           ms_of(waited.front()) + ", median " + ms_of(at_share(waited, 0.5)) + ", 90th percentile " +
           ms_of(at_share(waited, 0.9)) + ", 99th " + ms_of(at_share(waited, 0.99)) + ", maximum " +
           ms_of(waited.back()) + ".\n";
    std::partial_sort(rows.begin(), rows.begin() + kRankTableListed, rows.end(),
                      [](const RankWaits* a, const RankWaits* b) {
                        if (a->waited_for_ns != b->waited_for_ns) return a->waited_for_ns > b->waited_for_ns;
                        return a->rank < b->rank;
                      });
    rows.resize(kRankTableListed);
    out += "The " + std::to_string(kRankTableListed) +
           " ranks the others waited for most (every rank: cluster_analysis.json, trainprof.db):\n";
  }
  out += "rank  waited for others  others waited for it  arrived last\n";
  for (const RankWaits* row : rows) {
    const RankWaits& w = *row;
    char line[128];
    std::snprintf(line, sizeof(line), "%4d  %17s  %20s  %12llu\n", w.rank,
                  ms_from_ns(static_cast<double>(w.waited_ns)).c_str(),
                  ms_from_ns(static_cast<double>(w.waited_for_ns)).c_str(),
                  static_cast<unsigned long long>(w.late_collectives));
    out += line;
  }
  return out;
}

}  // namespace trainprof::analysis
