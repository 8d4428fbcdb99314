// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "pipeline/cluster_digest_spread.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <span>
#include <tuple>
#include <type_traits>
#include <unordered_set>

#include "base/byte_buffer.h"
#include "pipeline/cluster_spread.h"

namespace trainprof::pipeline {
namespace {

using analysis::CollectiveRow;
using analysis::CommDigest;
using analysis::CommTiming;
using base::ByteReader;
using base::ByteWriter;

// Names travel once per message: a table, and each record's index into it.
class NameTable {
 public:
  uint32_t index(std::string_view name) {
    // Records come in runs of one name: the last answers first.
    if (last_ < names_.size() && analysis::same_name(names_[last_], name)) return last_;
    auto [it, fresh] = index_.try_emplace(name, static_cast<uint32_t>(names_.size()));
    if (fresh) names_.push_back(name);
    last_ = it->second;
    return last_;
  }
  void put(ByteWriter& w) const {
    w.put<uint64_t>(names_.size());
    for (std::string_view name : names_) w.put(name);
  }

 private:
  std::map<std::string_view, uint32_t> index_;
  std::vector<std::string_view> names_;
  uint32_t last_ = UINT32_MAX;
};

// Every name read, held once; timings view them.
class NameStore {
 public:
  explicit NameStore(std::unordered_set<std::string>* names) : names_(names) {}
  std::string_view hold(std::string name) { return *names_->insert(std::move(name)).first; }

