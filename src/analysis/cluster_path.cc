// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "analysis/cluster_path.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "analysis/group_ids.h"

namespace trainprof::analysis {
namespace {

// One rank's part in a matched blocking collective.
struct Part {
  int rank;
  uint64_t start_ns, end_ns;
  bool in_flight;  // the rank went on after its call (a DDP bucket): it is not held to the end
};

// A blocking collective every member of its group recorded in the same step.
struct Meeting {
  std::string name;  // "MPI_Allreduce #3 (group)"
  std::vector<Part> parts;
  uint64_t last_arrival_ns = 0;
  int last_rank = 0;
};

// One rank's step: its span and the meetings it took part in, in time
// order, with its own part in each (found once: a meeting of the world has
// a part per rank).
struct RankStepMeetings {
  uint64_t start_ns = 0, end_ns = 0;
  std::vector<const Meeting*> meetings;
  std::vector<const Part*> parts;
};

struct StepMeetings {
  std::vector<Meeting> meetings;            // in order of their last arrival
  std::map<int, RankStepMeetings> by_rank;  // ranks with the step
  // The same, looked up by rank (a map's lookups, one per member of each
  // collective, would cost more than the rest of the pass at 10^5 ranks).
  std::unordered_map<int, RankStepMeetings*> of_rank;
};

uint64_t median(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

uint64_t gap(uint64_t from, uint64_t to) {
  return to > from ? to - from : 0;
}

// Every step's matched blocking collectives (and in-flight ones with
// `in_flight`), and each rank's part in them.
std::map<int64_t, StepMeetings> step_meetings(const std::vector<RankSummary>& ranks, bool in_flight) {
  // By (step, group, sequence), the groups numbered (a key of names would
  // compare strings for each of 10^7 calls at 10^5 ranks); then in (step,
  // group name, sequence) order.
  using Key = std::tuple<int64_t, size_t, int64_t>;
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t v = static_cast<uint64_t>(std::get<0>(k)) * 0x9E3779B97F4A7C15ull;
      v = (v ^ std::get<1>(k)) * 0x9E3779B97F4A7C15ull;
      return std::hash<uint64_t>()(v ^ static_cast<uint64_t>(std::get<2>(k)));
    }
  };
  GroupIds ids;
  std::unordered_map<Key, std::pair<Meeting, size_t>, KeyHash> meeting_of;  // and its group's size
  for (const RankSummary& s : ranks) {
    std::vector<size_t> id_of;
    for (const RankGroup& g : s.groups) id_of.push_back(ids.of(g.name));
    for (const RankCollective& c : s.collectives) {
      if ((c.in_flight && !in_flight) || c.step < 0 || c.group >= s.groups.size()) continue;
      const RankGroup& g = s.groups[c.group];
      auto& [m, members] = meeting_of[Key{c.step, id_of[c.group], c.sequence}];
      if (m.parts.empty()) m.name = c.operation + " #" + std::to_string(c.sequence) + " (" + g.name + ")";
      m.parts.push_back(Part{s.rank, c.start_ns, c.end_ns, c.in_flight});
      members = g.world_ranks.size();
    }
  }
  std::vector<Key> keys;
  for (const auto& [key, meeting] : meeting_of) keys.push_back(key);
  std::sort(keys.begin(), keys.end(), [&ids](const Key& a, const Key& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
    int names = ids.name(std::get<1>(a)).compare(ids.name(std::get<1>(b)));
    return names != 0 ? names < 0 : std::get<2>(a) < std::get<2>(b);
  });
  std::map<int64_t, StepMeetings> out;
  for (const RankSummary& s : ranks) {
    for (const RankStep& st : s.steps) out[st.row.step].by_rank[s.rank] = {st.start_ns, st.end_ns, {}, {}};
  }
  for (auto& [number, step] : out) {
    for (auto& [rank, mine] : step.by_rank) step.of_rank.emplace(rank, &mine);
  }
  for (const Key& key : keys) {
    auto& [m, members] = meeting_of.at(key);
    auto step = out.find(std::get<0>(key));
    bool whole = step != out.end() && m.parts.size() == members && m.parts.size() > 1;
    for (const Part& p : m.parts) whole = whole && step->second.of_rank.count(p.rank) != 0;
    if (!whole) continue;  // a member without it or without the step: nothing to match
    for (const Part& p : m.parts) {
      if (p.start_ns >= m.last_arrival_ns) m.last_arrival_ns = p.start_ns, m.last_rank = p.rank;
    }
    step->second.meetings.push_back(std::move(m));
  }
  for (auto& [number, step] : out) {
    std::stable_sort(step.meetings.begin(), step.meetings.end(), [](const Meeting& a, const Meeting& b) {
      return a.last_arrival_ns < b.last_arrival_ns;
    });
    for (const Meeting& m : step.meetings) {
      for (const Part& p : m.parts) {
        RankStepMeetings& mine = *step.of_rank.at(p.rank);
        mine.meetings.push_back(&m);
        mine.parts.push_back(&p);
      }
    }
  }
  return out;
}

// The chain back from the rank that ended the step last, in time order.
void walk_back(int64_t number, const StepMeetings& step, std::vector<ClusterPathSegment>* out) {
  auto last = std::max_element(step.by_rank.begin(), step.by_rank.end(), [](const auto& a, const auto& b) {
    return a.second.end_ns < b.second.end_ns;
  });
  if (last == step.by_rank.end()) return;
  std::vector<ClusterPathSegment> chain;
  int rank = last->first;
  uint64_t t = last->second.end_ns;
  std::string work = "to the step's end";
  const Meeting* arrived_at = nullptr;  // where the path reached this rank (null: the step's end)
  for (;;) {
    const RankStepMeetings& mine = *step.of_rank.at(rank);
    // The rank's meeting before the one the path reached it at.
    size_t at = static_cast<size_t>(std::find(mine.meetings.begin(), mine.meetings.end(), arrived_at) -
                                    mine.meetings.begin());
    const Meeting* before = at > 0 ? mine.meetings[at - 1] : nullptr;
    uint64_t from = before != nullptr ? mine.parts[at - 1]->end_ns : mine.start_ns;
    chain.push_back({number, false, rank, work, from, gap(from, t)});
    if (before == nullptr) break;
    uint64_t released = mine.parts[at - 1]->end_ns;
    chain.push_back(
        {number, true, rank, before->name, before->last_arrival_ns, gap(before->last_arrival_ns, released)});
    work = "before " + before->name;
    arrived_at = before;
    rank = before->last_rank;
    t = before->last_arrival_ns;
  }
  out->insert(out->end(), chain.rbegin(), chain.rend());
}

// A rank's in-flight collectives as the replay follows them: their
// completion recorded and replayed, until a later piece of its work starts
// after the recorded one (from then on it may have waited for it).
struct InFlight {
  uint64_t recorded_ns, replayed_ns;
};

struct RankReplay {
  const RankStepMeetings* step = nullptr;
  // Where its next piece of work starts, replayed: a blocking part's end,
  // an in-flight part's call (the rank went on), or a completion it may
  // have waited for, the latest. (recorded_work finds the recorded one.)
  uint64_t base_ns = 0;
  std::vector<InFlight> pending;  // not yet before a piece's start
  size_t next = 0;                // its next meeting
};

// The replayed start of rank `r`'s piece of work that ends at
// `recorded_end_ns`: completions recorded before it are waited for.
uint64_t piece_start(RankReplay& r, uint64_t recorded_end_ns) {
  std::erase_if(r.pending, [&r, recorded_end_ns](const InFlight& f) {
    if (f.recorded_ns > recorded_end_ns) return false;
    r.base_ns = std::max(r.base_ns, f.replayed_ns);
    return true;
  });
  return r.base_ns;
}

// The step replayed (see the header), `straggler`'s work at the others'
// median when >= 0. Returns the job's step length. A rank's piece of work
// runs from its previous part (a blocking part's end, an in-flight part's
// call, or an in-flight completion recorded before the piece's end, which
// it may have waited for) to its next call.
uint64_t replay(const StepMeetings& step, int straggler) {
  // Per rank, by a dense slot (a meeting of the world has a part per rank:
  // lookups in maps would cost more than the replay).
  std::unordered_map<int, size_t> slot;
  std::vector<RankReplay> of;
  uint64_t first_start = UINT64_MAX;
  for (const auto& [rank, s] : step.by_rank) {
    slot.emplace(rank, of.size());
    RankReplay r;
    r.step = &s;
    r.base_ns = s.start_ns;
    of.push_back(std::move(r));
    first_start = std::min(first_start, s.start_ns);
  }
  auto straggler_slot = slot.find(straggler);
  size_t late = straggler_slot != slot.end() ? straggler_slot->second : SIZE_MAX;
  // The recorded length of a rank's work before its k-th meeting (k == its
  // count: to the step's end), without what it waited for in between.
  auto recorded_work = [&of](size_t i, size_t k) {
    const RankStepMeetings& s = *of[i].step;
    uint64_t from = k == 0                      ? s.start_ns
                    : s.parts[k - 1]->in_flight ? s.parts[k - 1]->start_ns
                                                : s.parts[k - 1]->end_ns;
    uint64_t to = k < s.meetings.size() ? s.parts[k]->start_ns : s.end_ns;
    for (size_t j = 0; j < k; ++j) {  // the latest completion recorded before `to`
      const Part& p = *s.parts[j];
      if (p.in_flight && p.end_ns <= to) from = std::max(from, p.end_ns);
    }
    return gap(from, to);
  };
  auto median_work = [&](const Meeting* m, size_t i, size_t k) {
    std::vector<uint64_t> others;
    if (m == nullptr) {  // to the step's end
      for (size_t j = 0; j < of.size(); ++j)
        if (j != i) others.push_back(recorded_work(j, of[j].step->meetings.size()));
    } else {
      for (const Part& p : m->parts) {
        size_t j = slot.at(p.rank);
        if (j == i) continue;
        const auto& theirs = of[j].step->meetings;
        others.push_back(recorded_work(
            j, static_cast<size_t>(std::find(theirs.begin(), theirs.end(), m) - theirs.begin())));
      }
    }
    // At the median, never longer than it was: a rank faster than the
    // others in some piece keeps that piece.
    return others.empty() ? recorded_work(i, k) : std::min(recorded_work(i, k), median(others));
  };
  // When rank i's piece before its meeting k (or the step's end) ends, replayed.
  auto piece_end = [&](size_t i, const Meeting* m) {
    RankReplay& r = of[i];
    size_t k = r.next;
    uint64_t to = m != nullptr ? r.step->parts[k]->start_ns : r.step->end_ns;
    return piece_start(r, to) + (i == late ? median_work(m, i, k) : recorded_work(i, k));
  };
  std::vector<std::pair<size_t, uint64_t>> calls;  // the members' slots and replayed calls
  for (const Meeting& m : step.meetings) {
    uint64_t arrival = 0;
    calls.clear();
    for (const Part& p : m.parts) {
      size_t i = slot.at(p.rank);
      uint64_t call = piece_end(i, &m);
      calls.emplace_back(i, call);
      arrival = std::max(arrival, call);
    }
    for (size_t n = 0; n < m.parts.size(); ++n) {
      auto [i, call] = calls[n];
      const Part& p = m.parts[n];
      RankReplay& r = of[i];
      uint64_t released = arrival + gap(m.last_arrival_ns, p.end_ns);  // its transfer after the last arrival
      if (p.in_flight) {  // the rank goes on from its call; the completion may be waited for later
        r.pending.push_back({p.end_ns, released});
        r.base_ns = call;
      } else {
        r.base_ns = released;
      }
      ++r.next;
    }
  }
  uint64_t last_end = 0;
  for (size_t i = 0; i < of.size(); ++i) last_end = std::max(last_end, piece_end(i, nullptr));
  return gap(first_start, last_end);
}

}  // namespace

ClusterPath cluster_critical_path(const std::vector<RankSummary>& ranks, int straggler) {
  ClusterPath out;
  for (const auto& [number, step] : step_meetings(ranks, false)) {
    if (step.by_rank.size() < 2) continue;
    walk_back(number, step, &out.segments);
  }
  if (straggler < 0) return out;
  // The what-if follows in-flight collectives too: a straggler late to a
  // DDP bucket holds the others where they wait for its completion.
  for (const auto& [number, step] : step_meetings(ranks, true)) {
    if (step.by_rank.size() < 2 || step.by_rank.count(straggler) == 0) continue;
    out.straggler_at_median.push_back({number, replay(step, -1), replay(step, straggler)});
  }
  return out;
}

}  // namespace trainprof::analysis
