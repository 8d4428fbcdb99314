// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/cluster_spread.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "analysis/rank_summary_bytes.h"
#include "base/byte_buffer.h"

namespace trainprof::pipeline {
namespace {

using analysis::RankCollective;
using analysis::RankSummary;
using analysis::RankWaits;

// One all-to-all: a message to each process, written in turn, and what
// arrives; a message that cannot be read is said in `error` (the protocol
// goes on, so that no process waits for another's next call).
class Round {
 public:
  explicit Round(ClusterExchange& x) : x_(x), out_(static_cast<size_t>(x.size())) {}
  base::ByteWriter to(int process) { return base::ByteWriter(&out_[static_cast<size_t>(process)]); }
  std::string& bytes_to(int process) { return out_[static_cast<size_t>(process)]; }
  std::vector<std::string> run() { return x_.all_to_all(std::move(out_)); }

 private:
  ClusterExchange& x_;
  std::vector<std::string> out_;
};

// Reads each process's message with `read` (false: damaged).
template <typename Read>
void read_all(const std::vector<std::string>& incoming, const char* what, std::string* error, Read read) {
  for (size_t p = 0; p < incoming.size(); ++p) {
    base::ByteReader r(incoming[p]);
    if ((!read(r) || !r.empty()) && error->empty())
      *error = std::string(what) + " from process " + std::to_string(p) + " arrived damaged";
  }
}

// Reads `n` items, each with `item` (false: damaged).
template <typename Item>
bool read_items(base::ByteReader& r, size_t least_bytes, Item item) {
  uint64_t n = 0;
  if (!r.count(least_bytes, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    if (!item()) return false;
  }
  return true;
}

// 1. Each group's size (as the highest rank holding it says) and the
// clocks' largest error, on every process.
struct Facts {
  std::map<std::string, std::pair<int, uint64_t>> group_size;  // name -> (rank that said, size)
  uint64_t clock_error_ns = 0;
  std::map<int, std::string> hosts;  // every rank's
};

Facts share_facts(const std::vector<RankSummary>& mine, ClusterExchange& x, std::string* error) {
  std::map<std::string, std::pair<int, uint64_t>> local;
  uint64_t clock_error = 0;
  for (const RankSummary& s : mine) {
    clock_error = std::max(clock_error, s.clock_error_ns);
    for (const analysis::RankGroup& g : s.groups) {
      auto [it, fresh] = local.try_emplace(g.name, s.rank, g.world_ranks.size());
      if (!fresh && s.rank >= it->second.first) it->second = {s.rank, g.world_ranks.size()};
    }
  }
  std::string message;
  base::ByteWriter w(&message);
  w.put(clock_error);
  w.put<uint64_t>(local.size());
  for (const auto& [name, said] : local) {
    w.put(name);
    w.put<int32_t>(said.first);
    w.put(said.second);
  }
  w.put<uint64_t>(mine.size());
  for (const RankSummary& s : mine) {
    w.put<int32_t>(s.rank);
    w.put(s.host);
  }
  Round round(x);
  for (int p = 0; p < x.size(); ++p) round.bytes_to(p) = message;
  Facts facts;
  read_all(round.run(), "the groups' sizes", error, [&](base::ByteReader& r) {
    uint64_t e = 0;
    if (!r.get(&e)) return false;
    facts.clock_error_ns = std::max(facts.clock_error_ns, e);
    return read_items(r, 20,
                      [&] {
                        std::string name;
                        int32_t rank = 0;
                        uint64_t size = 0;
                        if (!r.get(&name) || !r.get(&rank) || !r.get(&size)) return false;
                        auto [it, fresh] = facts.group_size.try_emplace(name, rank, size);
                        if (!fresh && rank >= it->second.first) it->second = {rank, size};
                        return true;
                      }) &&
           read_items(r, 12, [&] {
             int32_t rank = 0;
             std::string host;
             if (!r.get(&rank) || !r.get(&host)) return false;
             facts.hosts[rank] = std::move(host);
             return true;
           });
  });
  return facts;
}

// 2. The torch.distributed groups' numbering, aligned where each group is
// owned; the offsets (or the collectives left out) applied where each rank
// is; the report on process 0.
analysis::NumberingReport align_numbering(std::vector<RankSummary>& mine, ClusterExchange& x,
                                          uint64_t tolerance_ns, std::string* error) {
  const int processes = x.size();
  Round members(x);
  for (const RankSummary& s : mine) {
    std::map<uint32_t, std::vector<const RankCollective*>> by_group;
    for (const RankCollective& c : s.collectives) {
      if (c.group < s.groups.size() && analysis::numbered_from_profiling(s.groups[c.group]))
        by_group[c.group].push_back(&c);
    }
    for (const auto& [group, calls] : by_group) {
      const analysis::RankGroup& g = s.groups[group];
      base::ByteWriter w = members.to(key_owner(g.name, 0, processes));
      w.put(g.name);
      w.put(g.origin);
      w.put<int32_t>(s.rank);
      w.put(s.host);
      w.put<uint8_t>(s.clock_aligned);
      w.put<uint64_t>(calls.size());
      for (const RankCollective* c : calls) {
        w.put(c->sequence);
        w.put(c->operation);
        w.put(c->bytes);
        w.put(c->start_ns);
        w.put(c->end_ns);
      }
    }
  }
  // Each member as a summary of its one group, ordered by (group, rank) as
  // the one-process pass meets them.
  std::vector<RankSummary> owned;
  read_all(members.run(), "a group's collectives", error, [&](base::ByteReader& r) {
    while (!r.empty()) {
      RankSummary m;
      analysis::RankGroup g;
      int32_t rank = 0;
      uint8_t aligned = 0;
      if (!r.get(&g.name) || !r.get(&g.origin) || !r.get(&rank) || !r.get(&m.host) || !r.get(&aligned))
        return false;
      m.rank = rank;
      m.clock_aligned = aligned != 0;
      m.groups.push_back(std::move(g));
      bool ok = read_items(r, 48, [&] {
        RankCollective c{};
        c.group = 0;
        if (!r.get(&c.sequence) || !r.get(&c.operation) || !r.get(&c.bytes) || !r.get(&c.start_ns) ||
            !r.get(&c.end_ns))
          return false;
        m.collectives.push_back(std::move(c));
        return true;
      });
      if (!ok) return false;
      owned.push_back(std::move(m));
    }
    return true;
  });
  std::sort(owned.begin(), owned.end(), [](const RankSummary& a, const RankSummary& b) {
    return std::tie(a.groups[0].name, a.rank) < std::tie(b.groups[0].name, b.rank);
  });
  analysis::NumberingReport found = analysis::align_collective_numbering(owned, tolerance_ns);

  // Each result to its rank's process and to process 0.
  Round results(x);
  auto send = [&](int rank, const std::string& group, uint8_t left_out, int64_t offset, uint64_t calls,
                  const std::string& why) {
    // (process, 1: for the report; 0: to apply)
    for (auto [p, for_report] : {std::pair{rank_owner(rank, processes), 0}, std::pair{0, 1}}) {
      base::ByteWriter w = results.to(p);
      w.put<uint8_t>(static_cast<uint8_t>(for_report));
      w.put<int32_t>(rank);
      w.put(group);
      w.put(left_out);
      w.put(offset);
      w.put(calls);
      w.put(why);
    }
  };
  for (const auto& s : found.shifted) send(s.rank, s.group, 0, s.offset, 0, "");
  for (const auto& u : found.unaligned) send(u.rank, u.group, 1, 0, u.collectives, u.why);
  analysis::NumberingReport report;
  std::map<int, RankSummary*> held;
  for (RankSummary& s : mine) held[s.rank] = &s;
  read_all(results.run(), "a numbering", error, [&](base::ByteReader& r) {
    while (!r.empty()) {
      uint8_t for_report = 0, left_out = 0;
      int32_t rank = 0;
      std::string group, why;
      int64_t offset = 0;
      uint64_t calls = 0;
      if (!r.get(&for_report) || !r.get(&rank) || !r.get(&group) || !r.get(&left_out) || !r.get(&offset) ||
          !r.get(&calls) || !r.get(&why))
        return false;
      if (for_report != 0) {
        if (left_out != 0) {
          report.unaligned.push_back({rank, group, calls, why});
        } else {
          report.shifted.push_back({rank, group, offset});
        }
        continue;
      }
      auto it = held.find(rank);
      if (it == held.end()) return false;
      RankSummary& s = *it->second;
      auto in_group = [&s, &group](const RankCollective& c) {
        return c.group < s.groups.size() && s.groups[c.group].name == group &&
               analysis::numbered_from_profiling(s.groups[c.group]);
      };
      if (left_out != 0) {
        std::erase_if(s.collectives, in_group);
      } else {
        for (RankCollective& c : s.collectives) c.sequence += in_group(c) ? offset : 0;
      }
    }
    return true;
  });
  auto by_group_rank = [](const auto& a, const auto& b) {
    return std::tie(a.group, a.rank) < std::tie(b.group, b.rank);
  };
  std::sort(report.shifted.begin(), report.shifted.end(), by_group_rank);
  std::sort(report.unaligned.begin(), report.unaligned.end(), by_group_rank);
  return report;
}

void put_step_sums(base::ByteWriter& w, const std::map<int64_t, uint64_t>& by_step) {
  w.put<uint64_t>(by_step.size());
  for (const auto& [step, ns] : by_step) {
    w.put(step);
    w.put(ns);
  }
}

bool get_step_sums(base::ByteReader& r, std::map<int64_t, uint64_t>* by_step) {
  return read_items(r, 16, [&] {
    int64_t step = 0;
    uint64_t ns = 0;
    if (!r.get(&step) || !r.get(&ns)) return false;
    (*by_step)[step] += ns;
    return true;
  });
}

// A collective or transfer of this process's ranks: mine[rank][index].
struct Slot {
  size_t rank, index;
};

// Reads the answers to what was `asked` of each process, one uint64_t
// each in the order asked, into `slot_of(rank)[index]`.
template <typename SlotOf>
void read_answers(const std::vector<std::string>& incoming, const std::vector<std::vector<Slot>>& asked,
                  const char* what, std::string* error, SlotOf slot_of) {
  size_t p = 0;
  read_all(incoming, what, error, [&](base::ByteReader& r) {
    const std::vector<Slot>& slots = asked[p++];
    for (const Slot& slot : slots) {
      uint64_t value = 0;
      if (!r.get(&value)) return false;
      std::vector<uint64_t>& list = slot_of(slot.rank);
      if (slot.index < list.size()) list[slot.index] = value;
    }
    return true;
  });
}

// A collective owned here: its members' arrivals, its last one.
struct Owned {
  std::vector<analysis::Arrival> arrivals;
  uint64_t last = analysis::MatchedEnds::kUnmatched;
};

// The last arrival where every one of the group's `members` recorded the
// collective (as analysis::comm_timings decides), else kUnmatched.
uint64_t last_arrival(const std::vector<analysis::Arrival>& arrivals, size_t members) {
  if (!analysis::recorded_by_all(arrivals.size(), members)) return analysis::MatchedEnds::kUnmatched;
  uint64_t last = 0;
  for (const analysis::Arrival& a : arrivals) last = std::max(last, a.start_ns);
  return last;
}

// 4a. Each arrival's collective's last arrival back where it came from.
void send_collective_ends(const std::vector<std::vector<Owned*>>& arrived,
                          const std::vector<std::vector<Slot>>& asked, ClusterExchange& x, SpreadMatch* out) {
  Round answers(x);
  for (size_t p = 0; p < arrived.size(); ++p) {
    base::ByteWriter w = answers.to(static_cast<int>(p));
    for (const Owned* collective : arrived[p]) w.put(collective->last);
  }
  read_answers(answers.run(), asked, "the collectives' last arrivals", &out->error,
               [out](size_t rank) -> std::vector<uint64_t>& { return out->ends[rank].collective_last; });
}

// 4b. Each transfer's side to the owner of its channel (group, sender,
// receiver, tag), which pairs them (analysis::pair_in_order) and sends
// each side the other's start.
void send_transfer_ends(const std::vector<RankSummary>& mine, ClusterExchange& x, SpreadMatch* out) {
  const int processes = x.size();
  Round sides(x);
  std::vector<std::vector<Slot>> asked(static_cast<size_t>(processes));
  for (size_t i = 0; i < mine.size(); ++i) {
    const RankSummary& s = mine[i];
    for (size_t j = 0; j < s.transfers.size(); ++j) {
      const analysis::RankTransfer& t = s.transfers[j];
      if (t.peer < 0 || t.tag < 0) continue;
      const std::string& group = s.groups[t.group].name;
      const int32_t sender = t.send ? s.rank : t.peer, receiver = t.send ? t.peer : s.rank;
      const int64_t pair = static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(sender)) << 32 |
                                                static_cast<uint32_t>(receiver)) ^
                           static_cast<int64_t>(t.tag) * 0x9E3779B9;
      const int owner = key_owner(group, pair, processes);
      asked[static_cast<size_t>(owner)].push_back({i, j});
      base::ByteWriter w = sides.to(owner);
      w.put(group);
      w.put(sender);
      w.put(receiver);
      w.put(t.tag);
      w.put<uint8_t>(t.send);
      w.put(t.start_ns);
    }
  }
  // A side: its start, and where its answer goes (process, place in its message).
  struct Side {
    uint64_t start_ns;
    size_t process, place;
  };
  using Channel = std::tuple<std::string, int32_t, int32_t, int32_t>;
  std::map<Channel, std::pair<std::vector<Side>, std::vector<Side>>> channels;  // sends, receives
  std::vector<std::vector<uint64_t>> answer(static_cast<size_t>(processes));
  size_t from = 0;
  read_all(sides.run(), "a transfer's side", &out->error, [&](base::ByteReader& r) {
    const size_t p = from++;
    while (!r.empty()) {
      Channel c;
      uint8_t send = 0;
      uint64_t start = 0;
      if (!r.get(&std::get<0>(c)) || !r.get(&std::get<1>(c)) || !r.get(&std::get<2>(c)) ||
          !r.get(&std::get<3>(c)) || !r.get(&send) || !r.get(&start))
        return false;
      auto& [sends, receives] = channels[std::move(c)];
      (send != 0 ? sends : receives).push_back({start, p, answer[p].size()});
      answer[p].push_back(analysis::MatchedEnds::kUnmatched);
    }
    return true;
  });
  for (auto& [channel, both] : channels) {
    analysis::pair_in_order(
        both.first, both.second, [](const Side& side) { return side.start_ns; },
        [&answer](const Side& send, const Side& receive) {
          answer[send.process][send.place] = receive.start_ns;
          answer[receive.process][receive.place] = send.start_ns;
        });
  }
  Round answers(x);
  for (size_t p = 0; p < answer.size(); ++p) {
    base::ByteWriter w = answers.to(static_cast<int>(p));
    for (uint64_t start : answer[p]) w.put(start);
  }
  read_answers(answers.run(), asked, "the transfers' other sides", &out->error,
               [out](size_t rank) -> std::vector<uint64_t>& { return out->ends[rank].transfer_other_start; });
}

}  // namespace

