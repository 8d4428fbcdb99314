// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/cupti/cupti_collector.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "base/log.h"
#include "collectors/cupti/activity_records.h"
#include "collectors/cupti/cupti_library.h"
#include "collectors/cupti/gpu_clock.h"
#include "collectors/cupti/graph_nodes.h"
#include "core/clock.h"
#include "core/collector.h"
#include "trainprof/range.h"

namespace trainprof::cupti {
namespace {

const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                     CUPTI_ACTIVITY_KIND_MEMCPY,
                                     CUPTI_ACTIVITY_KIND_MEMSET,
                                     CUPTI_ACTIVITY_KIND_RUNTIME,
                                     CUPTI_ACTIVITY_KIND_DRIVER,
                                     CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                                     CUPTI_ACTIVITY_KIND_MEMORY2};

const char* kind_name(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return "CONCURRENT_KERNEL";
    case CUPTI_ACTIVITY_KIND_MEMCPY: return "MEMCPY";
    case CUPTI_ACTIVITY_KIND_MEMSET: return "MEMSET";
    case CUPTI_ACTIVITY_KIND_RUNTIME: return "RUNTIME";
    case CUPTI_ACTIVITY_KIND_DRIVER: return "DRIVER";
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return "SYNCHRONIZATION";
    case CUPTI_ACTIVITY_KIND_MEMORY2: return "MEMORY2";
    default: return "?";
  }
}

// State shared with CUPTI's callbacks, which may run on CUPTI's own thread
// or on the one calling cuptiActivityFlushAll.
struct Shared {
  std::mutex mu;
  const CuptiLibrary* cupti = nullptr;
  std::unique_ptr<GpuClock> clock;
  std::unique_ptr<ActivityTranslator> translator;
  CuptiStats stats;
  std::atomic<size_t> outstanding{0};  // buffers handed to CUPTI, not yet returned
  // Who made each CUDA graph node, for the process's life: a graph captured
  // in one session may be launched in the next. Its own lock: the callbacks
  // run on the threads that make graphs, while a buffer holds `mu`.
  GraphNodeTable graph_nodes;
  std::atomic<GraphNodeIdFn> graph_node_id{nullptr};
};

Shared& shared() {
  static Shared* s = new Shared();  // CUPTI may call back during exit
  return *s;
}

void add_sync_point_locked(Shared& s) {
  if (s.clock == nullptr) return;
  auto gpu_now = [&s] {
    uint64_t ts = 0;
    s.cupti->get_timestamp(&ts);
    return ts;
  };
  s.clock->add(s.clock->sample(gpu_now));
  s.stats.sync_points = s.clock->points();
}

void log_once_malformed() {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    base::log_warning("GPU: a CUPTI activity buffer could not be walked to its end; the rest of it is lost");
  }
}

// CUPTI's resource callbacks while a session records GPU activity: graph
// nodes made, cloned and destroyed (graph_nodes.h), on the thread that
// makes them.
void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  Shared& s = shared();
  try {
    on_graph_resource(cbid, static_cast<const CUpti_ResourceData*>(data), s.graph_node_id.load(),
                      core::open_operator, detail::now_ticks(), s.graph_nodes);
  } catch (...) {  // no memory for the table: the node goes unnamed
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  Shared& s = shared();
  if (s.outstanding.fetch_add(1) >= kMaxBuffers) {
    s.outstanding.fetch_sub(1);
    *buffer = nullptr;  // CUPTI drops records and counts them
    *size = 0;
    return;
  }
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  if (*buffer == nullptr) s.outstanding.fetch_sub(1);
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Shared& s = shared();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.translator != nullptr && s.cupti != nullptr) {
      add_sync_point_locked(s);  // after every record in the buffer: the line reaches past them
      BufferStats b = record_buffer(buffer, valid, s.cupti->get_next_record, *s.translator);
      ++s.stats.buffers;
      s.stats.records += b.records;
      s.stats.recorded += b.recorded;
      size_t dropped = 0;
      if (s.cupti->get_num_dropped_records(context, stream, &dropped) == CUPTI_SUCCESS)
        s.stats.dropped += dropped;
      if (b.malformed) log_once_malformed();
    }
  }
  std::free(buffer);
  s.outstanding.fetch_sub(1);
}

class CuptiCollector final : public core::Collector {
 public:
  std::string_view name() const override { return "cupti"; }

