// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/collective_numbering.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace trainprof::analysis {
namespace {

// One member's collectives in one group.
struct Member {
  RankSummary* summary;
  std::vector<RankCollective*> calls;
};

// A collective with a root (a broadcast, scatter, gather or reduce): a
// member that is not the root may leave it before another has come (a
// broadcast's receiver, once the root's data is in), so its members' spans
// need not overlap.
bool has_root(const std::string& operation) {
  std::string op;
  for (char c : operation) op += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto has = [&op](const char* part) { return op.find(part) != std::string::npos; };
  if (has("allreduce") || has("all_reduce") || has("allgather") || has("all_gather") ||
      has("reduce_scatter") || has("alltoall") || has("all_to_all") || has("barrier"))
    return false;
  return has("broadcast") || has("bcast") || has("scatter") || has("gather") || has("reduce");
}

// Whether `a` and `b` can be one collective seen by two members: the same
// operation and bytes, and (`timed`, and not one with a root) neither ended
// before the other began.
bool same_collective(const RankCollective& a, const RankCollective& b, bool timed, uint64_t tolerance_ns) {
  if (a.operation != b.operation || a.bytes != b.bytes) return false;
  if (!timed || has_root(a.operation)) return true;
  return a.start_ns <= b.end_ns + tolerance_ns && b.start_ns <= a.end_ns + tolerance_ns;
}

// How many of `calls`, shifted by `offset`, the reference recorded too, or
// -1 when one of them is not the same collective there.
int64_t fit(const std::map<int64_t, const RankCollective*>& reference,
            const std::vector<RankCollective*>& calls, int64_t offset, bool timed, uint64_t tolerance_ns) {
  int64_t both = 0;
  for (const RankCollective* c : calls) {
    auto it = reference.find(c->sequence + offset);
    if (it == reference.end()) continue;
    if (!same_collective(*it->second, *c, timed, tolerance_ns)) return -1;
    ++both;
  }
  return both;
}

// The median gap between the two members' ends of the collectives both
// recorded under `offset`: the members of one collective leave it together
// (within its transfer), the neighbours they could be taken for do not.
uint64_t end_gap(const std::map<int64_t, const RankCollective*>& reference,
                 const std::vector<RankCollective*>& calls, int64_t offset) {
  std::vector<uint64_t> gaps;
  for (const RankCollective* c : calls) {
    auto it = reference.find(c->sequence + offset);
    if (it == reference.end()) continue;
    uint64_t a = it->second->end_ns, b = c->end_ns;
    gaps.push_back(a > b ? a - b : b - a);
  }
  if (gaps.empty()) return UINT64_MAX;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

// How much larger than twice the best the runner-up's end gap must be for
// the best shift to be taken: a collective's members leave it within its
// last transfer, tens of microseconds on one host.
constexpr uint64_t kClearGapNs = 100'000;

uint64_t first_start(const Member& m) {
  uint64_t t = UINT64_MAX;
  for (const RankCollective* c : m.calls) t = std::min(t, c->start_ns);
  return t;
}

}  // namespace

bool numbered_from_profiling(const RankGroup& g) {
  return g.origin.starts_with("torch.distributed");
}

NumberingReport align_collective_numbering(std::vector<RankSummary>& ranks, uint64_t tolerance_ns) {
  NumberingReport report;
  std::map<std::string, std::vector<Member>> groups;
  for (RankSummary& s : ranks) {
    std::map<std::string, std::vector<RankCollective*>> mine;
    for (RankCollective& c : s.collectives) {
      if (c.group < s.groups.size() && numbered_from_profiling(s.groups[c.group]))
        mine[s.groups[c.group].name].push_back(&c);
    }
    for (auto& [name, calls] : mine) groups[name].push_back(Member{&s, std::move(calls)});
  }
  std::set<const RankCollective*> left_out;
  for (auto& [name, members] : groups) {
    if (members.size() < 2) continue;
    const Member& ref =
        *std::min_element(members.begin(), members.end(),
                          [](const Member& a, const Member& b) { return first_start(a) < first_start(b); });
    std::map<int64_t, const RankCollective*> by_sequence;
    for (const RankCollective* c : ref.calls) by_sequence.emplace(c->sequence, c);
    for (Member& m : members) {
      if (&m == &ref) continue;
      // Times tell collectives apart only on one clock: one host, or both aligned.
      bool timed =
          m.summary->host == ref.summary->host || (m.summary->clock_aligned && ref.summary->clock_aligned);
      if (!timed && fit(by_sequence, m.calls, 0, false, 0) > 0) continue;  // as numbered, all it can tell
      // The shifts under which every collective both recorded agrees: as
      // numbered, and those that make the member's first one a reference's
      // collective it overlaps. Back-to-back collectives overlap their
      // neighbours too; the members of one leave it together: the shift
      // with the smallest gap between the ends wins, when clearly.
      const RankCollective* first =
          *std::min_element(m.calls.begin(), m.calls.end(),
                            [](const auto* a, const auto* b) { return a->start_ns < b->start_ns; });
      std::vector<std::pair<uint64_t, int64_t>> fitting;  // (end gap, offset)
      if (timed) {
        std::set<int64_t> candidates = {0};
        for (const RankCollective* c : ref.calls) {
          if (same_collective(*c, *first, true, tolerance_ns))
            candidates.insert(c->sequence - first->sequence);
        }
        for (int64_t offset : candidates) {
          if (fit(by_sequence, m.calls, offset, true, tolerance_ns) > 0)
            fitting.emplace_back(end_gap(by_sequence, m.calls, offset), offset);
        }
      }
      std::sort(fitting.begin(), fitting.end());
      if (fitting.size() == 1 ||
          (fitting.size() > 1 && fitting[1].first > 2 * fitting[0].first + kClearGapNs)) {
        if (int64_t offset = fitting[0].second; offset != 0) {
          for (RankCollective* c : m.calls) c->sequence += offset;
          report.shifted.push_back({m.summary->rank, name, offset});
        }
        continue;
      }
      std::string why =
          fitting.size() > 1
              ? "several numberings fit its collectives to rank " + std::to_string(ref.summary->rank) + "'s"
          : !timed ? "its collectives differ from rank " + std::to_string(ref.summary->rank) +
                         "'s as numbered, and without aligned clocks their times cannot tell which is which"
                   : "none of its collectives is one of rank " + std::to_string(ref.summary->rank) +
                         "'s (profiled at other times, or the calls differ)";
      report.unaligned.push_back({m.summary->rank, name, m.calls.size(), why});
      left_out.insert(m.calls.begin(), m.calls.end());
    }
  }
  if (!left_out.empty()) {
    for (RankSummary& s : ranks) {
      std::erase_if(s.collectives, [&](const RankCollective& c) { return left_out.count(&c) > 0; });
    }
  }
  return report;
}

std::string numbering_text(const NumberingReport& r) {
  std::string out;
  if (!r.shifted.empty()) {
    out += "Collective numbering: ";
    for (size_t i = 0; i < r.shifted.size(); ++i) {
      const NumberingReport::Shift& s = r.shifted[i];
      out += (i > 0 ? ", " : "") + std::string("rank ") + std::to_string(s.rank) + " in group " + s.group +
             (s.offset > 0 ? " +" : " ") + std::to_string(s.offset);
    }
    out +=
        " (it started profiling at another collective than the others; matched by operation, bytes and "
        "time).\n";
  }
  for (const NumberingReport::Unaligned& u : r.unaligned) {
    out += "Not matched: rank " + std::to_string(u.rank) + "'s " + std::to_string(u.collectives) +
           " collective(s) in group " + u.group + ": " + u.why + ".\n";
  }
  return out;
}

}  // namespace trainprof::analysis
