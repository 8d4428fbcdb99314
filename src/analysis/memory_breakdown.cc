// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// analysis/memory_breakdown.h.
#include "analysis/memory_breakdown.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <unordered_map>

#include "analysis/memory.h"
#include "analysis/passes.h"
#include "raw/format.h"

namespace trainprof::analysis {
namespace {

constexpr uint64_t kAlive = UINT64_MAX;
constexpr uint32_t kNoBlock = UINT32_MAX;

// User-space addresses use 48 bits; the device keeps devices apart.
uint64_t block_key(uint64_t address, uint32_t device) {
  return address ^ (uint64_t{device} << 48);
}

// A tag's category as a class; false for a name no front end writes.
bool tag_class(std::string_view name, MemoryClass* out) {
  static constexpr std::pair<std::string_view, MemoryClass> kNames[] = {
      {"parameter", MemoryClass::kParameter},
      {"gradient", MemoryClass::kGradient},
      {"optimizer state", MemoryClass::kOptimizerState},
      {"input", MemoryClass::kInput},
  };
  for (const auto& [text, c] : kNames) {
    if (name == text) {
      *out = c;
      return true;
    }
  }
  return false;
}

// One allocation: reported (start at its report), or a tagged block no
// report made (start 0: before the run; else after the last free there).
struct Block {
  uint64_t start_ns = 0;
  uint64_t end_ns = kAlive;
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint32_t device = 0;
  uint32_t key = 0;  // its operator's key + 1 (0: none)
  bool tagged = false;
  bool reported = true;
  MemoryClass cls = MemoryClass::kUnknown;
};

// A step's peak on a device: after report `report`.
struct PeakSpot {
  size_t step_index;
  uint32_t device;
  size_t report;
  uint64_t ns;
  uint64_t bytes;
};

// A running sum of bytes as bytes alive (never below 0).
uint64_t alive_bytes(int64_t sum) {
  return sum > 0 ? static_cast<uint64_t>(sum) : 0;
}

// `sites` largest first (ties by site), at most kPeakSites.
void keep_largest(std::vector<SiteBytes>* sites) {
  std::sort(sites->begin(), sites->end(), [](const SiteBytes& a, const SiteBytes& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
  if (sites->size() > kPeakSites) sites->resize(kPeakSites);
}

// The innermost frame of `stack` (frames innermost first, ';'-separated)
// that is not torch's own code, else the innermost.
std::string_view user_frame(std::string_view stack) {
  std::string_view first;
  while (!stack.empty()) {
    size_t end = stack.find(';');
    std::string_view frame = stack.substr(0, end);
    if (first.empty()) first = frame;
    if (frame.find("/torch/") == std::string_view::npos && frame.find("<built-in") == std::string_view::npos)
      return frame;
    if (end == std::string_view::npos) break;
    stack.remove_prefix(end + 1);
  }
  return first;
}

class Builder {
 public:
  Builder(const TraceModel& m, const std::vector<uint32_t>& keys, const std::vector<uint32_t>& failed_keys)
      : m_(m), keys_(keys), failed_keys_(failed_keys), steps_(steps_by_start(m.steps)) {}

  std::vector<MemoryClassSample> series(size_t intervals) {
    read_reports();
    read_tags();
    classify();
    std::vector<MemoryClassSample> out;
    if (m_.memory.empty()) return out;
    uint64_t first = m_.memory.front().ts_ns, span = m_.memory.back().ts_ns - first + 1;
    uint64_t width = std::max<uint64_t>(1, span / std::max<size_t>(1, intervals));
    struct Lane {
      std::array<int64_t, kMemoryClasses> now{};
      MemoryClassSample best;
      uint64_t best_total = 0;
      uint64_t interval = UINT64_MAX;
      bool pending = false;
    };
    std::map<uint32_t, Lane> lanes;
    auto total = [](const std::array<int64_t, kMemoryClasses>& a) {
      int64_t sum = 0;
      for (int64_t v : a) sum += v;
      return alive_bytes(sum);
    };
    replay(
        [&](uint32_t b, int sign) {
          lanes[blocks_[b].device].now[static_cast<size_t>(blocks_[b].cls)] +=
              sign * static_cast<int64_t>(blocks_[b].bytes);
        },
        [&](size_t i) {
          const MemoryRecord& r = m_.memory[i];
          Lane& lane = lanes[r.device];
          uint64_t interval = (r.ts_ns - first) / width;
          if (lane.pending && interval != lane.interval) {
            out.push_back(lane.best);
            lane.pending = false;
          }
          uint64_t alive = total(lane.now);
          if (!lane.pending || alive > lane.best_total) {
            lane.best.ts_ns = r.ts_ns;
            lane.best.device = r.device;
            for (size_t c = 0; c < kMemoryClasses; ++c) lane.best.by_class[c] = alive_bytes(lane.now[c]);
            lane.best_total = alive;
          }
          lane.interval = interval;
          lane.pending = true;
        },
        [](const StepWindow&) {});
    for (auto& [device, lane] : lanes) {
      if (lane.pending) out.push_back(lane.best);
      MemoryClassSample last;  // the state at the end, after the interval's peak
      last.ts_ns = m_.memory.back().ts_ns;
      last.device = device;
      for (size_t c = 0; c < kMemoryClasses; ++c) last.by_class[c] = alive_bytes(lane.now[c]);
      if (!lane.pending || lane.best.ts_ns != last.ts_ns) out.push_back(last);
    }
    std::stable_sort(out.begin(), out.end(), [](const MemoryClassSample& a, const MemoryClassSample& b) {
      return a.ts_ns < b.ts_ns;
    });
    return out;
  }

  MemoryBreakdown run() {
    read_reports();
    read_tags();
    classify();
    find_peaks();
    sweep();
    find_leaks();
    for (size_t i = 0; i < m_.failed_allocations.size(); ++i) report_out_of_memory(i);
    keep_snapshot_blocks();
    return std::move(out_);
  }

 private:
  void read_reports() {
    report_block_.assign(m_.memory.size(), kNoBlock);
    std::unordered_map<uint64_t, uint32_t> open;
    for (size_t i = 0; i < m_.memory.size(); ++i) {
      const MemoryRecord& r = m_.memory[i];
      uint64_t k = block_key(r.address, r.device);
      if (r.bytes >= 0) {
        auto index = static_cast<uint32_t>(blocks_.size());
        Block b;
        b.start_ns = r.ts_ns;
        b.address = r.address;
        b.bytes = static_cast<uint64_t>(r.bytes);
        b.device = r.device;
        b.key = i < keys_.size() ? keys_[i] : 0;
        blocks_.push_back(b);
        open[k] = index;  // an address reused without a reported free leaves the older open
        by_key_[k].push_back(index);
        report_block_[i] = index;
        continue;
      }
      auto it = open.find(k);
      if (it != open.end()) {
        blocks_[it->second].end_ns = r.ts_ns;
        report_block_[i] = it->second;
        open.erase(it);
      } else {
        unmatched_frees_[k].push_back(i);
      }
    }
  }

  // Each tag classes the block alive at its address then, or stands for a
  // block no report made (ended by the first unmatched free after it).
  void read_tags() {
    for (const MemoryTag& t : m_.memory_tags) {
      MemoryClass cls;
      if (!tag_class(m_.name(t.category), &cls)) continue;
      uint64_t k = block_key(t.address, t.device);
      std::vector<uint32_t>& list = by_key_[k];
      auto after = std::partition_point(list.begin(), list.end(),
                                        [&](uint32_t b) { return blocks_[b].start_ns <= t.ts_ns; });
      if (after != list.begin()) {
        Block& b = blocks_[*(after - 1)];
        if (b.end_ns > t.ts_ns) {
          if (!b.tagged) {
            b.tagged = true;
            b.cls = cls;
          }
          continue;
        }
      }
      Block b;
      b.start_ns = after != list.begin() ? blocks_[*(after - 1)].end_ns : 0;
      b.address = t.address;
      b.bytes = t.bytes;
      b.device = t.device;
      b.tagged = true;
      b.reported = false;
      b.cls = cls;
      auto index = static_cast<uint32_t>(blocks_.size());
      for (size_t free : unmatched_frees_[k]) {
        if (m_.memory[free].ts_ns > t.ts_ns && report_block_[free] == kNoBlock) {
          b.end_ns = m_.memory[free].ts_ns;
          report_block_[free] = index;
          break;
        }
      }
      if (b.start_ns == 0) ++out_.tagged_before_run;
      blocks_.push_back(b);
      list.insert(after, index);
      if (b.start_ns > 0) late_starts_.push_back(index);
    }
    std::sort(late_starts_.begin(), late_starts_.end(),
              [this](uint32_t a, uint32_t b) { return blocks_[a].start_ns < blocks_[b].start_ns; });
  }

  // Untagged blocks by their lifetime against their step's backward pass.
  void classify() {
    std::vector<uint64_t> backward(steps_.size(), kAlive);  // the first autograd node's start per step
    for (const OpLink& l : m_.op_links) {
      if ((m_.keys[l.key].op_flags & raw::kOperatorBackward) == 0) continue;
      size_t s = step_index(l.start_ns);
      if (s < steps_.size()) backward[s] = std::min(backward[s], l.start_ns);
    }
    for (Block& b : blocks_) {
      if (b.tagged) continue;
      size_t s = step_index(b.start_ns);
      if (s >= steps_.size() || b.end_ns > steps_[s].end_ns) continue;  // unknown
      bool saved = backward[s] != kAlive && b.start_ns < backward[s] && b.end_ns >= backward[s];
      b.cls = saved ? MemoryClass::kActivation : MemoryClass::kTemporary;
    }
  }

  size_t step_index(uint64_t t) const {
    auto after = std::partition_point(steps_.begin(), steps_.end(),
                                      [t](const StepWindow& w) { return w.start_ns <= t; });
    if (after == steps_.begin()) return steps_.size();
    size_t s = static_cast<size_t>(after - steps_.begin()) - 1;
    return t < steps_[s].end_ns ? s : steps_.size();
  }

  // Replays every block's start and end in time order: `apply(block, sign)`
  // for each, `at_report(i)` after report i, `at_step_end(w)` once the
  // replay passes step w's end.
  template <typename Apply, typename AtReport, typename AtStepEnd>
  void replay(Apply apply, AtReport at_report, AtStepEnd at_step_end) {
    for (uint32_t i = 0; i < blocks_.size(); ++i) {
      if (blocks_[i].start_ns == 0) apply(i, +1);
    }
    std::vector<const StepWindow*> ends;
    for (const StepWindow& w : steps_) ends.push_back(&w);
    std::stable_sort(ends.begin(), ends.end(),
                     [](const StepWindow* a, const StepWindow* b) { return a->end_ns < b->end_ns; });
    size_t next_end = 0, next_late = 0;
    for (size_t i = 0; i < m_.memory.size(); ++i) {
      uint64_t ts = m_.memory[i].ts_ns;
      for (; next_end < ends.size() && ends[next_end]->end_ns <= ts; ++next_end) at_step_end(*ends[next_end]);
      for (; next_late < late_starts_.size() && blocks_[late_starts_[next_late]].start_ns <= ts; ++next_late)
        apply(late_starts_[next_late], +1);
      if (report_block_[i] != kNoBlock) apply(report_block_[i], m_.memory[i].bytes >= 0 ? +1 : -1);
      at_report(i);
    }
    for (; next_end < ends.size(); ++next_end) at_step_end(*ends[next_end]);
  }

  // The memory alive after report `i` on its device: the blocks known here,
  // or what the allocator counts when that is more (blocks it made before
  // the run that nothing tagged).
  uint64_t alive(size_t i, int64_t known) const {
    return std::max(m_.memory[i].total_allocated, alive_bytes(known));
  }

  // Each step's peak per device: the report after which the most was alive
  // in the step, or the last before it when more was alive at its start.
  void find_peaks() {
    std::map<uint32_t, int64_t> known;  // by device
    struct Current {
      uint64_t bytes;
      size_t report;
    };
    std::map<uint32_t, Current> current;
    std::vector<std::map<uint32_t, PeakSpot>> peaks(steps_.size());
    size_t next_step = 0;
    auto open_steps = [&](uint64_t ts) {  // steps that began before `ts` carry the current values in
      for (; next_step < steps_.size() && steps_[next_step].start_ns <= ts; ++next_step) {
        for (const auto& [device, c] : current)
          peaks[next_step][device] = {next_step, device, c.report, steps_[next_step].start_ns, c.bytes};
      }
    };
    replay([&](uint32_t b,
               int sign) { known[blocks_[b].device] += sign * static_cast<int64_t>(blocks_[b].bytes); },
           [&](size_t i) {
             const MemoryRecord& r = m_.memory[i];
             open_steps(r.ts_ns);
             uint64_t now = alive(i, known[r.device]);
             current[r.device] = {now, i};
             size_t s = step_index(r.ts_ns);
             if (s >= steps_.size()) return;
             auto [it, fresh] = peaks[s].try_emplace(r.device, PeakSpot{s, r.device, i, r.ts_ns, now});
             if (!fresh && now > it->second.bytes) it->second = {s, r.device, i, r.ts_ns, now};
           },
           [](const StepWindow&) {});
    open_steps(kAlive);
    for (const auto& by_device : peaks) {
      for (const auto& [device, spot] : by_device) spots_.push_back(spot);
    }
    std::stable_sort(spots_.begin(), spots_.end(),
                     [](const PeakSpot& a, const PeakSpot& b) { return a.report < b.report; });
  }

  uint32_t site_of(const Block& b) {
    uint32_t key = b.reported ? b.key : kNoBlock;
    auto [it, inserted] = site_by_key_.try_emplace(key, static_cast<uint32_t>(out_.sites.size()));
    if (!inserted) return it->second;
    std::string name;
    if (!b.reported) {
      name = "(allocated before the run or not reported)";
    } else if (key == 0) {
      name = "(no operator)";
    } else {
      const SliceKey& k = m_.keys[key - 1];
      name = m_.name(k.name);
      auto stack = m_.call_stacks.find(k.inputs);
      std::string_view frames =
          stack != m_.call_stacks.end() ? std::string_view(stack->second) : input_stack(m_, k.inputs);
      std::string_view frame = user_frame(frames);
      if (!frame.empty()) name.append(" at ").append(frame);
    }
    // Keys of the same operator and frame share one site.
    auto [named, fresh] = site_by_name_.try_emplace(name, static_cast<uint32_t>(out_.sites.size()));
    if (fresh) out_.sites.push_back(std::move(name));
    it->second = named->second;
    return named->second;
  }

  void change(uint32_t block, int sign) {
    Block& b = blocks_[block];
    auto delta = static_cast<int64_t>(b.bytes) * sign;
    class_bytes_[b.device][static_cast<size_t>(b.cls)] += delta;
    site_bytes_[(uint64_t{b.device} << 32) | site_of(b)] += delta;
  }

  // The replay again, taking the peaks' breakdowns and the sites' bytes at
  // each step's end.
  void sweep() {
    size_t next_spot = 0;
    replay([this](uint32_t b, int sign) { change(b, sign); },
           [&](size_t i) {
             for (; next_spot < spots_.size() && spots_[next_spot].report == i; ++next_spot)
               take_peak(spots_[next_spot]);
           },
           [this](const StepWindow& w) { take_step_end(w); });
  }

  void take_peak(const PeakSpot& spot) {
    StepPeakBreakdown p;
    p.step = steps_[spot.step_index].number;
    p.device = spot.device;
    p.peak_ns = spot.ns;
    p.peak_bytes = spot.bytes;
    if (spot.report < keys_.size() && keys_[spot.report] != 0)
      p.operator_name = m_.keys[keys_[spot.report] - 1].name;
    uint64_t classed = 0;
    const auto& sums = class_bytes_[spot.device];
    for (size_t c = 0; c < kMemoryClasses; ++c) {
      p.by_class[c] = alive_bytes(sums[c]);
      classed += p.by_class[c];
    }
    // What the allocator counts and nothing here accounts for.
    if (spot.bytes > classed) p.by_class[static_cast<size_t>(MemoryClass::kUnknown)] += spot.bytes - classed;
    p.allocator_bytes = m_.memory[spot.report].total_allocated;
    for (const auto& [key, bytes] : site_bytes_) {
      if ((key >> 32) == spot.device && bytes > 0)
        p.sites.push_back({static_cast<uint32_t>(key & 0xffffffffu), static_cast<uint64_t>(bytes)});
    }
    keep_largest(&p.sites);
    out_.peaks.push_back(std::move(p));
  }

  // Per site, how its bytes at the steps' ends moved (the series is not kept).
  struct Trend {
    int64_t first = 0;
    int64_t last = 0;
    size_t increases = 0;
    size_t decreases = 0;
    int64_t first_increase_step = -1;
  };

  void take_step_end(const StepWindow& w) {
    for (const auto& [key, bytes] : site_bytes_) {
      auto [it, fresh] = trends_.try_emplace(key);
      Trend& t = it->second;  // a site new since the last end had 0 there
      if (ends_seen_ > 0 && bytes > t.last) {
        ++t.increases;
        if (t.first_increase_step < 0) t.first_increase_step = w.number;
      } else if (ends_seen_ > 0 && bytes < t.last) {
        ++t.decreases;
      }
      if (fresh && ends_seen_ == 0) t.first = bytes;
      t.last = bytes;
    }
    ++ends_seen_;
  }

  void find_leaks() {
    if (ends_seen_ < 3) return;
    size_t transitions = ends_seen_ - 1;
    for (const auto& [key, t] : trends_) {
      if (t.decreases > 0 || t.increases < 2 || 2 * t.increases <= transitions || t.last <= t.first) continue;
      MemoryLeak leak;
      leak.site = static_cast<uint32_t>(key & 0xffffffffu);
      leak.device = static_cast<uint32_t>(key >> 32);
      leak.growth_per_step = static_cast<double>(t.last - t.first) / static_cast<double>(transitions);
      leak.first_step = t.first_increase_step;
      leak.live_at_end = static_cast<uint64_t>(t.last);
      leak.steps = ends_seen_;
      out_.leaks.push_back(leak);
    }
    std::sort(out_.leaks.begin(), out_.leaks.end(), [](const MemoryLeak& a, const MemoryLeak& b) {
      return a.growth_per_step != b.growth_per_step ? a.growth_per_step > b.growth_per_step : a.site < b.site;
    });
  }

  // For the allocator-snapshot export: per device the last kSnapshotBlocks
  // reported allocations, and every block alive at the end.
  void keep_snapshot_blocks() {
    std::map<uint32_t, size_t> reported;  // per device, counted from the last
    for (size_t i = blocks_.size(); i-- > 0;) {
      const Block& b = blocks_[i];
      bool recent = b.reported && reported[b.device]++ < kSnapshotBlocks;
      if (!recent && b.end_ns != kAlive) continue;
      out_.blocks.push_back({b.address, b.bytes, b.device, b.start_ns, b.end_ns == kAlive ? 0 : b.end_ns,
                             b.cls, site_of(b), b.reported && recent});
    }
    std::reverse(out_.blocks.begin(), out_.blocks.end());
    std::stable_sort(out_.blocks.begin(), out_.blocks.end(),
                     [](const SnapshotBlock& a, const SnapshotBlock& b) { return a.start_ns < b.start_ns; });
  }

  // What was alive on the failed allocation's device when it failed.
  void report_out_of_memory(size_t index) {
    const MemoryRecord& f = m_.failed_allocations[index];
    OutOfMemoryReport o;
    o.ts_ns = f.ts_ns;
    o.device = f.device;
    o.tid = f.tid;
    o.requested_bytes = static_cast<uint64_t>(std::max<int64_t>(f.bytes, 0));
    o.allocator_bytes = f.total_allocated;
    if (index < failed_keys_.size() && failed_keys_[index] != 0)
      o.operator_name = m_.keys[failed_keys_[index] - 1].name;
    for (const Instant& i : m_.instants) {  // the collector's mark: the operator, still open when written
      if (o.operator_name == 0 && i.ts_ns == f.ts_ns && i.tid == f.tid &&
          m_.name(i.domain) == raw::kOutOfMemoryDomain)
        o.operator_name = i.name;
    }
    size_t s = step_index(f.ts_ns);
    o.step = s < steps_.size() ? steps_[s].number : -1;
    std::map<uint32_t, uint64_t> by_site;
    for (const Block& b : blocks_) {
      if (b.device != f.device || b.start_ns > f.ts_ns || b.end_ns <= f.ts_ns) continue;
      ++o.live_blocks;
      o.by_class[static_cast<size_t>(b.cls)] += b.bytes;
      o.alive_bytes += b.bytes;
      uint32_t site = site_of(b);
      by_site[site] += b.bytes;
      o.largest.push_back(
          {b.bytes, b.cls, site, b.start_ns == 0 ? -1 : static_cast<int64_t>(f.ts_ns - b.start_ns)});
    }
    if (o.allocator_bytes > o.alive_bytes) {  // counted by the allocator, known to no report or tag
      o.by_class[static_cast<size_t>(MemoryClass::kUnknown)] += o.allocator_bytes - o.alive_bytes;
      o.alive_bytes = o.allocator_bytes;
    }
    std::stable_sort(o.largest.begin(), o.largest.end(),
                     [](const LiveBlock& a, const LiveBlock& b) { return a.bytes > b.bytes; });
    if (o.largest.size() > kOomBlocks) o.largest.resize(kOomBlocks);
    for (const auto& [site, bytes] : by_site) o.sites.push_back({site, bytes});
    keep_largest(&o.sites);
    out_.out_of_memory.push_back(std::move(o));
  }

  const TraceModel& m_;
  const std::vector<uint32_t>& keys_;
  const std::vector<uint32_t>& failed_keys_;
  const std::vector<StepWindow> steps_;
  std::vector<Block> blocks_;
  std::vector<uint32_t> report_block_;                          // per report: the block it starts or ends
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_key_;  // blocks at an address, by start
  std::unordered_map<uint64_t, std::vector<size_t>> unmatched_frees_;
  std::vector<uint32_t> late_starts_;  // unreported blocks that start during the run
  std::vector<PeakSpot> spots_;
  std::map<uint32_t, std::array<int64_t, kMemoryClasses>> class_bytes_;  // by device
  std::map<uint64_t, int64_t> site_bytes_;                               // device << 32 | site
  std::unordered_map<uint32_t, uint32_t> site_by_key_;
  std::unordered_map<std::string, uint32_t> site_by_name_;
  std::map<uint64_t, Trend> trends_;
  size_t ends_seen_ = 0;
  MemoryBreakdown out_;
};

}  // namespace

const char* memory_class_name(MemoryClass c) {
  switch (c) {
    case MemoryClass::kParameter: return "parameter";
    case MemoryClass::kGradient: return "gradient";
    case MemoryClass::kOptimizerState: return "optimizer state";
    case MemoryClass::kActivation: return "activation";
    case MemoryClass::kInput: return "input";
    case MemoryClass::kTemporary: return "temporary";
    case MemoryClass::kUnknown: return "unknown";
  }
  return "unknown";
}

MemoryBreakdown memory_breakdown(const TraceModel& model, const std::vector<uint32_t>& keys,
                                 const std::vector<uint32_t>& failed_keys) {
  return Builder(model, keys, failed_keys).run();
}

std::vector<MemoryClassSample> memory_class_series(const TraceModel& model, size_t intervals) {
  const std::vector<uint32_t> no_keys;
  return Builder(model, no_keys, no_keys).series(intervals);
}

size_t add_memory_class_counters(TraceModel& model, const std::vector<MemoryClassSample>& series) {
  if (series.empty()) return 0;
  std::map<std::pair<uint32_t, size_t>, uint32_t> names;  // (device, class) -> string id
  auto name = [&](uint32_t device, size_t c) {
    auto [it, fresh] = names.try_emplace({device, c}, 0);
    if (fresh) {
      it->second = static_cast<uint32_t>(model.strings.size());
      model.strings.push_back(std::string("Memory: ") + memory_class_name(static_cast<MemoryClass>(c)) +
                              " (" + memory_device_name(device) + ")");
    }
    return it->second;
  };
  size_t before = model.counters.size();
  for (const MemoryClassSample& s : series) {
    for (size_t c = 0; c < kMemoryClasses; ++c)
      model.counters.push_back(
          {s.ts_ns, 0, name(s.device, c), static_cast<double>(s.by_class[c]) / (1024.0 * 1024.0)});
  }
  std::stable_sort(model.counters.begin(), model.counters.end(),
                   [](const CounterSample& a, const CounterSample& b) { return a.ts_ns < b.ts_ns; });
  return model.counters.size() - before;
}

}  // namespace trainprof::analysis