// FNV-1a of the name's bytes, then the number's.
int key_owner(std::string_view name, int64_t number, int processes) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const unsigned char*>(p)[i];
      h *= 1099511628211ull;
    }
  };
  mix(name.data(), name.size());
  mix(&number, sizeof(number));
  return static_cast<int>(h % static_cast<uint64_t>(processes));
}

SpreadMatch spread_match(std::vector<RankSummary>& mine, ClusterExchange& x, uint64_t slack_ns) {
  SpreadMatch out;
  const int processes = x.size();
  const bool first = x.index() == 0;
  std::sort(mine.begin(), mine.end(),
            [](const RankSummary& a, const RankSummary& b) { return a.rank < b.rank; });
  Facts facts = share_facts(mine, x, &out.error);
  out.numbering = align_numbering(mine, x, 2 * facts.clock_error_ns + slack_ns, &out.error);

  // 3. Every arrival to the owner of its (group, sequence); what was sent
  // to each process, in order (the answers come back in it).
  Round arrivals(x);
  std::vector<std::vector<Slot>> asked(static_cast<size_t>(processes));
  for (size_t i = 0; i < mine.size(); ++i) {
    const RankSummary& s = mine[i];
    for (size_t j = 0; j < s.collectives.size(); ++j) {
      const RankCollective& c = s.collectives[j];
      const std::string& group = s.groups[c.group].name;
      const int owner = key_owner(group, c.sequence, processes);
      asked[static_cast<size_t>(owner)].push_back({i, j});
      base::ByteWriter w = arrivals.to(owner);
      w.put(group);
      w.put(c.sequence);
      w.put<int32_t>(s.rank);
      w.put(c.start_ns);
      w.put(c.step);
      w.put<uint8_t>(c.in_flight);
    }
  }
  std::map<std::pair<std::string, int64_t>, Owned> owned;
  // Each process's arrivals' collectives, in the order they came.
  std::vector<std::vector<Owned*>> arrived(static_cast<size_t>(processes));
  size_t from = 0;
  read_all(arrivals.run(), "an arrival", &out.error, [&](base::ByteReader& r) {
    const size_t p = from++;
    while (!r.empty()) {
      std::string group;
      int64_t sequence = 0, step = 0;
      int32_t rank = 0;
      uint64_t start = 0;
      uint8_t in_flight = 0;
      if (!r.get(&group) || !r.get(&sequence) || !r.get(&rank) || !r.get(&start) || !r.get(&step) ||
          !r.get(&in_flight))
        return false;
      Owned& collective = owned[{std::move(group), sequence}];
      collective.arrivals.push_back(analysis::Arrival{rank, start, step, in_flight != 0});
      arrived[p].push_back(&collective);
    }
    return true;
  });
  // The waits at the collectives owned here, summed per rank: the in-flight
  // waiting per step goes to each rank's process, the rest to process 0.
  analysis::MatchCounts counts;
  std::map<int, RankWaits> sums;
  for (auto& [key, collective] : owned) {
    auto size = facts.group_size.find(key.first);
    const size_t members = size == facts.group_size.end() ? 0 : size->second.second;
    collective.last = last_arrival(collective.arrivals, members);
    analysis::match_collective(
        collective.arrivals, members, [&sums](int rank) -> RankWaits& { return sums[rank]; }, &counts);
  }

  out.ends.resize(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    out.ends[i].collective_last.assign(mine[i].collectives.size(), analysis::MatchedEnds::kUnmatched);
    out.ends[i].transfer_other_start.assign(mine[i].transfers.size(), analysis::MatchedEnds::kUnmatched);
  }
  send_collective_ends(arrived, asked, x, &out);
  send_transfer_ends(mine, x, &out);
  out.hosts = std::move(facts.hosts);

  // 5. To process 0: each rank's facts and last sequence per group (from
  // the rank's process), the sums (from where they were matched); to each
  // rank's process, its in-flight waiting per step.
  Round gather(x);
  {
    base::ByteWriter w = gather.to(0);
    w.put<uint64_t>(mine.size());
    for (const RankSummary& s : mine) {
      RankSummary light;
      light.rank = s.rank;
      light.world_size = s.world_size;
      light.host = s.host;
      light.clock_aligned = s.clock_aligned;
      light.clock_offset_ns = s.clock_offset_ns;
      light.clock_error_ns = s.clock_error_ns;
      light.clock_problem = s.clock_problem;
      light.end = s.end;
      light.outside_functions = s.outside_functions;  // three at most
      std::string bytes;
      analysis::append_rank_summary_bytes(light, &bytes);
      w.put(bytes);
      w.put<uint64_t>(s.steps.size());
      std::map<std::string, int64_t> last;
      for (const RankCollective& c : s.collectives) {
        auto [it, fresh] = last.try_emplace(s.groups[c.group].name, 0);
        it->second = std::max(it->second, c.sequence);
      }
      w.put<uint64_t>(last.size());
      for (const auto& [group, sequence] : last) {
        w.put(group);
        w.put(sequence);
      }
    }
    w.put(counts.matched);
    w.put(counts.unmatched);
    w.put(counts.total_wait_ns);
    w.put<uint64_t>(sums.size());
    for (const auto& [rank, sum] : sums) {
      w.put<int32_t>(rank);
      w.put(sum.waited_ns);
      w.put(sum.waited_for_ns);
      w.put(sum.late_collectives);
      w.put(sum.collectives);
      w.put(sum.waited_in_steps_ns);
      put_step_sums(w, sum.waited_for_by_step);
    }
  }
  std::vector<std::string> gathered = gather.run();
  // The in-flight waits, in a round of their own: process 0's message above
  // holds one kind of thing only.
  Round in_flight(x);
  for (const auto& [rank, sum] : sums) {
    if (sum.in_flight_waited_by_step.empty()) continue;
    base::ByteWriter w = in_flight.to(rank_owner(rank, processes));
    w.put<int32_t>(rank);
    put_step_sums(w, sum.in_flight_waited_by_step);
  }
  std::map<int, std::map<int64_t, uint64_t>> my_in_flight;
  read_all(in_flight.run(), "in-flight waits", &out.error, [&](base::ByteReader& r) {
    while (!r.empty()) {
      int32_t rank = 0;
      if (!r.get(&rank) || !get_step_sums(r, &my_in_flight[rank])) return false;
    }
    return true;
  });

  analysis::StragglerReport& report = out.report;
  std::vector<int64_t> late_steps;
  if (first) {
    std::vector<RankSummary> lights;
    std::map<std::string, std::map<int, int64_t>> last_by_group;
    std::map<int, RankWaits> all_sums;
    std::map<int, uint64_t> steps_of;
    analysis::MatchCounts all_counts;
    read_all(gathered, "the ranks' waits", &out.error, [&](base::ByteReader& r) {
      bool ok = read_items(r, 16, [&] {
        std::string bytes;
        if (!r.get(&bytes)) return false;
        std::string_view in = bytes;
        RankSummary light;
        uint64_t steps = 0;
        if (!analysis::read_rank_summary_bytes(&in, &light) || !r.get(&steps)) return false;
        int rank = light.rank;
        steps_of[rank] = steps;
        lights.push_back(std::move(light));
        return read_items(r, 16, [&] {
          std::string group;
          int64_t sequence = 0;
          if (!r.get(&group) || !r.get(&sequence)) return false;
          last_by_group[group][rank] = sequence;
          return true;
        });
      });
      analysis::MatchCounts some;
      if (!ok || !r.get(&some.matched) || !r.get(&some.unmatched) || !r.get(&some.total_wait_ns))
        return false;
      all_counts.matched += some.matched;
      all_counts.unmatched += some.unmatched;
      all_counts.total_wait_ns += some.total_wait_ns;
      return read_items(r, 52, [&] {
        int32_t rank = 0;
        RankWaits more;
        if (!r.get(&rank) || !r.get(&more.waited_ns) || !r.get(&more.waited_for_ns) ||
            !r.get(&more.late_collectives) || !r.get(&more.collectives) || !r.get(&more.waited_in_steps_ns) ||
            !get_step_sums(r, &more.waited_for_by_step))
          return false;
        RankWaits& sum = all_sums[rank];
        sum.waited_ns += more.waited_ns;
        sum.waited_for_ns += more.waited_for_ns;
        sum.late_collectives += more.late_collectives;
        sum.collectives += more.collectives;
        sum.waited_in_steps_ns += more.waited_in_steps_ns;
        for (const auto& [step, ns] : more.waited_for_by_step) sum.waited_for_by_step[step] += ns;
        return true;
      });
    });
    std::sort(lights.begin(), lights.end(),
              [](const RankSummary& a, const RankSummary& b) { return a.rank < b.rank; });
    report = analysis::describe_ranks(lights);
    report.matched = all_counts.matched;
    report.unmatched = all_counts.unmatched;
    report.total_wait_ns = all_counts.total_wait_ns;
    analysis::add_ended_early(report, last_by_group);
    for (RankWaits& w : report.per_rank) {
      w.steps = steps_of[w.rank];
      auto it = all_sums.find(w.rank);
      if (it == all_sums.end()) continue;
      w.waited_ns = it->second.waited_ns;
      w.waited_for_ns = it->second.waited_for_ns;
      w.late_collectives = it->second.late_collectives;
      w.collectives = it->second.collectives;
      w.waited_in_steps_ns = it->second.waited_in_steps_ns;
      w.waited_for_by_step = std::move(it->second.waited_for_by_step);
    }
    late_steps = analysis::name_straggler(report);
    for (const RankSummary& light : lights)
      if (light.rank == report.straggler) report.straggler_outside_functions = light.outside_functions;
  }

  // 6. The straggler's late steps to every process; each rank's means over
  // them back to process 0.
  Round steps(x);
  if (first) {
    for (int p = 0; p < processes; ++p) {
      base::ByteWriter w = steps.to(p);
      w.put<int32_t>(report.straggler);
      w.put<uint64_t>(late_steps.size());
      for (int64_t step : late_steps) w.put(step);
    }
  }
  int32_t straggler = -1;
  std::vector<int64_t> told_steps;
  read_all(steps.run(), "the late steps", &out.error, [&](base::ByteReader& r) {
    if (r.empty()) return true;  // from the processes other than 0
    return r.get(&straggler) && read_items(r, 8, [&] {
             int64_t step = 0;
             if (!r.get(&step)) return false;
             told_steps.push_back(step);
             return true;
           });
  });
  Round means(x);
  if (straggler >= 0) {
    base::ByteWriter w = means.to(0);
    for (const RankSummary& s : mine) {
      RankWaits wait;
      wait.in_flight_waited_by_step = my_in_flight[s.rank];
      analysis::late_step_means(s, told_steps, &wait);
      w.put<int32_t>(s.rank);
      w.put(wait.computing_ns);
      w.put(wait.data_wait_ns);
      w.put(wait.in_comm_ns);
      w.put(wait.outside_ns);
    }
  }
  std::map<int, RankWaits> all_means;
  read_all(means.run(), "the ranks' means", &out.error, [&](base::ByteReader& r) {
    while (!r.empty()) {
      int32_t rank = 0;
      RankWaits w;
      if (!r.get(&rank) || !r.get(&w.computing_ns) || !r.get(&w.data_wait_ns) || !r.get(&w.in_comm_ns) ||
          !r.get(&w.outside_ns))
        return false;
      all_means[rank] = w;
    }
    return true;
  });
  if (first && report.straggler >= 0) {
    for (RankWaits& w : report.per_rank) {
      const RankWaits& m = all_means[w.rank];
      w.computing_ns = m.computing_ns;
      w.data_wait_ns = m.data_wait_ns;
      w.in_comm_ns = m.in_comm_ns;
      w.outside_ns = m.outside_ns;
    }
    analysis::explain_straggler(report);
  }
  return out;  // on the other processes, numbering and report are empty
}

}  // namespace trainprof::pipeline
