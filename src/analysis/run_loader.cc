// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// RunLoader's second pass (analysis/run_loader.h): the slices, window by
// window. The first is in run_scan.cc.
#include "analysis/run_loader.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "analysis/run_loader_state.h"
#include "analysis/timeline.h"
#include "base/log.h"
#include "raw/raw_reader.h"

namespace trainprof::analysis {

using namespace loading;  // NOLINT(google-build-using-namespace): the state both passes share

RunLoader::RunLoader() : state_(std::make_unique<State>()) {}
RunLoader::~RunLoader() = default;

void RunLoader::use_threads(int threads) {
  state_->decode_ahead = threads > 1;
}

uint64_t RunLoader::slices_scanned() const {
  return state_->slices_scanned;
}

uint64_t RunLoader::slices_loaded() const {
  return state_->slices_loaded;
}

uint64_t RunLoader::windows_loaded() const {
  return state_->windows_loaded;
}

uint64_t RunLoader::earliest_slice_ns() const {
  return state_->earliest_slice_ns;
}

namespace {

// Emptied window buffers kept for reuse.
constexpr size_t kSpareBuffers = 4;
constexpr uint32_t kNoThread = ~0u;

// Pass 2: slices into the buffers of their windows, windows out in order.
class WindowFeeder {
 public:
  WindowFeeder(TraceModel& m, RunLoader::State& st, const std::vector<uint64_t>& bounds,
               const WindowConsumer& consume)
      : m_(m), st_(st), bounds_(bounds), consume_(consume), carried_(m.threads.size()) {
    // The last chunk that holds a slice (or an inputs record) of each window.
    ready_after_.assign(bounds.size() - 1, kNone);
    for (uint64_t c = 0; c < st.chunks.size(); ++c) {
      const ChunkStarts& cs = st.chunks[c];
      if (cs.min == kNone) continue;
      size_t first = window_of(cs.min), last = window_of(cs.max);
      for (size_t w = first; w <= last; ++w) ready_after_[w] = c;
    }
    // Each window's slices per thread, estimated from the sample: buffers
    // are sized once instead of growing by copies.
    for (const RunLoader::State::Sampled& sampled : st.sample) {
      ++expected_[(uint64_t{window_of(sampled.start_ns)} << 32) | m.thread_of(sampled.tid)];
    }
  }

  void chunk(ScannedFile& file, uint64_t nth, const raw::RawEvent* events, size_t count) {
    if (nth >= file.chunks) return;  // written after the scan (a run still being recorded)
    uint64_t chunk = file.first_chunk + nth;
    uint32_t thread = kNoThread;  // the chunk's (a chunk is one thread's), found at its first slice
    for (size_t i = 0; i < count; ++i) {
      const raw::RawEvent& e = events[i];
      switch (e.kind) {
        case raw::EventKind::kRange:
        case raw::EventKind::kStep:
        case raw::EventKind::kOperator: slice(file, e, position_of(chunk, i), thread); break;
        case raw::EventKind::kOperatorInputs: inputs(file, e); break;
        default: break;  // the scan kept them
      }
    }
    while (next_ < ready_after_.size() && (ready_after_[next_] == kNone || ready_after_[next_] <= chunk)) {
      note_buffered();
      emit();
    }
  }

  void finish() {
    while (next_ < ready_after_.size()) emit();
    base::log_debug("analysis windows: " + std::to_string(ready_after_.size()) + ", at most " +
                    std::to_string(most_pending_) + " filling at once, holding at most " +
                    std::to_string(most_buffered_ * sizeof(Slice) >> 20) + " MiB of slices");
    if (late_ > 0) {
      m_.warnings.push_back(std::to_string(late_) +
                            " slice(s) read after their window had been analysed (the run was still being "
                            "recorded); they are counted in the next window");
    }
  }

 private:
  struct Buffer {
    std::vector<std::vector<Slice>> threads;
    std::vector<std::pair<SliceRef, uint64_t>> long_durations;
  };
  struct LastOp {
    uint64_t window;
    SliceRef ref;
    uint32_t key;  // file-local
    bool placed;   // false: held, or not selected
  };

  size_t window_of(uint64_t t) {
    if (t >= bounds_[cached_] && t < bounds_[cached_ + 1]) return cached_;
    cached_ = static_cast<size_t>(std::upper_bound(bounds_.begin(), bounds_.end(), t) - bounds_.begin()) - 1;
    return cached_;
  }

  Buffer& buffer(size_t window) {
    if (window == buffer_window_ && buffer_ != nullptr) return *buffer_;
    while (pending_.size() <= window - next_) {
      pending_.emplace_back();  // a deque keeps references to the others
      pending_.back().threads.resize(m_.threads.size());
    }
    buffer_window_ = window;
    buffer_ = &pending_[window - next_];
    return *buffer_;
  }

