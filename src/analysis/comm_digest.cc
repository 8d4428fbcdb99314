// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/comm_digest.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "analysis/rank_indexed.h"

namespace trainprof::analysis {
namespace {

double ms(uint64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

// The slowest first, ties to the earlier in comm_timings' order: the same
// few whatever the shares they were picked from.
bool slower_transfer(const SlowTransfer& a, const SlowTransfer& b) {
  if (a.elapse_ns != b.elapse_ns) return a.elapse_ns > b.elapse_ns;
  return std::tie(a.rank, a.index) < std::tie(b.rank, b.index);
}

bool slower_collective(const CollectiveRow& a, const CollectiveRow& b) {
  if (a.duration_ns() != b.duration_ns()) return a.duration_ns() > b.duration_ns();
  return std::tie(a.group, a.sequence) < std::tie(b.group, b.sequence);
}

// The kSlowestKept slowest of `items`, slowest first.
template <typename T, typename Slower>
void keep_slowest(std::vector<T>* items, Slower slower) {
  if (items->size() > kSlowestKept) {
    std::nth_element(items->begin(), items->begin() + kSlowestKept, items->end(), slower);
    items->resize(kSlowestKept);
  }
  std::sort(items->begin(), items->end(), slower);
}

// Offers `item`, keeping at most twice kSlowestKept between trims.
template <typename T, typename Slower>
void offer(std::vector<T>* items, T&& item, Slower slower) {
  items->push_back(std::move(item));
  if (items->size() >= 2 * kSlowestKept) keep_slowest(items, slower);
}

SlowTransfer slow_transfer(const CommTiming& t, int64_t index) {
  SlowTransfer s;
  s.group = t.group;
  s.operation = t.operation;
  s.rank = t.rank;
  s.peer = t.peer;
  s.tag = t.tag;
  s.sends = t.sends;
  s.step = t.step;
  s.bytes = t.bytes;
  s.start_ns = t.start_ns;
  s.elapse_ns = t.elapse_ns();
  s.wait_ns = t.wait_ns;
  s.transit_ns = t.transit_ns();
  s.index = index;
  return s;
}

// One collective's row from its members' parts, timings[begin, end) in rank order.
CollectiveRow collective_row(std::span<const CommTiming> timings, size_t begin, size_t end) {
  const CommTiming& first = timings[begin];
  CollectiveRow row;
  row.group = first.group;
  row.sequence = first.sequence;
  row.operation = first.operation;
  row.first_start_ns = first.start_ns;
  row.first_rank = first.rank;
  const CommTiming* last = &first;
  for (size_t i = begin; i < end; ++i) {
    const CommTiming& t = timings[i];
    // The last arrival by start, then rank; the first the other way.
    if (t.start_ns >= last->start_ns) last = &t;
    if (t.start_ns < row.first_start_ns) row.first_start_ns = t.start_ns, row.first_rank = t.rank;
    row.end_ns = std::max(row.end_ns, t.end_ns);
    row.wait_ns += t.wait_ns;
    row.bytes = std::max(row.bytes, t.bytes);
  }
  row.members = end - begin;
  row.last_operation = last->operation;
  row.step = last->step;
  row.last_start_ns = last->start_ns;
  row.last_rank = last->rank;
  return row;
}

// The arrivals a part keeps of its members: latest first, every one while
// they are at most kArrivalsAll, else the latest kArrivalsLatest.
void add_arrivals(std::span<const CommTiming> timings, size_t begin, size_t end, CollectiveRow* row) {
  std::vector<const CommTiming*> members;
  for (size_t i = begin; i < end; ++i) members.push_back(&timings[i]);
  row->all_arrivals = members.size() <= kArrivalsAll;
  size_t listed = row->all_arrivals ? members.size() : kArrivalsLatest;
  std::partial_sort(members.begin(), members.begin() + static_cast<std::ptrdiff_t>(listed), members.end(),
                    [](const CommTiming* a, const CommTiming* b) {
                      return std::tie(a->start_ns, a->rank) > std::tie(b->start_ns, b->rank);
                    });
  for (size_t i = 0; i < listed; ++i) {
    const CommTiming& t = *members[i];
    row->arrivals.push_back({t.rank, t.start_ns, t.wait_ns, t.elapse_ns()});
  }
}

void merge_counts(ValueCounts&& more, ValueCounts* into) {
  if (into->empty()) {
    *into = std::move(more);
  } else {
    into->merge(more);
  }
}

void merge_operation(OperationDigest&& more, OperationDigest* into) {
  into->operations += more.operations;
  into->parts += more.parts;
  into->bytes += more.bytes;
  merge_counts(std::move(more.elapse_ms), &into->elapse_ms);
  merge_counts(std::move(more.wait_ms), &into->wait_ms);
  merge_counts(std::move(more.transit_ms), &into->transit_ms);
  merge_counts(std::move(more.gb_per_s), &into->gb_per_s);
}

}  // namespace

int64_t ValueCounts::unit_of(double value) {
  return static_cast<int64_t>(std::round(value * 1e4));
}

void ValueCounts::seal() {
  if (pending_.empty()) return;
  std::sort(pending_.begin(), pending_.end());
  ValueCounts counted;
  for (int64_t v : pending_) {
    if (!counted.counts_.empty() && counted.counts_.back().first == v) {
      ++counted.counts_.back().second;
    } else {
      counted.counts_.emplace_back(v, 1);
    }
  }
  std::vector<int64_t>().swap(pending_);
  merge(counted);
}

void ValueCounts::merge(const ValueCounts& other) {
  std::vector<std::pair<int64_t, uint64_t>> out;
  out.reserve(counts_.size() + other.counts_.size());
  auto a = counts_.cbegin();
  auto b = other.counts_.cbegin();
  while (a != counts_.cend() || b != other.counts_.cend()) {
    if (b == other.counts_.cend() || (a != counts_.cend() && a->first < b->first)) {
      out.push_back(*a++);
    } else if (a == counts_.cend() || b->first < a->first) {
      out.push_back(*b++);
    } else {
      out.emplace_back(a->first, a->second + b->second);
      ++a, ++b;
    }
  }
  counts_ = std::move(out);
}

uint64_t ValueCounts::total() const {
  uint64_t n = 0;
  for (const auto& [value, count] : counts_) n += count;
  return n;
}

double ValueCounts::at_share(double share) const {
  const uint64_t index = nearest_rank(share, total());  // 0-based
  uint64_t below = 0;
  for (const auto& [value, count] : counts_) {
    below += count;
    if (index < below) return static_cast<double>(value) / 1e4;
  }
  return max();
}

void add_rank_timings(std::span<const CommTiming> timings, CommDigest* digest) {
  RankIndexed<RankTotals> totals;     // a map's lookup per part cost seconds at 10^7 parts
  RankIndexed<int64_t> transfers_of;  // each rank's count of transfers so far
  std::map<std::pair<bool, std::string_view>, std::pair<GroupDigest*, RankIndexed<uint8_t>>> groups;
  // Parts come in runs of one group and operation: the last answers first.
  std::pair<GroupDigest*, RankIndexed<uint8_t>>* group = nullptr;
  const CommTiming* group_of = nullptr;
  OperationDigest* op = nullptr;
  const CommTiming* op_of = nullptr;
  for (const CommTiming& t : timings) {
    ++digest->parts;
    RankTotals& sums = totals[t.rank];
    digest->ranks += sums.operations == 0 ? 1 : 0;
    ++sums.operations;
    sums.elapse_ns += t.elapse_ns();
    sums.wait_ns += t.wait_ns;
    sums.transit_ns += t.transit_ns();
    sums.bytes += t.bytes;
    if (group_of == nullptr || group_of->transfer != t.transfer || !same_name(group_of->group, t.group)) {
      auto [it, fresh] = groups.try_emplace({t.transfer, t.group});
      if (fresh) it->second.first = &digest->groups[{t.transfer, std::string(t.group)}];
      group = &it->second;
      group_of = &t;
      op_of = nullptr;
    }
    GroupDigest& g = *group->first;
    uint8_t& in_group = group->second[t.rank];
    g.ranks += in_group == 0 ? 1 : 0;
    in_group = 1;
    const int64_t index = t.transfer ? transfers_of[t.rank]++ : 0;
    std::pair<int64_t, int64_t> at = t.transfer ? std::pair<int64_t, int64_t>{t.rank, index}
                                                : std::pair<int64_t, int64_t>{t.sequence, t.rank};
    if (at < g.members_said_at) {
      g.members_said_at = at;
      g.members = t.group_ranks != nullptr ? t.group_ranks->size() : GroupDigest::kUnknownMembers;
    }
    if (op_of == nullptr || !same_name(op_of->operation, t.operation)) {
      op = &g.operations[std::string(t.operation)];
      op_of = &t;
    }
    ++op->parts;
    if (!t.transfer || t.sends) op->bytes += t.bytes;
    if (t.transfer && t.sends) {
      ++op->operations;
      ++digest->transfers;
    }
    op->elapse_ms.add(ms(t.elapse_ns()));
    op->wait_ms.add(ms(t.wait_ns));
    op->transit_ms.add(ms(t.transit_ns()));
    if (t.transit_ns() > 0 && t.bytes > 0)
      op->gb_per_s.add(static_cast<double>(t.bytes) / static_cast<double>(t.transit_ns()));
    if (t.transfer) offer(&digest->slow_transfers, slow_transfer(t, index), slower_transfer);
  }
  for (auto& [key, entry] : groups) {
    for (auto& [name, o] : entry.first->operations) {
      for (ValueCounts* v : {&o.elapse_ms, &o.wait_ms, &o.transit_ms, &o.gb_per_s}) v->seal();
    }
  }
  totals.for_each([digest](int rank, const RankTotals& t) {
    if (t.operations > 0) digest->totals[rank] = t;
  });
  keep_slowest(&digest->slow_transfers, slower_transfer);
  std::vector<LinkBandwidth> sums = link_sums(timings);
  digest->link_sums.insert(digest->link_sums.end(), std::make_move_iterator(sums.begin()),
                           std::make_move_iterator(sums.end()));
}

namespace {

// The part of the collective of timings [begin, end) (its members, by rank).
CollectivePart part_of(std::span<const CommTiming> timings, size_t begin, size_t end) {
  CollectivePart part;
  part.row = collective_row(timings, begin, end);
  part.lowest_rank = timings[begin].rank;
  add_arrivals(timings, begin, end, &part.row);
  for (size_t m = begin; m < end; ++m) {
    std::string_view name = timings[m].operation;
    if (std::find(part.operations.begin(), part.operations.end(), name) == part.operations.end())
      part.operations.emplace_back(name);
  }
  return part;
}

// Calls `each(part)` for each collective of `timings`, in their order.
template <typename Each>
void for_each_part(std::span<const CommTiming> timings, Each each) {
  size_t begin = 0;
  for (size_t i = 0; i < timings.size(); ++i) {
    const CommTiming& t = timings[i];
    bool ends = i + 1 == timings.size() || !same_name(timings[i + 1].group, t.group) ||
                timings[i + 1].sequence != t.sequence;
    if (!ends) continue;
    each(part_of(timings, begin, i + 1));
    begin = i + 1;
  }
}

}  // namespace

void collective_parts(std::span<const CommTiming> timings,
                      const std::function<void(CollectivePart&&)>& each) {
  for_each_part(timings, each);
}

void merge_part(CollectivePart&& more, CollectivePart* into) {
  CollectiveRow& a = into->row;
  CollectiveRow& b = more.row;
  if (more.lowest_rank < into->lowest_rank) {
    into->lowest_rank = more.lowest_rank;
    a.operation = std::move(b.operation);
  }
  // The first arrival by start, then the lower rank; the last by start, then the higher.
  if (std::tie(b.first_start_ns, b.first_rank) < std::tie(a.first_start_ns, a.first_rank)) {
    a.first_start_ns = b.first_start_ns;
    a.first_rank = b.first_rank;
  }
  if (std::tie(b.last_start_ns, b.last_rank) > std::tie(a.last_start_ns, a.last_rank)) {
    a.last_start_ns = b.last_start_ns;
    a.last_rank = b.last_rank;
    a.last_operation = std::move(b.last_operation);
    a.step = b.step;
  }
  a.end_ns = std::max(a.end_ns, b.end_ns);
  a.wait_ns += b.wait_ns;
  a.bytes = std::max(a.bytes, b.bytes);
  a.members += b.members;
  for (std::string& name : more.operations) {
    if (std::find(into->operations.begin(), into->operations.end(), name) == into->operations.end())
      into->operations.push_back(std::move(name));
  }
  a.arrivals.insert(a.arrivals.end(), b.arrivals.begin(), b.arrivals.end());
  a.all_arrivals = a.members <= kArrivalsAll;
  const size_t listed = a.all_arrivals ? a.arrivals.size() : std::min(a.arrivals.size(), kArrivalsLatest);
  std::partial_sort(a.arrivals.begin(), a.arrivals.begin() + static_cast<std::ptrdiff_t>(listed),
                    a.arrivals.end(), [](const MemberArrival& x, const MemberArrival& y) {
                      return std::tie(x.start_ns, x.rank) > std::tie(y.start_ns, y.rank);
                    });
  a.arrivals.resize(listed);
}

void add_collective(CollectivePart&& whole, CommDigest* digest) {
  // Each operation its members name counts the collective once.
  for (const std::string& name : whole.operations) ++digest->collective_operations[{whole.row.group, name}];
  ++digest->collectives;
  CollectiveRow row = whole.row;  // the table's row: no arrivals
  row.arrivals.clear();
  row.all_arrivals = true;
  digest->rows.push_back(std::move(row));
  offer(&digest->slow_collectives, std::move(whole.row), slower_collective);
}

void add_collective_timings(std::span<const CommTiming> timings, CommDigest* digest) {
  for_each_part(timings, [&](CollectivePart&& part) { add_collective(std::move(part), digest); });
  keep_slowest(&digest->slow_collectives, slower_collective);
}

CommDigest digest_timings(const std::vector<CommTiming>& timings) {
  CommDigest digest;
  add_rank_timings(timings, &digest);
  // Collectives come first, by (group, sequence, rank).
  auto transfers =
      std::find_if(timings.begin(), timings.end(), [](const CommTiming& t) { return t.transfer; });
  add_collective_timings(std::span<const CommTiming>(timings.begin(), transfers), &digest);
  finish_digest(&digest);
  return digest;
}

void merge_digest(CommDigest&& more, CommDigest* into) {
  for (auto& [key, g] : more.groups) {
    auto [it, fresh] = into->groups.try_emplace(key);
    GroupDigest& to = it->second;
    if (g.members_said_at < to.members_said_at) {
      to.members_said_at = g.members_said_at;
      to.members = g.members;
    }
    to.ranks += g.ranks;
    for (auto& [name, op] : g.operations) merge_operation(std::move(op), &to.operations[name]);
  }
  into->ranks += more.ranks;
  into->parts += more.parts;
  into->transfers += more.transfers;
  for (auto& [rank, t] : more.totals) into->totals[rank] = t;  // a rank's timings are on one process
  for (LinkBandwidth& l : more.link_sums) into->link_sums.push_back(std::move(l));
  for (SlowTransfer& t : more.slow_transfers) into->slow_transfers.push_back(std::move(t));
  keep_slowest(&into->slow_transfers, slower_transfer);
  into->collectives += more.collectives;
  for (CollectiveRow& row : more.rows) into->rows.push_back(std::move(row));
  for (CollectiveRow& row : more.slow_collectives) into->slow_collectives.push_back(std::move(row));
  keep_slowest(&into->slow_collectives, slower_collective);
  for (const auto& [key, n] : more.collective_operations) into->collective_operations[key] += n;
}

void finish_digest(CommDigest* digest) {
  keep_slowest(&digest->slow_collectives, slower_collective);  // offered, perhaps not trimmed yet
  keep_slowest(&digest->slow_transfers, slower_transfer);
  std::sort(digest->rows.begin(), digest->rows.end(), [](const CollectiveRow& a, const CollectiveRow& b) {
    return std::tie(a.group, a.sequence) < std::tie(b.group, b.sequence);
  });
  for (const auto& [key, n] : digest->collective_operations) {
    auto g = digest->groups.find({false, key.first});
    if (g != digest->groups.end()) g->second.operations[key.second].operations += n;
  }
  digest->collective_operations.clear();
}

std::vector<LinkBandwidth> links_of(const CommDigest& digest) {
  return finish_links(digest.link_sums);
}

}  // namespace trainprof::analysis
