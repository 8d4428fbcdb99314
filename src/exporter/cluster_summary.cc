// Copyright trainprof authors.
#include "exporter/cluster_summary.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <tuple>

#include "analysis/rank_indexed.h"
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
// below which p % of them lie. Selected, not sorted: a world group's
// operations have 10^7 parts at 10^5 ranks.
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

// Distinct ranks, counted as they are first seen.
class RankSet {
 public:
  void insert(int rank) {
    uint8_t& seen = seen_[rank];
    size_ += seen == 0 ? 1 : 0;
    seen = 1;
  }
  size_t size() const { return size_; }

 private:
  analysis::RankIndexed<uint8_t> seen_;
  size_t size_ = 0;
};

// One operation's parts in one group.
struct OperationParts {
  uint64_t operations = 0;  // collectives (distinct sequences), or transfers (sending sides)
  uint64_t parts = 0;       // every rank's part
  uint64_t bytes = 0;       // collectives: each member's; transfers: the sending sides'
  int64_t last_sequence = -1;
  std::vector<double> elapse_ms, wait_ms, transit_ms, gb_per_s;
};

json group_json(const std::vector<const CommTiming*>& parts) {
  const CommTiming& first = *parts.front();
  std::map<std::string_view, OperationParts> by_operation;
  OperationParts* current = nullptr;  // parts come in runs of one operation
  std::string_view current_name;
  RankSet ranks;
  for (const CommTiming* t : parts) {
    if (current == nullptr || !analysis::same_name(t->operation, current_name)) {
      current = &by_operation[t->operation];
      current_name = t->operation;
    }
    OperationParts& p = *current;
    ++p.parts;
    ranks.insert(t->rank);
    if (t->transfer ? t->sends : p.last_sequence != t->sequence) {
      ++p.operations;
      if (!t->transfer) p.last_sequence = t->sequence;
    }
    if (!t->transfer || t->sends) p.bytes += t->bytes;
    p.elapse_ms.push_back(ms(t->elapse_ns()));
    p.wait_ms.push_back(ms(t->wait_ns));
    p.transit_ms.push_back(ms(t->transit_ns()));
    if (t->transit_ns() > 0 && t->bytes > 0)
      p.gb_per_s.push_back(static_cast<double>(t->bytes) / static_cast<double>(t->transit_ns()));
  }
  json operations = json::array();
  for (auto& [name, p] : by_operation) {
    operations.push_back({{"operation", name},
                          {first.transfer ? "transfers" : "collectives", p.operations},
                          {"rank_parts", p.parts},
                          {"bytes", p.bytes},
                          {"elapse_ms", distribution(p.elapse_ms)},
                          {"wait_ms", distribution(p.wait_ms)},
                          {"transit_ms", distribution(p.transit_ms)},
                          {"bandwidth_gb_per_s", distribution(p.gb_per_s)}});
  }
  return {{"group", first.group},
          {"kind", first.transfer ? "p2p" : "collective"},
          {"members", first.group_ranks != nullptr ? first.group_ranks->size() : ranks.size()},
          {"ranks_with_operations", ranks.size()},
          {"operations", operations}};
}

// A collective: its members' timings, timings[begin, end).
struct Collective {
  uint64_t duration_ns;  // first arrival to the last member's end
  size_t begin, end;
  bool operator>(const Collective& o) const { return duration_ns > o.duration_ns; }
};

json collective_json(const std::vector<CommTiming>& timings, const Collective& c) {
  std::vector<const CommTiming*> members;
  for (size_t i = c.begin; i < c.end; ++i) members.push_back(&timings[i]);
  // Latest arrival first (by start, then rank: the one the others waited for).
  std::sort(members.begin(), members.end(), [](const CommTiming* a, const CommTiming* b) {
    return std::tie(a->start_ns, a->rank) > std::tie(b->start_ns, b->rank);
  });
  const CommTiming& last = *members.front();
  const CommTiming& first = *members.back();
  uint64_t end = 0, wait = 0, bytes = 0;
  for (const CommTiming* t : members) {
    end = std::max(end, t->end_ns);
    wait += t->wait_ns;
    bytes = std::max(bytes, t->bytes);
  }
  size_t listed = members.size() <= kListedMembers ? members.size() : kLatestMembers;
  json arrivals = json::array();
  for (size_t i = 0; i < listed; ++i) {
    const CommTiming& t = *members[i];
    arrivals.push_back({{"rank", t.rank},
                        {"start_us", us(t.start_ns)},
                        {"wait_ms", round4(ms(t.wait_ns))},
                        {"elapse_ms", round4(ms(t.elapse_ns()))}});
  }
  return {{"group", last.group},
          {"sequence", last.sequence},
          {"operation", last.operation},
          {"step", last.step},
          {"members", members.size()},
          {"bytes", bytes},
          {"duration_ms", round4(ms(c.duration_ns))},
          {"arrival_spread_ms", round4(ms(last.start_ns - first.start_ns))},
          {"after_last_arrival_ms", round4(ms(end - std::min(end, last.start_ns)))},
          {"members_waited_ms", round4(ms(wait))},
          {"first_arrival", {{"rank", first.rank}, {"start_us", us(first.start_ns)}}},
          {"last_arrival", {{"rank", last.rank}, {"start_us", us(last.start_ns)}}},
          {"arrivals_listed", listed == members.size() ? "all, latest first" : "the latest, latest first"},
          {"arrivals", arrivals}};
}