  std::vector<Slice>& thread_buffer(Buffer& b, size_t window, uint32_t thread) {
    if (b.threads.size() <= thread) b.threads.resize(thread + 1);
    std::vector<Slice>& v = b.threads[thread];
    if (v.capacity() == 0) {
      if (!spare_.empty()) {
        v.swap(spare_.back());
        spare_.pop_back();
      }
      // The estimate with a margin, and room for the slices carried in front.
      auto it = expected_.find((uint64_t{window} << 32) | thread);
      uint64_t expected = it != expected_.end() ? it->second : 0;
      v.reserve(expected * kSampleEvery * 5 / 4 + 1024);
    }
    return v;
  }

  void slice(ScannedFile& file, const raw::RawEvent& e, uint64_t position, uint32_t& thread) {
    bool is_op = e.kind == raw::EventKind::kOperator;
    while (held_ < st_.held.size() && st_.held[held_].position < position) ++held_;  // not met: damage
    if (held_ < st_.held.size() && st_.held[held_].position == position) {
      ++held_;
      if (is_op) last_op_[e.tid] = LastOp{0, {}, 0, false};
      return;
    }
    if (!selected(m_, e.t0_ns)) {
      if (is_op) last_op_[e.tid] = LastOp{0, {}, 0, false};
      return;
    }
    uint32_t local = e.kind == raw::EventKind::kRange ? file.keys.local_range(e.tid, e.name_id)
                                                      : file.keys.local(slice_key(e));
    size_t w = window_of(e.t0_ns);
    if (w < next_) {
      w = next_;
      ++late_;
    }
    Buffer& b = buffer(w);
    if (thread == kNoThread) thread = m_.thread_of(e.tid);
    std::vector<Slice>& v = thread_buffer(b, w, thread);
    uint64_t dur = e.t1_ns - e.t0_ns;
    SliceRef ref{thread, v.size()};
    v.push_back(make_slice(e.t0_ns, dur, file.keys.model(m_, local)));
    if (v.back().dur32 == kLongDuration) b.long_durations.push_back({ref, dur});
    if (is_op) last_op_[e.tid] = LastOp{w, ref, local, true};
  }

  void inputs(ScannedFile& file, const raw::RawEvent& e) {
    auto it = last_op_.find(e.tid);
    if (it == last_op_.end()) return;
    LastOp op = it->second;
    last_op_.erase(it);
    if (!op.placed || op.window < next_) return;
    Slice& s = buffer(op.window).threads[op.ref.thread][op.ref.index];
    if (s.start_ns != e.t0_ns) return;  // its operator was lost
    SliceKey k = file.keys.key(op.key);
    k.inputs = e.name_id;
    s.key = file.keys.model(m_, file.keys.local(k));
  }

  // For the debug log: how far windows wait for each other.
  void note_buffered() {
    most_pending_ = std::max<uint64_t>(most_pending_, pending_.size());
    uint64_t slices = 0;
    for (const Buffer& b : pending_) {
      for (const std::vector<Slice>& v : b.threads) slices += v.capacity();
    }
    for (const std::vector<Slice>& v : spare_) slices += v.capacity();
    most_buffered_ = std::max(most_buffered_, slices);
  }

  // Hands the next window over, then keeps what is still open at its end.
  void emit() {
    Window w{next_, bounds_[next_], bounds_[next_ + 1]};
    Buffer b = pending_.empty() ? Buffer{} : std::move(pending_.front());
    if (!pending_.empty()) pending_.pop_front();
    if (buffer_window_ == next_) buffer_ = nullptr;
    b.threads.resize(m_.threads.size());
    for (const auto& [ref, dur] : b.long_durations) {
      const Slice& s = b.threads[ref.thread][ref.index];
      m_.long_durations[{s.start_ns, s.key}] = dur;
    }
    take_held(w);
    for (size_t t = 0; t < m_.threads.size(); ++t) {
      std::vector<Slice>& own = b.threads[t];
      order_thread_slices(m_, own);
      assemble(own, window_held_[t], carried_[t]);
      st_.slices_loaded += own.size() - carried_[t].size();
      m_.threads[t].first_own = carried_[t].size();
      m_.threads[t].slices.swap(own);  // `own` now holds the window before's
      own.clear();
      // A few emptied buffers are kept for the next windows (no fresh pages
      // to fault in); more would only hold memory.
      if (own.capacity() > 0 && spare_.size() < kSpareBuffers) spare_.push_back(std::move(own));
      own = std::vector<Slice>();
    }
    ++next_;
    ++st_.windows_loaded;
    consume_(m_, w);
    for (size_t t = 0; t < m_.threads.size(); ++t) {
      carried_[t].clear();
      for (const Slice& s : m_.threads[t].slices) {
        if (m_.end(s) > w.end_ns) carried_[t].push_back(s);
      }
    }
  }

