// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/nccl/nccl_profiler.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"
#include "base/run_directory.h"
#include "core/clock.h"
#include "core/collector.h"
#include "core/event.h"
#include "core/recorder.h"
#include "raw/format.h"
#include "trainprof/range.h"

namespace trainprof::nccl {
namespace {

// Handles NCCL holds are pointers to these; each starts with its own magic
// word, so that a stop or a state update tells an operation from a channel
// and a handle that is not ours is left alone.
constexpr uint32_t kOperationMagic = 0x4e434f50;  // "NCOP"
constexpr uint32_t kChannelMagic = 0x4e434348;    // "NCCH"
// NCCL uses at most 64 channels per operation.
constexpr size_t kMaxChannels = 64;
// Operations in flight per communicator: a slot is reused this many
// operations later, long after its kernel ended.
constexpr size_t kRingSize = 4096;

std::atomic<uint64_t> g_communicators{0}, g_written{0}, g_untimed{0}, g_foreign{0};
// Bumped at each session's start: a communicator's group is recorded once per run.
std::atomic<uint64_t> g_run{1};

// NCCL's activation mask, which init() receives by address: NCCL reads it
// before each event, so the events trainprof wants are asked for only while
// a session records, and NCCL costs nothing more otherwise.
constexpr int kMask = kProfileColl | kProfileP2p | kProfileKernelCh;
struct Communicator;
// Under its mutex. Made at first use, never destroyed: a session may start
// from TRAINPROF_OPTIONS while libraries load, before this file's
// initialisers run, and NCCL may finalize during exit.
struct Live {
  std::mutex mu;
  std::vector<int*> masks;
  bool recording = false;
  size_t communicators = 0;
  std::vector<Communicator*> live;
};
Live& live() {
  static Live* l = new Live();
  return *l;
}
std::atomic<uint64_t> g_waiting_at_stop{0};  // enqueued, never timed, when the last session stopped

void set_masks(bool recording) {
  Live& l = live();
  std::lock_guard<std::mutex> lock(l.mu);
  l.recording = recording;
  for (int* mask : l.masks) __atomic_store_n(mask, recording ? kMask : 0, __ATOMIC_RELAXED);
}

struct Operation;

struct Channel {
  uint32_t magic = kChannelMagic;
  Operation* operation = nullptr;
};

struct Operation {
  uint32_t magic = kOperationMagic;
  Communicator* comm = nullptr;
  bool in_use = false;
  bool stopped = false;
  int expected = 0;  // channels NCCL said it runs on (0: not said)
  int channels = 0;  // channels that began
  int ended = 0;     // channels that ended
  const char* name = nullptr;
  uint8_t flags = 0;
  uint32_t sequence = core::kNoSequenceNumber;
  uint64_t bytes = 0;
  int32_t peer = -1;
  uint64_t gpu_start_ns = UINT64_MAX;
  uint64_t gpu_end_ns = 0;
  std::array<Channel, kMaxChannels> channel;
};

struct Communicator {
  std::mutex mu;  // NCCL calls from the user's thread and from its own threads
  const char* group = nullptr;
  std::string group_record;        // the COMM_GROUP record's name
  bool spans_world = false;        // its ranks are the world's, in order
  uint64_t group_recorded_in = 0;  // g_run when the group was last recorded
  std::unique_ptr<Operation[]> ring;
  size_t next = 0;