  void start(const ProfilerOptions& options) noexcept override {
    asked_ = options.activities.contains(Activity::GPU);
    if (!asked_) return;
    try {
      Shared& s = shared();
      std::lock_guard<std::mutex> lock(s.mu);
      s.stats = CuptiStats{};
      std::string why;
      if (!cuda_driver_present(&why)) return not_recording_locked(s, why);
      s.cupti = load_cupti(&why);
      if (s.cupti == nullptr) return not_recording_locked(s, why);
      s.stats.library = s.cupti->path;
      s.clock = std::make_unique<GpuClock>(core::ticks_per_ns());
      add_sync_point_locked(s);
      s.translator =
          std::make_unique<ActivityTranslator>(s.clock.get(), s.cupti->get_callback_name, &s.graph_nodes);
      // At every start: CUPTI keeps one pair of buffer callbacks per process,
      // and torch.profiler (Kineto) registers its own when it runs between
      // two of our sessions; ours would then never see a buffer again.
      CUptiResult registered = s.cupti->register_callbacks(buffer_requested, buffer_completed);
      if (registered != CUPTI_SUCCESS) return failed_locked(s, "cuptiActivityRegisterCallbacks", registered);
      for (CUpti_ActivityKind kind : kKinds) {
        CUptiResult r = s.cupti->activity_enable(kind);
        if (r != CUPTI_SUCCESS)
          return failed_locked(s, std::string("cuptiActivityEnable(") + kind_name(kind) + ")", r);
        enabled_.push_back(kind);
      }
      watch_graph_nodes_locked(s);
      s.stats.active = true;
    } catch (const std::exception& e) {
      base::log_error(std::string("GPU: CUPTI could not start: ") + e.what() +
                      "; no GPU activity is recorded");
    }
  }

  void stop() noexcept override {
    Shared& s = shared();
    if (enabled_.empty()) return;
    // Outside the lock: a forced flush completes the buffers on this thread.
    s.cupti->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(s.mu);
    disable_locked(s);
    if (subscriber_ != nullptr) {  // one subscriber per process: torch.profiler's may come next
      s.cupti->unsubscribe(subscriber_);
      subscriber_ = nullptr;
    }
    if (s.stats.dropped > 0) {
      base::log_warning("GPU: CUPTI dropped " + std::to_string(s.stats.dropped) +
                        " activity records (its buffers were full)");
    }
    s.translator.reset();
    s.clock.reset();
  }

 private:
  // Graph nodes made while the session records are named by the operator
  // that made them. CUPTI allows one subscriber per process: when another
  // tool holds it, graph activities still carry their graph and node ids.
  void watch_graph_nodes_locked(Shared& s) {
    const CuptiLibrary& c = *s.cupti;
    if (c.subscribe == nullptr || c.unsubscribe == nullptr || c.enable_callback == nullptr ||
        c.get_graph_node_id == nullptr) {
      return graph_nodes_unnamed(c.path + " lacks the callback functions");
    }
    s.graph_node_id.store(c.get_graph_node_id);
    CUptiResult r = c.subscribe(&subscriber_, on_resource, nullptr);
    if (r != CUPTI_SUCCESS) {
      subscriber_ = nullptr;
      return graph_nodes_unnamed("cuptiSubscribe failed with " + CuptiLibrary::error_text(r) +
                                 " (another tool subscribed to CUPTI?)");
    }
    for (CUpti_CallbackId cbid : {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
                                  CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING}) {
      r = c.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, cbid);
      if (r != CUPTI_SUCCESS)
        return graph_nodes_unnamed("cuptiEnableCallback failed with " + CuptiLibrary::error_text(r));
    }
  }

  void graph_nodes_unnamed(const std::string& why) {
    if (said_graphs_) return;
    said_graphs_ = true;
    base::log_info("GPU: CUDA graph nodes are not named by the operator that captured them: " + why);
  }

  void disable_locked(Shared& s) {
    for (CUpti_ActivityKind kind : enabled_) s.cupti->activity_disable(kind);
    enabled_.clear();
  }

  void not_recording_locked(Shared& s, const std::string& why) {
    s.stats.why_not = why;
    s.translator.reset();
    s.clock.reset();
    if (!said_) base::log_warning("GPU activity was asked for, but " + why + ": no GPU activity is recorded");
    said_ = true;
  }

  void failed_locked(Shared& s, const std::string& call, CUptiResult r) {
    disable_locked(s);
    not_recording_locked(s, call + " of " + s.cupti->path + " failed with " + CuptiLibrary::error_text(r) +
                                " (no GPU or no driver?)");
  }

  // profiler_info.json's "collectors": {"cupti": ...}: whether GPU activity
  // was recorded, why not, and what CUPTI dropped.
  std::string info_json() const override {
    if (!asked_) return {};
    CuptiStats st = last_cupti_stats();
    nlohmann::json j;
    j["recorded"] = st.active;
    if (!st.why_not.empty()) j["why_not"] = st.why_not;
    if (!st.library.empty()) j["library"] = st.library;
    j["buffers"] = st.buffers;
    j["records"] = st.records;
    j["activities_recorded"] = st.recorded;
    j["records_dropped"] = st.dropped;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  bool asked_ = false;  // the last session asked for GPU activity
  bool said_ = false;   // the reason is given once per process
  bool said_graphs_ = false;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::vector<CUpti_ActivityKind> enabled_;
};

__attribute__((constructor)) void register_cupti_collector() {
  static CuptiCollector* collector = new CuptiCollector();  // lives as long as the process
  core::register_collector(collector);
}

}  // namespace

CuptiStats last_cupti_stats() {
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

}  // namespace trainprof::cupti