  // The held slices that start in window `w`, per thread in timeline order
  // (into window_held_).
  void take_held(const Window& w) {
    window_held_.resize(m_.threads.size());
    for (std::vector<Slice>& v : window_held_) v.clear();
    size_t first = held_out_;
    while (held_out_ < st_.held_by_start.size() &&
           st_.held[st_.held_by_start[held_out_]].start_ns < w.end_ns) {
      ++held_out_;
    }
    // In the order they were recorded, for the tie rule of timeline order.
    std::sort(st_.held_by_start.begin() + static_cast<std::ptrdiff_t>(first),
              st_.held_by_start.begin() + static_cast<std::ptrdiff_t>(held_out_));
    for (size_t i = first; i < held_out_; ++i) {
      const HeldSlice& h = st_.held[st_.held_by_start[i]];
      Slice s = make_slice(h.start_ns, h.dur_ns, h.key);
      if (h.is_step) {
        int64_t n = m_.step_number(s);
        if (!m_.selection.keeps_step(n)) continue;
      } else if (!selected(m_, h.start_ns)) {
        continue;
      }
      if (s.dur32 == kLongDuration) m_.long_durations[{s.start_ns, s.key}] = h.dur_ns;
      window_held_[m_.thread_of(h.tid)].push_back(s);
    }
    for (std::vector<Slice>& v : window_held_) order_thread_slices(m_, v);
  }

  // Lays out one thread of the window in `own` (given ordered): the carried
  // slices, then own and held merged. A held slice counts as recorded after
  // every slice it ties with (it was recorded later, or it would not have
  // been among the longest): it goes first. One pass from the back, so each
  // slice moves once.
  void assemble(std::vector<Slice>& own, const std::vector<Slice>& held, const std::vector<Slice>& carried) {
    TimelineOrder before{m_};
    size_t i = own.size(), j = held.size(), c = carried.size();
    own.resize(i + j + c);
    Slice* d = own.data();
    size_t out = i + j + c;
    while (j > 0) {
      if (i > 0 && !before(d[i - 1], held[j - 1])) {
        d[--out] = d[--i];
      } else {
        d[--out] = held[--j];
      }
    }
    if (c > 0) {
      std::memmove(d + c, d, i * sizeof(Slice));
      std::copy(carried.begin(), carried.end(), d);
    }
  }

  TraceModel& m_;
  RunLoader::State& st_;
  const std::vector<uint64_t>& bounds_;
  const WindowConsumer& consume_;
  std::vector<uint64_t> ready_after_;
  std::unordered_map<uint64_t, uint32_t> expected_;  // sampled slices by (window << 32 | thread)
  std::deque<Buffer> pending_;                       // windows next_, next_ + 1, ...
  Buffer* buffer_ = nullptr;                         // of buffer_window_, the last one used
  size_t buffer_window_ = 0;
  std::vector<std::vector<Slice>> carried_;
  std::vector<std::vector<Slice>> window_held_;  // the window's held slices, per thread
  std::vector<std::vector<Slice>> spare_;        // emptied buffers, reused: no fresh pages a window
  std::unordered_map<uint32_t, LastOp> last_op_;
  size_t next_ = 0;
  size_t cached_ = 0;
  size_t held_ = 0;      // next held slice by position
  size_t held_out_ = 0;  // next held slice by start
  uint64_t late_ = 0;
  uint64_t most_pending_ = 0;
  uint64_t most_buffered_ = 0;  // slice capacity of pending and spare buffers
};

}  // namespace

bool RunLoader::load(TraceModel* model, const std::vector<uint64_t>& boundaries,
                     const WindowConsumer& consume, std::string* error) {
  State& st = *state_;
  WindowFeeder feeder(*model, st, boundaries, consume);
  for (ScannedFile& file : st.files) {
    uint64_t nth = 0;
    raw::EventSink sink = [&](const raw::RawEvent* events, size_t count) {
      feeder.chunk(file, nth++, events, count);
    };
    if (!st.read(file.path, error, sink)) return false;
  }
  feeder.finish();
  return true;
}

bool build_model(const std::string& run_dir, TraceModel* model, std::string* error) {
  RunLoader loader;
  if (!loader.scan(run_dir, model, error)) return false;
  return loader.load(
      model, loader.plan_windows(kNone), [](TraceModel&, const Window&) {}, error);
}

}  // namespace trainprof::analysis