  bool owns(const void* p) const {
    auto* first = ring.get();
    return p >= static_cast<const void*>(first) && p < static_cast<const void*>(first + kRingSize);
  }
};

// A GPU globaltimer time (ns; the driver keeps the timer on CLOCK_REALTIME)
// in host ticks.
uint64_t ticks_of_gpu_ns(uint64_t gpu_ns) {
  uint64_t now_ticks = detail::now_ticks();
  uint64_t now_ns = detail::realtime_now_ns();
  double back_ns = static_cast<double>(now_ns) - static_cast<double>(gpu_ns);
  double ticks = static_cast<double>(now_ticks) - back_ns * core::ticks_per_ns();
  return ticks > 0 ? static_cast<uint64_t>(ticks) : 0;
}

// Under c.mu, while recording: the communicator's COMM_GROUP, once per run.
void record_group(Communicator& c) {
  uint64_t run = g_run.load(std::memory_order_relaxed);
  if (c.group_recorded_in == run) return;
  c.group_recorded_in = run;
  core::record_event_fields(detail::now_ticks(), 0, detail::intern(c.group_record),
                            static_cast<uint8_t>(raw::EventKind::kCommGroup), 0, 0, 0);
}

// Under c.mu: a finished operation's COMM event, when its kernel was timed.
void write(Communicator& c, Operation& op) {
  op.in_use = false;
  if (op.channels == 0 || op.gpu_start_ns == UINT64_MAX) {
    g_untimed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!detail::host_recording()) return;
  record_group(c);
  uint64_t t0 = ticks_of_gpu_ns(op.gpu_start_ns);
  uint64_t t1 = op.gpu_end_ns > op.gpu_start_ns ? ticks_of_gpu_ns(op.gpu_end_ns) : t0;
  core::record_comm(t0, t1, op.name, static_cast<uint8_t>(op.flags | raw::kCommOnDevice), op.sequence,
                    op.bytes, c.group, op.peer, -1);
  g_written.fetch_add(1, std::memory_order_relaxed);
}

// The kernel's channels report after the operation was enqueued (its
// stopEvent), one by one: it is written once every channel NCCL announced
// has ended (all that began, when it announced none). One that never hears
// of its kernel is written (counted) when its slot comes round again.
void maybe_write(Communicator& c, Operation& op) {
  if (!op.in_use || !op.stopped || op.channels == 0 || op.ended < op.channels) return;
  if (op.expected == 0 || op.ended >= op.expected) write(c, op);
}

// Under c.mu: the next slot of the ring, its former operation written
// first. Its channels start over: a late report on one of the former
// operation's channels names no operation and is ignored.
Operation& take_slot(Communicator& c) {
  Operation& op = c.ring[c.next++ % kRingSize];
  if (op.in_use) write(c, op);  // never finished (a lost stop): written with what it has
  op = Operation{};
  op.comm = &c;
  op.in_use = true;
  return op;
}

// A world rank for a rank of the communicator: the same when the
// communicator spans the world, else unknown.
int32_t world_rank(const Communicator& c, int rank) {
  return rank >= 0 && c.spans_world ? rank : -1;
}

// A collective's name with the algorithm and protocol NCCL chose
// ("AllReduce\x1fRing\x1fLL", raw/format.h), interned: NCCL's strings are
// its own and may go with the communicator.
const char* collective_name(const char* func, const char* algorithm, const char* protocol) {
  std::string name = func != nullptr && *func != '\0' ? func : "collective";
  bool has_algorithm = algorithm != nullptr && *algorithm != '\0';
  bool has_protocol = protocol != nullptr && *protocol != '\0';
  if (has_algorithm || has_protocol) {
    ((name += raw::kCommNameSeparator) += has_algorithm ? algorithm : "") += raw::kCommNameSeparator;
    name += has_protocol ? protocol : "";
  }
  return detail::intern(name);
}

Result start_event(void* context, void** handle, EventDescrV4* d) {
  if (handle != nullptr) *handle = nullptr;
  auto* c = static_cast<Communicator*>(context);
  if (c == nullptr || handle == nullptr || d == nullptr) return kSuccess;
  try {
    std::lock_guard<std::mutex> lock(c->mu);
    if (d->type == kProfileColl) {
      const char* name = collective_name(d->coll.func, d->coll.algo, d->coll.proto);  // may throw
      Operation& op = take_slot(*c);
      op.name = name;
      op.flags = static_cast<uint8_t>(raw::kCommCollective);
      op.sequence = static_cast<uint32_t>(d->coll.seq_number);
      op.bytes = d->coll.count * datatype_bytes(d->coll.datatype);
      op.expected = d->coll.channels;
      std::string_view func = d->coll.func != nullptr ? d->coll.func : "";
      op.peer = func == "Broadcast" || func == "Reduce" ? world_rank(*c, d->coll.root) : -1;
      *handle = &op;
    } else if (d->type == kProfileP2p) {
      std::string_view func = d->p2p.func != nullptr ? d->p2p.func : "";
      const char* name = detail::intern(func.empty() ? "point-to-point" : func);  // may throw
      Operation& op = take_slot(*c);
      op.name = name;
      op.flags = static_cast<uint8_t>(func == "Recv" ? raw::kCommRecv : raw::kCommSend);
      op.bytes = d->p2p.count * datatype_bytes(d->p2p.datatype);
      op.peer = world_rank(*c, d->p2p.peer);
      op.expected = d->p2p.channels;
      *handle = &op;
    } else if (d->type == kProfileKernelCh) {
      auto* op = static_cast<Operation*>(d->parent);
      if (!c->owns(op) || op->magic != kOperationMagic || !op->in_use) {
        g_foreign.fetch_add(1, std::memory_order_relaxed);
        return kSuccess;
      }
      Channel& ch = op->channel[d->kernel_ch.channel % kMaxChannels];
      ch.operation = op;
      ++op->channels;
      if (d->kernel_ch.ptimer != 0) op->gpu_start_ns = std::min(op->gpu_start_ns, d->kernel_ch.ptimer);
      *handle = &ch;
    }
  } catch (...) {  // no memory for a name: the operation is not profiled
    *handle = nullptr;
  }
  return kSuccess;
}

// The operation behind a handle of ours (nullptr: not ours).
Operation* operation_of(void* handle, bool* channel) {
  if (handle == nullptr) return nullptr;
  uint32_t magic = 0;
  std::memcpy(&magic, handle, sizeof(magic));
  *channel = magic == kChannelMagic;
  if (*channel) return static_cast<Channel*>(handle)->operation;
  return magic == kOperationMagic ? static_cast<Operation*>(handle) : nullptr;
}

Result stop_event(void* handle) {
  bool channel = false;
  Operation* op = operation_of(handle, &channel);
  if (op == nullptr || op->comm == nullptr) return kSuccess;
  Communicator& c = *op->comm;
  std::lock_guard<std::mutex> lock(c.mu);
  if (!op->in_use) return kSuccess;  // written already (its slot was taken again)
  if (channel) {
    ++op->ended;
  } else {
    op->stopped = true;
  }
  maybe_write(c, *op);
  return kSuccess;
}

Result record_event_state(void* handle, int state, EventStateArgsV4* args) {
  bool channel = false;
  Operation* op = operation_of(handle, &channel);
  if (op == nullptr || !channel || state != kKernelChStop || args == nullptr || op->comm == nullptr)
    return kSuccess;
  std::lock_guard<std::mutex> lock(op->comm->mu);
  if (op->in_use) op->gpu_end_ns = std::max(op->gpu_end_ns, args->kernel_ch.ptimer);
  return kSuccess;
}

Result init(void** context, int* activation_mask, const char* comm_name, uint64_t comm_hash, int, int ranks,
            int, DebugLogger) {
  if (context == nullptr || activation_mask == nullptr) return kSuccess;
  *context = nullptr;
  try {
    auto c = std::make_unique<Communicator>();
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016" PRIx64, comm_hash);
    std::string group = std::string("nccl:") + hex;
    c->group = detail::intern(group);
    c->spans_world = ranks > 0 && ranks == base::detect_rank().world_size;
    std::string members;
    if (c->spans_world) {
      for (int r = 0; r < ranks; ++r) members += (r == 0 ? "" : ",") + std::to_string(r);
    }
    c->group_record = group + raw::kCommGroupSeparator + members + raw::kCommGroupSeparator + "NCCL" +
                      (comm_name != nullptr && *comm_name != '\0' ? std::string(" ") + comm_name : "");
    c->ring = std::make_unique<Operation[]>(kRingSize);  // each slot names its communicator once taken
    {
      Live& l = live();
      std::lock_guard<std::mutex> lock(l.mu);
      if (std::find(l.masks.begin(), l.masks.end(), activation_mask) == l.masks.end())
        l.masks.push_back(activation_mask);
      ++l.communicators;
      l.live.push_back(c.get());
      *activation_mask = l.recording ? kMask : 0;
    }
    *context = c.release();
    g_communicators.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {  // no memory: NCCL runs without this communicator's profile
    *activation_mask = 0;
  }
  return kSuccess;
}

Result finalize(void* context) {
  auto* c = static_cast<Communicator*>(context);
  if (c == nullptr) return kSuccess;
  {
    std::lock_guard<std::mutex> lock(live().mu);
    std::erase(live().live, c);
  }
  {
    std::lock_guard<std::mutex> lock(c->mu);
    for (size_t i = 0; i < kRingSize; ++i) {
      if (c->ring[i].in_use) write(*c, c->ring[i]);
    }
  }
  delete c;
  Live& l = live();
  std::lock_guard<std::mutex> lock(l.mu);
  if (l.communicators > 0 && --l.communicators == 0) l.masks.clear();  // NCCL may unload
  return kSuccess;
}

// Starts a new run's group records, and says what the plugin saw.
class NcclCollector final : public core::Collector {
 public:
  std::string_view name() const override { return "nccl"; }
  void start(const ProfilerOptions&) noexcept override {
    g_run.fetch_add(1, std::memory_order_relaxed);
    set_masks(true);
  }
  void stop() noexcept override {
    set_masks(false);
    // Enqueued operations whose kernel was never timed, so far.
    uint64_t waiting = 0;
    Live& l = live();
    std::lock_guard<std::mutex> lock(l.mu);
    for (Communicator* c : l.live) {
      std::lock_guard<std::mutex> comm_lock(c->mu);
      for (size_t i = 0; i < kRingSize; ++i) {
        const Operation& op = c->ring[i];
        waiting += op.in_use && op.stopped && op.channels == 0;
      }
    }
    g_waiting_at_stop.store(waiting);
  }
  std::string info_json() const override {
    PluginStats st = plugin_stats();
    if (st.communicators == 0) return {};
    nlohmann::json j = {{"communicators", st.communicators},
                        {"operations_written", st.written},
                        {"operations_without_gpu_times", st.untimed},
                        {"operations_not_timed_yet", g_waiting_at_stop.load()}};
    return j.dump();
  }
};

__attribute__((constructor)) void register_nccl_collector() {
  static NcclCollector* collector = new NcclCollector();  // lives as long as the process
  core::register_collector(collector);
}

}  // namespace

uint64_t datatype_bytes(const char* name) {
  if (name == nullptr) return 0;
  static constexpr std::pair<std::string_view, uint64_t> kSizes[] = {
      {"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},      {"ncclUint32", 4},
      {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},    {"ncclFloat32", 4},
      {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
  };
  for (const auto& [type, bytes] : kSizes) {
    if (type == name) return bytes;
  }
  return 0;
}

PluginStats plugin_stats() {
  return PluginStats{g_communicators.load(), g_written.load(), g_untimed.load(), g_foreign.load()};
}

}  // namespace trainprof::nccl

extern "C" {
trainprof::nccl::ProfilerV4 ncclProfiler_v4 = {
    "trainprof",
    trainprof::nccl::init,
    trainprof::nccl::start_event,
    trainprof::nccl::stop_event,
    trainprof::nccl::record_event_state,
    trainprof::nccl::finalize,
};
}