json transfer_json(const CommTiming& t) {
  return {{"group", t.group},
          {"operation", t.operation},
          {"rank", t.rank},
          {"peer", t.peer},
          {"side", t.sends ? "send" : "receive"},
          {"tag", t.tag},
          {"step", t.step},
          {"bytes", t.bytes},
          {"start_us", us(t.start_ns)},
          {"elapse_ms", round4(ms(t.elapse_ns()))},
          {"wait_ms", round4(ms(t.wait_ns))},
          {"transit_ms", round4(ms(t.transit_ns()))}};
}

// The `count` largest of what is offered, largest first.
template <typename T, typename Greater = std::greater<T>>
class Slowest {
 public:
  explicit Slowest(size_t count) : count_(count) {}
  void offer(const T& item) {
    if (heap_.size() < count_) {
      heap_.push(item);
    } else if (count_ > 0 && Greater()(item, heap_.top())) {
      heap_.pop();
      heap_.push(item);
    }
  }
  std::vector<T> largest_first() {
    std::vector<T> out;
    for (; !heap_.empty(); heap_.pop()) out.push_back(heap_.top());
    std::reverse(out.begin(), out.end());
    return out;
  }

 private:
  size_t count_;
  std::priority_queue<T, std::vector<T>, Greater> heap_;  // the smallest on top
};

struct TransferByElapse {
  uint64_t elapse_ns;
  size_t index;
  bool operator>(const TransferByElapse& o) const { return elapse_ns > o.elapse_ns; }
};

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

std::string cluster_communication_summary_json(const std::vector<CommTiming>& timings,
                                               const std::vector<analysis::LinkBandwidth>& links) {
  json groups = json::array();
  Slowest<Collective, std::greater<Collective>> collectives(kSlowestListed);
  Slowest<TransferByElapse, std::greater<TransferByElapse>> transfers(kSlowestListed);
  // Collectives come by (group, sequence, rank): a group's together, then
  // one collective's members together. Transfers come by rank: gathered per group.
  std::map<std::string_view, std::vector<const CommTiming*>> transfer_groups;
  std::vector<const CommTiming*> group;
  RankSet ranks;
  uint64_t collective_count = 0, transfer_count = 0;
  size_t begin = 0;
  for (size_t i = 0; i < timings.size(); ++i) {
    const CommTiming& t = timings[i];
    ranks.insert(t.rank);
    if (t.transfer) {
      transfer_groups[t.group].push_back(&t);
      transfers.offer({t.elapse_ns(), i});
      transfer_count += t.sends ? 1 : 0;
      continue;
    }
    group.push_back(&t);
    bool collective_ends = i + 1 == timings.size() || timings[i + 1].transfer ||
                           !analysis::same_name(timings[i + 1].group, t.group) ||
                           timings[i + 1].sequence != t.sequence;
    if (collective_ends) {
      uint64_t first = UINT64_MAX, end = 0;
      for (size_t m = begin; m <= i; ++m) {
        first = std::min(first, timings[m].start_ns);
        end = std::max(end, timings[m].end_ns);
      }
      collectives.offer({end - std::min(end, first), begin, i + 1});
      ++collective_count;
      begin = i + 1;
    }
    bool group_ends = i + 1 == timings.size() || timings[i + 1].transfer ||
                      !analysis::same_name(timings[i + 1].group, t.group);
    if (group_ends) {
      groups.push_back(group_json(group));
      group.clear();
    }
  }
  for (const auto& [name, parts] : transfer_groups) groups.push_back(group_json(parts));
  json slowest_collectives = json::array(), slowest_transfers = json::array();
  for (const Collective& c : collectives.largest_first())
    slowest_collectives.push_back(collective_json(timings, c));
  for (const TransferByElapse& t : transfers.largest_first())
    slowest_transfers.push_back(transfer_json(timings[t.index]));
  json out = {{"ranks", ranks.size()},
              {"collectives", collective_count},
              {"transfers", transfer_count},
              {"rank_parts", timings.size()},
              {"groups", groups},
              {"slowest_collectives", slowest_collectives},
              {"slowest_transfers", slowest_transfers},
              {"links", links_json(links)},
              {"full_tables", "trainprof.db (tables communication, collectives, links, steps, ranks)"}};
  return base::json_text(out, 1) + "\n";
}

}  // namespace trainprof::exporter