 private:
  std::unordered_set<std::string>* names_;  // nodes: their strings never move
};

bool read_names(ByteReader& r, NameStore* store, std::vector<std::string_view>* names) {
  uint64_t n = 0;
  if (!r.count(8, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    std::string name;
    if (!r.get(&name)) return false;
    names->push_back(store->hold(std::move(name)));
  }
  return true;
}

// A timing as it travels, its names as indices into its message's table.
struct TimingRecord {
  int64_t sequence, step;
  uint64_t start_ns, end_ns, bytes, wait_ns;
  uint32_t group, operation;
  int32_t rank, peer, tag;
  uint32_t run;
  uint8_t one_host, transfer, sends, pad[5];
};
static_assert(sizeof(TimingRecord) == 80 && std::is_trivially_copyable_v<TimingRecord>);

TimingRecord record_of(const CommTiming& t, NameTable* names) {
  TimingRecord r{};
  r.sequence = t.sequence;
  r.step = t.step;
  r.start_ns = t.start_ns;
  r.end_ns = t.end_ns;
  r.bytes = t.bytes;
  r.wait_ns = t.wait_ns;
  r.group = names->index(t.group);
  r.operation = names->index(t.operation);
  r.rank = t.rank;
  r.peer = t.peer;
  r.tag = t.tag;
  r.run = t.run;
  r.one_host = t.one_host;
  r.transfer = t.transfer;
  r.sends = t.sends;
  return r;
}

// A message of timings: a name table, then the records.
std::string timings_message(const std::vector<const CommTiming*>& timings) {
  NameTable names;
  std::string records;
  records.reserve(timings.size() * sizeof(TimingRecord));
  for (const CommTiming* t : timings) {
    TimingRecord r = record_of(*t, &names);
    records.append(reinterpret_cast<const char*>(&r), sizeof(r));
  }
  std::string out;
  ByteWriter w(&out);
  names.put(w);
  w.put<uint64_t>(timings.size());
  out += records;
  return out;
}

// Reads a timings message at `r` into `out` (no group list: not read here).
bool read_timings(ByteReader& r, NameStore* store, std::vector<CommTiming>* out) {
  std::vector<std::string_view> names;
  uint64_t n = 0;
  if (!read_names(r, store, &names) || !r.count(sizeof(TimingRecord), &n)) return false;
  std::string_view bytes = r.rest().substr(0, n * sizeof(TimingRecord));
  for (uint64_t i = 0; i < n; ++i) {
    TimingRecord rec;
    std::memcpy(&rec, bytes.data() + i * sizeof(rec), sizeof(rec));
    if (rec.group >= names.size() || rec.operation >= names.size()) return false;
    CommTiming t;
    t.group = names[rec.group];
    t.operation = names[rec.operation];
    t.sequence = rec.sequence;
    t.step = rec.step;
    t.start_ns = rec.start_ns;
    t.end_ns = rec.end_ns;
    t.bytes = rec.bytes;
    t.wait_ns = rec.wait_ns;
    t.rank = rec.rank;
    t.peer = rec.peer;
    t.tag = rec.tag;
    t.run = rec.run;
    t.one_host = rec.one_host != 0;
    t.transfer = rec.transfer != 0;
    t.sends = rec.sends != 0;
    out->push_back(t);
  }
  r = ByteReader(r.rest().substr(bytes.size()));  // past the records
  return true;
}

// A collective's part as it travels (analysis::CollectivePart), its names
// as indices into its message's table; then `operations` name indices
// (uint32_t) and `arrivals` ArrivalRecords.
struct PartRecord {
  int64_t sequence, step;
  uint64_t members, bytes, first_start_ns, last_start_ns, end_ns, wait_ns;
  uint32_t group, operation, last_operation;
  int32_t first_rank, last_rank, lowest_rank;
  uint32_t operations, arrivals;
  uint8_t all_arrivals, pad[7];
};
static_assert(sizeof(PartRecord) == 104 && std::is_trivially_copyable_v<PartRecord>);

struct ArrivalRecord {
  int32_t rank;
  uint32_t pad;
  uint64_t start_ns, wait_ns, elapse_ns;
};
static_assert(sizeof(ArrivalRecord) == 32 && std::is_trivially_copyable_v<ArrivalRecord>);

// A message of parts: a name table, then the records.
class PartsMessage {
 public:
  void add(const analysis::CollectivePart& part) {
    const CollectiveRow& row = part.row;
    PartRecord r{};
    r.sequence = row.sequence;
    r.step = row.step;
    r.members = row.members;
    r.bytes = row.bytes;
    r.first_start_ns = row.first_start_ns;
    r.last_start_ns = row.last_start_ns;
    r.end_ns = row.end_ns;
    r.wait_ns = row.wait_ns;
    r.group = names_.index(hold(row.group));
    r.operation = names_.index(hold(row.operation));
    r.last_operation = names_.index(hold(row.last_operation));
    r.first_rank = row.first_rank;
    r.last_rank = row.last_rank;
    r.lowest_rank = part.lowest_rank;
    r.operations = static_cast<uint32_t>(part.operations.size());
    r.arrivals = static_cast<uint32_t>(row.arrivals.size());
    r.all_arrivals = row.all_arrivals;
    append(r);
    for (const std::string& name : part.operations) append(names_.index(hold(name)));
    for (const analysis::MemberArrival& a : row.arrivals)
      append(ArrivalRecord{a.rank, 0, a.start_ns, a.wait_ns, a.elapse_ns});
    ++count_;
  }
  std::string bytes() const {
    std::string out;
    ByteWriter w(&out);
    names_.put(w);
    w.put<uint64_t>(count_);
    out += records_;
    return out;
  }

 private:
  template <typename T>
  void append(const T& v) {
    records_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  // The parts given are gone by the time the table is written: it views
  // copies held here (a set's nodes never move).
  std::string_view hold(const std::string& name) { return *held_.insert(name).first; }
  std::unordered_set<std::string> held_;
  NameTable names_;
  std::string records_;
  uint64_t count_ = 0;
};

// Reads a parts message one part at a time.
class PartsReader {
 public:
  // False: its table or count is damaged.
  bool open(ByteReader r) {
    uint64_t n = 0;
    if (!r.count(8, &n)) return false;
    for (uint64_t i = 0; i < n; ++i) {
      std::string_view name;
      if (!r.get(&name)) return false;
      names_.push_back(name);
    }
    if (!r.count(sizeof(PartRecord), &left_)) return false;
    rest_ = r.rest();
    return true;
  }
  // The next part into `part`; false at the end or when damaged (`damaged()`).
  bool next(analysis::CollectivePart* part) {
    if (left_ == 0) return false;
    --left_;
    PartRecord r;
    if (!take(&r) || r.group >= names_.size() || r.operation >= names_.size() ||
        r.last_operation >= names_.size() || r.operations > rest_.size() / sizeof(uint32_t))
      return fail();
    *part = analysis::CollectivePart();
    CollectiveRow& row = part->row;
    row.group = names_[r.group];
    row.sequence = r.sequence;
    row.operation = names_[r.operation];
    row.last_operation = names_[r.last_operation];
    row.step = r.step;
    row.members = r.members;
    row.bytes = r.bytes;
    row.first_start_ns = r.first_start_ns;
    row.last_start_ns = r.last_start_ns;
    row.end_ns = r.end_ns;
    row.wait_ns = r.wait_ns;
    row.first_rank = r.first_rank;
    row.last_rank = r.last_rank;
    row.all_arrivals = r.all_arrivals != 0;
    part->lowest_rank = r.lowest_rank;
    for (uint32_t i = 0; i < r.operations; ++i) {
      uint32_t name = 0;
      if (!take(&name) || name >= names_.size()) return fail();
      part->operations.emplace_back(names_[name]);
    }
    if (r.arrivals > rest_.size() / sizeof(ArrivalRecord)) return fail();
    for (uint32_t i = 0; i < r.arrivals; ++i) {
      ArrivalRecord a;
      if (!take(&a)) return fail();
      row.arrivals.push_back({a.rank, a.start_ns, a.wait_ns, a.elapse_ns});
    }
    return true;
  }
  bool damaged() const { return damaged_; }
  bool done() const { return left_ == 0 && rest_.empty(); }

 private:
  template <typename T>
  bool take(T* v) {
    if (rest_.size() < sizeof(T)) return false;
    std::memcpy(v, rest_.data(), sizeof(T));
    rest_.remove_prefix(sizeof(T));
    return true;
  }
  bool fail() {
    damaged_ = true;
    left_ = 0;
    return false;
  }
  std::vector<std::string_view> names_;  // views of the message
  std::string_view rest_;
  uint64_t left_ = 0;
  bool damaged_ = false;
};

void put_counts(ByteWriter& w, const analysis::ValueCounts& v) {
  w.put<uint64_t>(v.counts().size());
  for (const auto& [value, count] : v.counts()) {
    w.put(value);
    w.put(count);
  }
}

bool get_counts(ByteReader& r, analysis::ValueCounts* v) {
  uint64_t n = 0;
  if (!r.count(16, &n)) return false;
  auto& counts = v->mutable_counts();
  for (uint64_t i = 0; i < n; ++i) {
    std::pair<int64_t, uint64_t> c;
    if (!r.get(&c.first) || !r.get(&c.second)) return false;
    if (!counts.empty() && counts.back().first >= c.first) return false;  // ascending, or damaged
    counts.push_back(c);
  }
  return true;
}

void put_row(ByteWriter& w, const CollectiveRow& c) {
  w.put(c.group);
  w.put(c.sequence);
  w.put(c.operation);
  w.put(c.last_operation);
  for (uint64_t v : {static_cast<uint64_t>(c.step), c.members, c.bytes, c.first_start_ns, c.last_start_ns,
                     c.end_ns, c.wait_ns})
    w.put(v);
  w.put<int32_t>(c.first_rank);
  w.put<int32_t>(c.last_rank);
  w.put<uint8_t>(c.all_arrivals);
  w.put<uint64_t>(c.arrivals.size());
  for (const analysis::MemberArrival& a : c.arrivals) {
    w.put<int32_t>(a.rank);
    w.put(a.start_ns);
    w.put(a.wait_ns);
    w.put(a.elapse_ns);
  }
}

bool get_row(ByteReader& r, CollectiveRow* c) {
  uint64_t step = 0;
  int32_t first = 0, last = 0;
  uint8_t all = 0;
  uint64_t n = 0;
  bool ok = r.get(&c->group) && r.get(&c->sequence) && r.get(&c->operation) && r.get(&c->last_operation) &&
            r.get(&step) && r.get(&c->members) && r.get(&c->bytes) && r.get(&c->first_start_ns) &&
            r.get(&c->last_start_ns) && r.get(&c->end_ns) && r.get(&c->wait_ns) && r.get(&first) &&
            r.get(&last) && r.get(&all) && r.count(4 + 3 * 8, &n);
  c->step = static_cast<int64_t>(step);
  c->first_rank = first;
  c->last_rank = last;
  c->all_arrivals = all != 0;
  for (uint64_t i = 0; ok && i < n; ++i) {
    analysis::MemberArrival a;
    int32_t rank = 0;
    ok = r.get(&rank) && r.get(&a.start_ns) && r.get(&a.wait_ns) && r.get(&a.elapse_ns);
    a.rank = rank;
    c->arrivals.push_back(a);
  }
  return ok;
}

void put_digest(ByteWriter& w, const CommDigest& d) {
  w.put<uint64_t>(d.groups.size());
  for (const auto& [key, g] : d.groups) {
    w.put<uint8_t>(key.first);
    w.put(key.second);
    w.put(g.members);
    w.put(g.members_said_at.first);
    w.put(g.members_said_at.second);
    w.put(g.ranks);
    w.put<uint64_t>(g.operations.size());
    for (const auto& [name, op] : g.operations) {
      w.put(name);
      w.put(op.operations);
      w.put(op.parts);
      w.put(op.bytes);
      for (const analysis::ValueCounts* v : {&op.elapse_ms, &op.wait_ms, &op.transit_ms, &op.gb_per_s})
        put_counts(w, *v);
    }
  }
  w.put(d.ranks);
  w.put(d.parts);
  w.put(d.transfers);
  w.put<uint64_t>(d.totals.size());
  for (const auto& [rank, t] : d.totals) {
    w.put<int32_t>(rank);
    for (uint64_t v : {t.operations, t.elapse_ns, t.wait_ns, t.transit_ns, t.bytes}) w.put(v);
  }
  w.put<uint64_t>(d.link_sums.size());
  for (const analysis::LinkBandwidth& l : d.link_sums) {
    w.put<int32_t>(l.src);
    w.put<int32_t>(l.dst);
    w.put<uint8_t>(l.collective);
    w.put(l.transport);
    w.put(l.bytes);
    w.put(l.transit_ns);
    w.put(l.operations);
  }
  w.put<uint64_t>(d.slow_transfers.size());
  for (const analysis::SlowTransfer& t : d.slow_transfers) {
    w.put(t.group);
    w.put(t.operation);
    for (int32_t v : {t.rank, t.peer, t.tag}) w.put(v);
    w.put<uint8_t>(t.sends);
    w.put(t.step);
    for (uint64_t v : {t.bytes, t.start_ns, t.elapse_ns, t.wait_ns, t.transit_ns}) w.put(v);
    w.put(t.index);
  }
  w.put(d.collectives);
  for (const std::vector<CollectiveRow>* rows : {&d.rows, &d.slow_collectives}) {
    w.put<uint64_t>(rows->size());
    for (const CollectiveRow& c : *rows) put_row(w, c);
  }
  w.put<uint64_t>(d.collective_operations.size());
  for (const auto& [key, n] : d.collective_operations) {
    w.put(key.first);
    w.put(key.second);
    w.put(n);
  }
}

bool get_digest(ByteReader& r, CommDigest* d) {
  uint64_t n = 0;
  if (!r.count(8, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    uint8_t transfer = 0;
    std::string name;
    analysis::GroupDigest g;
    uint64_t ops = 0;
    if (!r.get(&transfer) || !r.get(&name) || !r.get(&g.members) || !r.get(&g.members_said_at.first) ||
        !r.get(&g.members_said_at.second) || !r.get(&g.ranks) || !r.count(8, &ops))
      return false;
    for (uint64_t k = 0; k < ops; ++k) {
      std::string op_name;
      analysis::OperationDigest op;
      if (!r.get(&op_name) || !r.get(&op.operations) || !r.get(&op.parts) || !r.get(&op.bytes)) return false;
      for (analysis::ValueCounts* v : {&op.elapse_ms, &op.wait_ms, &op.transit_ms, &op.gb_per_s}) {
        if (!get_counts(r, v)) return false;
      }
      g.operations.emplace(std::move(op_name), std::move(op));
    }
    d->groups.emplace(std::pair{transfer != 0, std::move(name)}, std::move(g));
  }
  if (!r.get(&d->ranks) || !r.get(&d->parts) || !r.get(&d->transfers) || !r.count(4 + 5 * 8, &n))
    return false;
  for (uint64_t i = 0; i < n; ++i) {
    int32_t rank = 0;
    analysis::RankTotals t;
    if (!r.get(&rank) || !r.get(&t.operations) || !r.get(&t.elapse_ns) || !r.get(&t.wait_ns) ||
        !r.get(&t.transit_ns) || !r.get(&t.bytes))
      return false;
    d->totals[rank] = t;
  }
  if (!r.count(4 + 4 + 1 + 8 + 3 * 8, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    analysis::LinkBandwidth l;
    int32_t src = 0, dst = 0;
    uint8_t collective = 0;
    if (!r.get(&src) || !r.get(&dst) || !r.get(&collective) || !r.get(&l.transport) || !r.get(&l.bytes) ||
        !r.get(&l.transit_ns) || !r.get(&l.operations))
      return false;
    l.src = src;
    l.dst = dst;
    l.collective = collective != 0;
    d->link_sums.push_back(std::move(l));
  }
  if (!r.count(8 + 8 + 3 * 4 + 1 + 8 + 5 * 8 + 8, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    analysis::SlowTransfer t;
    int32_t rank = 0, peer = 0, tag = 0;
    uint8_t sends = 0;
    if (!r.get(&t.group) || !r.get(&t.operation) || !r.get(&rank) || !r.get(&peer) || !r.get(&tag) ||
        !r.get(&sends) || !r.get(&t.step) || !r.get(&t.bytes) || !r.get(&t.start_ns) ||
        !r.get(&t.elapse_ns) || !r.get(&t.wait_ns) || !r.get(&t.transit_ns) || !r.get(&t.index))
      return false;
    t.rank = rank;
    t.peer = peer;
    t.tag = tag;
    t.sends = sends != 0;
    d->slow_transfers.push_back(std::move(t));
  }
  if (!r.get(&d->collectives)) return false;
  for (std::vector<CollectiveRow>* rows : {&d->rows, &d->slow_collectives}) {
    if (!r.count(8, &n)) return false;
    for (uint64_t i = 0; i < n; ++i) {
      if (!get_row(r, &rows->emplace_back())) return false;
    }
  }
  if (!r.count(8 + 8 + 8, &n)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    std::string group, operation;
    uint64_t count = 0;
    if (!r.get(&group) || !r.get(&operation) || !r.get(&count)) return false;
    d->collective_operations[{std::move(group), std::move(operation)}] += count;
  }
  return true;
}

// comm_timings' order: collectives by (group, sequence, rank), then
// transfers by rank (each rank's in its own order).
bool timings_order(const CommTiming& a, const CommTiming& b) {
  if (a.transfer != b.transfer) return !a.transfer;
  if (a.transfer) return a.rank < b.rank;
  // A name read here is held once: equal names mostly share their bytes.
  if (!analysis::same_name(a.group, b.group)) return a.group < b.group;
  return std::tie(a.sequence, a.rank) < std::tie(b.sequence, b.rank);
}

}  // namespace

GatheredDigest spread_digest(const std::vector<CommTiming>& timings, const std::set<int>& drawn,
                             ClusterExchange& exchange, std::string* error) {
  const int processes = exchange.size();
  const int here = exchange.index();
  // 1. Each collective's part here (its members among this process's
  // ranks) to the collective's owner, after the drawn ranks.
  std::vector<PartsMessage> parts(static_cast<size_t>(processes));
  auto transfers =
      std::find_if(timings.begin(), timings.end(), [](const CommTiming& t) { return t.transfer; });
  analysis::collective_parts(std::span<const CommTiming>(timings.begin(), transfers),
                             [&](analysis::CollectivePart&& part) {
                               int owner = key_owner(part.row.group, part.row.sequence, processes);
                               parts[static_cast<size_t>(owner)].add(part);
                             });
  std::vector<std::string> outgoing(static_cast<size_t>(processes));
  for (size_t p = 0; p < outgoing.size(); ++p) {
    ByteWriter w(&outgoing[p]);
    w.put<uint64_t>(here == 0 ? drawn.size() : 0);
    if (here == 0) {
      for (int rank : drawn) w.put<int32_t>(rank);
    }
    outgoing[p] += parts[p].bytes();
    parts[p] = PartsMessage();
  }
  std::vector<std::string> incoming = exchange.all_to_all(std::move(outgoing));
  // Each sender's parts come in (group, sequence) order: merged as they are
  // read, each collective digested once its parts are all in.
  std::set<int> to_draw;
  std::vector<PartsReader> readers(incoming.size());
  std::vector<analysis::CollectivePart> next(incoming.size());
  auto damaged = [&](size_t p) {
    if (error->empty())
      *error = "the collective parts process " + std::to_string(p) + " sent arrived damaged";
  };
  using Key = std::pair<std::string_view, int64_t>;
  auto key = [&](size_t p) { return Key(next[p].row.group, next[p].row.sequence); };
  auto later = [&](size_t a, size_t b) { return key(a) > key(b); };
  std::vector<size_t> heap;  // the senders with a part left, the smallest key on top
  for (size_t p = 0; p < incoming.size(); ++p) {
    ByteReader r(incoming[p]);
    uint64_t n = 0;
    bool ok = r.count(4, &n);
    for (uint64_t i = 0; ok && i < n; ++i) {
      int32_t rank = 0;
      ok = r.get(&rank);
      if (p == 0) to_draw.insert(rank);
    }
    if (!ok || !readers[p].open(ByteReader(r.rest()))) {
      damaged(p);
      continue;
    }
    if (readers[p].next(&next[p])) heap.push_back(p);
  }
  std::make_heap(heap.begin(), heap.end(), later);
  CommDigest mine;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    size_t p = heap.back();
    heap.pop_back();
    analysis::CollectivePart whole = std::move(next[p]);
    const Key whole_key(whole.row.group, whole.row.sequence);
    auto advance = [&](size_t q) {
      if (readers[q].next(&next[q])) {
        heap.push_back(q);
        std::push_heap(heap.begin(), heap.end(), later);
      }
    };
    advance(p);
    while (!heap.empty() && key(heap.front()) == whole_key) {
      std::pop_heap(heap.begin(), heap.end(), later);
      size_t q = heap.back();
      heap.pop_back();
      analysis::merge_part(std::move(next[q]), &whole);
      advance(q);
    }
    analysis::add_collective(std::move(whole), &mine);
  }
  for (size_t p = 0; p < readers.size(); ++p) {
    if (readers[p].damaged() || !readers[p].done()) damaged(p);
  }
  std::vector<std::string>().swap(incoming);

  // 2. The digests, and the drawn ranks' timings, to process 0.
  analysis::add_rank_timings(timings, &mine);
  std::vector<const CommTiming*> shown;
  for (const CommTiming& t : timings) {
    if (to_draw.count(t.rank) != 0) shown.push_back(&t);
  }
  std::vector<std::string> results(static_cast<size_t>(processes));
  GatheredDigest out;
  if (here != 0) {
    ByteWriter w(&results[0]);
    put_digest(w, mine);
    results[0] += timings_message(shown);
  }
  std::vector<std::string> gathered = exchange.all_to_all(std::move(results));
  if (here != 0) return out;
  out.digest = std::move(mine);
  NameStore drawn_names(&out.names);
  for (const CommTiming* t : shown) out.drawn.push_back(*t);
  for (size_t p = 1; p < gathered.size(); ++p) {
    ByteReader r(gathered[p]);
    CommDigest theirs;
    std::vector<CommTiming> their_drawn;
    bool ok = get_digest(r, &theirs) && read_timings(r, &drawn_names, &their_drawn) && r.empty();
    if (!ok) {
      if (error->empty()) *error = "the digest process " + std::to_string(p) + " sent arrived damaged";
      continue;
    }
    analysis::merge_digest(std::move(theirs), &out.digest);
    out.drawn.insert(out.drawn.end(), their_drawn.begin(), their_drawn.end());
  }
  analysis::finish_digest(&out.digest);
  std::stable_sort(out.drawn.begin(), out.drawn.end(), timings_order);
  return out;
}

}  // namespace trainprof::pipeline
