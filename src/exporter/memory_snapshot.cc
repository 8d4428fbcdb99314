// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// exporter/memory_snapshot.h.
#include "exporter/memory_snapshot.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "analysis/memory.h"
#include "raw/format.h"

namespace trainprof::exporter {
namespace {

// A pickle (protocol 2) of dicts, lists, strings and integers, with the
// opcodes every reader of allocator snapshots knows (Python's pickle, and
// memory_viz's own unpickler): EMPTY_DICT/MARK/SETITEMS, EMPTY_LIST/MARK/
// APPENDS, BINUNICODE, BININT, LONG1, NEWFALSE, STOP.
class Pickle {
 public:
  explicit Pickle(OutputFile* file) : file_(file) { out_ += "\x80\x02"; }
  Pickle& dict() {
    out_ += "}(";
    return *this;
  }
  Pickle& end_dict() {
    out_ += 'u';
    return drained();
  }
  Pickle& list() {
    out_ += "](";
    return *this;
  }
  Pickle& end_list() {
    out_ += 'e';
    return drained();
  }
  Pickle& str(std::string_view s) {
    out_ += 'X';
    put_le(s.size(), 4);
    out_.append(s);
    return *this;
  }
  Pickle& integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      put_le(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
      return *this;
    }
    // LONG1: little-endian two's complement, a sign byte where the top bit
    // would say otherwise.
    auto u = static_cast<uint64_t>(v);
    bool extra = v > 0 && (u >> 63) != 0;
    out_ += '\x8a';
    out_ += static_cast<char>(extra ? 9 : 8);
    put_le(u, 8);
    if (extra) out_ += '\0';
    return *this;
  }
  Pickle& boolean(bool b) {
    out_ += b ? '\x88' : '\x89';
    return *this;
  }
  // key, then the value the caller writes next
  Pickle& key(std::string_view k) { return str(k); }
  Pickle& item(std::string_view k, int64_t v) { return key(k).integer(v); }
  Pickle& item(std::string_view k, std::string_view v) { return key(k).str(v); }
  bool finish() {
    out_ += '.';
    return file_->commit(out_);
  }

 private:
  void put_le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  Pickle& drained() {
    file_->drain(out_);
    return *this;
  }
  OutputFile* file_;
  std::string out_;
};

// torch's category names (torch.profiler's memory categories, lower case).
const char* category(analysis::MemoryClass c) {
  return c == analysis::MemoryClass::kOptimizerState ? "optimizer_state" : analysis::memory_class_name(c);
}

// A site ("aten::mm at train.py(42): step") as frames, innermost first: the
// operator, then the Python frame.
void frames(Pickle& p, std::string_view site) {
  p.list();
  size_t at = site.find(" at ");
  std::string_view op = site.substr(0, at);
  p.dict().item("filename", "??").item("line", 0).item("name", op).end_dict();
  if (at != std::string_view::npos) {
    std::string_view frame = site.substr(at + 4);
    size_t open = frame.find('('), close = frame.find("): ");
    std::string_view file = frame.substr(0, open);
    int64_t line = 0;
    if (open != std::string_view::npos && close != std::string_view::npos && close > open) {
      for (char c : frame.substr(open + 1, close - open - 1))
        line = c >= '0' && c <= '9' ? line * 10 + (c - '0') : line;
    }
    std::string_view name = close != std::string_view::npos ? frame.substr(close + 3) : frame;
    p.dict().item("filename", file).item("line", line).item("name", name).end_dict();
  }
  p.end_list();
}

// Device codes in torch's order: CUDA devices at their index, the rest after.
std::map<uint32_t, size_t> device_indices(const std::vector<analysis::SnapshotBlock>& blocks) {
  std::map<uint32_t, size_t> out;
  int cuda_count = 0;
  for (const analysis::SnapshotBlock& b : blocks) {
    if (raw::memory_device_type(b.device) == 1)
      cuda_count = std::max(cuda_count, raw::memory_device_index(b.device) + 1);
  }
  size_t next = static_cast<size_t>(cuda_count);
  for (const analysis::SnapshotBlock& b : blocks) {
    if (out.count(b.device) != 0) continue;
    bool cuda = raw::memory_device_type(b.device) == 1 && raw::memory_device_index(b.device) >= 0;
    out[b.device] = cuda ? static_cast<size_t>(raw::memory_device_index(b.device)) : next++;
  }
  return out;
}

// A segment: a stretch of addresses that exported blocks used, merged
// where they touch or overlap, so that every address an event names lies in
// one (torch's viewer replays the events inside the final segments); the
// blocks alive at the end, in address order.
struct Segment {
  size_t device = 0;
  uint64_t address = 0;
  uint64_t end = 0;
  std::vector<const analysis::SnapshotBlock*> alive;
};

std::vector<Segment> segments(const analysis::MemoryBreakdown& b, const std::map<uint32_t, size_t>& index) {
  std::vector<const analysis::SnapshotBlock*> used;
  for (const analysis::SnapshotBlock& s : b.blocks) {
    if ((s.in_trace || s.end_ns == 0) && s.bytes > 0) used.push_back(&s);
  }
  std::sort(used.begin(), used.end(),
            [&index](const analysis::SnapshotBlock* x, const analysis::SnapshotBlock* y) {
              return std::pair(index.at(x->device), x->address) < std::pair(index.at(y->device), y->address);
            });
  std::vector<Segment> out;
  for (const analysis::SnapshotBlock* s : used) {
    size_t device = index.at(s->device);
    if (out.empty() || out.back().device != device || s->address > out.back().end)
      out.push_back(Segment{device, s->address, s->address, {}});
    Segment& seg = out.back();
    seg.end = std::max(seg.end, s->address + s->bytes);
    // Alive blocks do not overlap; one that would (a lost free) is left out.
    if (s->end_ns == 0 &&
        (seg.alive.empty() || seg.alive.back()->address + seg.alive.back()->bytes <= s->address))
      seg.alive.push_back(s);
  }
  return out;
}

// A segment's blocks tile it: the alive ones, "inactive" between them.
void write_segment(Pickle& p, const analysis::MemoryBreakdown& b, const Segment& seg) {
  uint64_t alive = 0;
  for (const analysis::SnapshotBlock* s : seg.alive) alive += s->bytes;
  auto i64 = [](uint64_t v) { return static_cast<int64_t>(v); };
  p.dict()
      .item("device", i64(seg.device))
      .item("address", i64(seg.address))
      .item("total_size", i64(seg.end - seg.address))
      .item("allocated_size", i64(alive))
      .item("active_size", i64(alive))
      .item("requested_size", i64(alive))
      .item("stream", 0)
      .item("segment_type", "large")
      .key("is_expandable")
      .boolean(false)
      .key("frames")
      .list()
      .end_list()
      .key("blocks")
      .list();
  uint64_t at = seg.address;
  auto gap = [&p, &at, &i64](uint64_t until) {
    if (until > at)
      p.dict().item("address", i64(at)).item("size", i64(until - at)).item("state", "inactive").end_dict();
    at = std::max(at, until);
  };
  for (const analysis::SnapshotBlock* s : seg.alive) {
    gap(s->address);
    p.dict()
        .item("address", i64(s->address))
        .item("size", i64(s->bytes))
        .item("requested_size", i64(s->bytes))
        .item("state", "active_allocated")
        .key("frames");
    frames(p, b.sites[s->site]);
    p.end_dict();
    at = s->address + s->bytes;
  }
  gap(seg.end);
  p.end_list().end_dict();
}

}  // namespace

std::string write_memory_snapshot(const analysis::TraceModel& model, const analysis::MemoryBreakdown& b,
                                  const OutputPath& path) {
  OutputFile file(path);
  if (!file.ok()) return file.error();
  std::map<uint32_t, size_t> index = device_indices(b.blocks);
  size_t devices = 0;
  for (const auto& [device, i] : index) devices = std::max(devices, i + 1);
  auto us = [&model](uint64_t ns) {
    return static_cast<int64_t>((ns + static_cast<uint64_t>(model.realtime_offset_ns)) / 1000);
  };
  Pickle p(&file);
  p.dict().key("segments").list();
  for (const Segment& seg : segments(b, index)) write_segment(p, b, seg);
  p.end_list().key("device_traces").list();
  for (size_t d = 0; d < devices; ++d) {
    // Each exported allocation's events in time order: (time, 0 alloc / 1 free, block).
    std::vector<std::tuple<uint64_t, int, size_t>> events;
    for (size_t i = 0; i < b.blocks.size(); ++i) {
      const analysis::SnapshotBlock& s = b.blocks[i];
      if (!s.in_trace || index[s.device] != d) continue;
      events.emplace_back(s.start_ns, 0, i);
      if (s.end_ns != 0) events.emplace_back(s.end_ns, 1, i);
    }
    std::stable_sort(events.begin(), events.end());
    p.list();
    for (const auto& [ts, kind, i] : events) {
      const analysis::SnapshotBlock& s = b.blocks[i];
      for (const char* action : kind == 0 ? std::vector<const char*>{"alloc"}
                                          : std::vector<const char*>{"free_requested", "free_completed"}) {
        p.dict()
            .item("action", action)
            .item("addr", static_cast<int64_t>(s.address))
            .item("size", static_cast<int64_t>(s.bytes))
            .item("stream", 0)
            .item("time_us", us(ts));
        if (kind == 0) p.item("category", category(s.cls));  // on the allocation, as torch's
        p.key("frames");
        frames(p, b.sites[s.site]);
        p.end_dict();
      }
    }
    // The moment the snapshot stands for (torch's "snapshot" action). Its
    // category is the viewer's own for blocks allocated before the trace,
    // which it colors "unknown" and must find among the events' categories.
    p.dict()
        .item("action", "snapshot")
        .item("addr", 0)
        .item("size", 0)
        .item("stream", 0)
        .item("time_us", us(events.empty() ? 0 : std::get<0>(events.back())))
        .item("category", "unknown")
        .key("frames")
        .list()
        .end_list()
        .end_dict();
    p.end_list();
  }
  p.end_list()
      .key("allocator_settings")
      .dict()
      .item("source", "trainprof profile_memory")
      .end_dict()
      .end_dict();
  if (!p.finish()) return file.error();
  return "";
}

}  // namespace trainprof::exporter
