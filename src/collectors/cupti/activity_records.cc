// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/cupti/activity_records.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/intern.h"
#include "core/recorder.h"

namespace trainprof::cupti {

const char* copy_kind_name(uint8_t copy_kind) {
  static const char* const kNames[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                       "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  return copy_kind < std::size(kNames) ? kNames[copy_kind] : "Unknown";
}

const char* memory_kind_name(uint32_t memory_kind) {
  static const char* const kNames[] = {"Unknown", "Pageable", "Pinned",        "Device",
                                       "Array",   "Managed",  "Device Static", "Managed Static"};
  return memory_kind < std::size(kNames) ? kNames[memory_kind] : "Unknown";
}

const char* sync_type_name(uint32_t type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "Event Synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "Stream Wait Event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "Stream Synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "Context Synchronize";
    default: return "Synchronize";
  }
}

std::string without_version_suffix(std::string name) {
  size_t v = name.rfind("_v");
  if (v != std::string::npos && v + 2 < name.size() &&
      std::all_of(name.begin() + static_cast<std::ptrdiff_t>(v) + 2, name.end(),
                  [](char c) { return c >= '0' && c <= '9'; })) {
    name.resize(v);
  }
  return name;
}

core::Event ActivityTranslator::head(raw::EventKind kind, const char* name, uint64_t start, uint64_t end,
                                     uint32_t device, uint32_t correlation) const {
  uint64_t t0 = clock_->to_ticks(start);
  uint64_t t1 = std::max(t0, clock_->to_ticks(end));
  // Device ids past the 16 bits of the slot are not real GPUs (CUPTI's
  // "none" is all ones): no device.
  uint16_t device_plus_one = device < 0xffffu ? static_cast<uint16_t>(device + 1) : 0;
  return core::Event{t0, t1, name, static_cast<uint8_t>(kind), 0, device_plus_one, correlation};
}

// Keyed by CUPTI's own name pointer: CUPTI shares one name string across
// every record of the same kernel, so a kernel seen before costs one lookup
// (interning the text each time cost most of a record's 73 ns).
const char* ActivityTranslator::kernel_name(const char* mangled) {
  if (mangled == nullptr) return detail::intern("(unnamed kernel)");
  auto it = demangled_.find(mangled);
  if (it != demangled_.end()) return it->second;
  int status = 0;
  char* plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  const char* name = detail::intern(status == 0 && plain != nullptr ? plain : mangled);
  std::free(plain);
  demangled_.emplace(mangled, name);
  return name;
}

// A training step launches the same few shapes over and over: the text is
// made once per distinct geometry.
const char* ActivityTranslator::kernel_geometry(const CUpti_ActivityKernel10& k) {
  const Geometry key{k.gridX,
                     k.gridY,
                     k.gridZ,
                     k.blockX,
                     k.blockY,
                     k.blockZ,
                     k.registersPerThread,
                     k.staticSharedMemory,
                     k.dynamicSharedMemory};
  auto it = geometries_.find(key);
  if (it != geometries_.end()) return it->second;
  const char* text = geometry_text(k);
  geometries_.emplace(key, text);
  return text;
}

const char* ActivityTranslator::geometry_text(const CUpti_ActivityKernel10& k) {
  const char sep = raw::kGpuDetailSeparator;
  std::string text = std::to_string(k.gridX) + "," + std::to_string(k.gridY) + "," + std::to_string(k.gridZ) +
                     sep + std::to_string(k.blockX) + "," + std::to_string(k.blockY) + "," +
                     std::to_string(k.blockZ) + sep + std::to_string(k.registersPerThread) + sep +
                     std::to_string(k.staticSharedMemory) + sep + std::to_string(k.dynamicSharedMemory);
  return detail::intern(text);
}

const char* ActivityTranslator::api_name(raw::GpuApiKind kind, uint32_t cbid) {
  uint64_t key = uint64_t{static_cast<uint8_t>(kind)} << 32 | cbid;
  auto it = api_names_.find(key);
  if (it != api_names_.end()) return it->second;
  const char* found = nullptr;
  CUpti_CallbackDomain domain =
      kind == raw::GpuApiKind::kRuntime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
  std::string name;
  if (callback_name_ != nullptr && callback_name_(domain, cbid, &found) == CUPTI_SUCCESS &&
      found != nullptr) {
    name = without_version_suffix(found);
  } else {
    name = std::string(kind == raw::GpuApiKind::kRuntime ? "cuda runtime call #" : "cuda driver call #") +
           std::to_string(cbid);
  }
  const char* interned = detail::intern(name);
  api_names_.emplace(key, interned);
  return interned;
}

uint32_t ActivityTranslator::os_tid(uint32_t cupti_thread_id) {
  auto it = os_tids_.find(cupti_thread_id);
  if (it != os_tids_.end()) return it->second;
  uint32_t tid = core::Recorder::instance().os_tid_of_cupti_thread(cupti_thread_id);
  if (tid != 0) os_tids_.emplace(cupti_thread_id, tid);  // a miss is asked again: the thread may record later
  return tid;
}

namespace {
void from_graph(uint32_t graph, uint64_t node, core::GpuGraphDetail* g) {
  g->graph = graph;
  g->node = node;
}
}  // namespace

void ActivityTranslator::describe_graph_node(uint64_t node, uint32_t graph) {
  if (graph_nodes_ == nullptr || described_.count(node) != 0) return;
  std::optional<GraphNodeTable::Made> made = graph_nodes_->find(node);
  if (!made) return;  // made while nothing watched: asked again at its next activity
  described_.insert(node);
  core::record_gpu_graph_node(made->ticks, node, graph, made->operator_name);
}

bool ActivityTranslator::translate(const CUpti_Activity& record, core::Event* activity, core::GpuDetail* d,
                                   core::GpuGraphDetail* g) {
  *d = core::GpuDetail{0, nullptr, 0, 0, core::kGpuDetailSlot, 0, 0, 0};
  *g = core::GpuGraphDetail{0, 0, 0, 0, core::kGpuGraphSlot, {}};
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      *activity =
          head(raw::EventKind::kGpuKernel, kernel_name(k.name), k.start, k.end, k.deviceId, k.correlationId);
      d->context = k.contextId;
      d->stream = k.streamId;
      d->detail = kernel_geometry(k);
      from_graph(k.graphId, k.graphNodeId, g);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
      std::string name = std::string("Memcpy ") + copy_kind_name(m.copyKind) + " (" +
                         memory_kind_name(m.srcKind) + " -> " + memory_kind_name(m.dstKind) + ")";
      *activity =
          head(raw::EventKind::kGpuMemcpy, detail::intern(name), m.start, m.end, m.deviceId, m.correlationId);
      d->context = m.contextId;
      d->stream = m.streamId;
      d->subkind = m.copyKind;
      d->bytes = m.bytes;
      from_graph(m.graphId, m.graphNodeId, g);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
      std::string name = std::string("Memset (") + memory_kind_name(m.memoryKind) + ")";
      *activity =
          head(raw::EventKind::kGpuMemset, detail::intern(name), m.start, m.end, m.deviceId, m.correlationId);
      d->context = m.contextId;
      d->stream = m.streamId;
      d->bytes = m.bytes;
      from_graph(m.graphId, m.graphNodeId, g);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto& a = reinterpret_cast<const CUpti_ActivityAPI&>(record);
      raw::GpuApiKind kind =
          record.kind == CUPTI_ACTIVITY_KIND_RUNTIME ? raw::GpuApiKind::kRuntime : raw::GpuApiKind::kDriver;
      *activity =
          head(raw::EventKind::kGpuApi, api_name(kind, a.cbid), a.start, a.end, 0xffffffffu, a.correlationId);
      d->subkind = static_cast<uint8_t>(kind);
      d->thread = os_tid(a.threadId);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto& s = reinterpret_cast<const CUpti_ActivitySynchronization2&>(record);
      *activity = head(raw::EventKind::kGpuSync, detail::intern(sync_type_name(s.type)), s.start, s.end,
                       0xffffffffu, s.correlationId);
      d->context = s.contextId;
      d->stream = s.streamId;
      d->subkind = static_cast<uint8_t>(s.type);
      return true;
    }
    default: return false;
  }
}

bool ActivityTranslator::translate_memory(const CUpti_Activity& record, MemoryReport* report) {
  if (record.kind != CUPTI_ACTIVITY_KIND_MEMORY2) return false;
  const auto& m = reinterpret_cast<const CUpti_ActivityMemory4&>(record);
  if (m.memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_DEVICE && m.memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_MANAGED)
    return false;  // host memory (pinned, pageable) is not the GPU's
  bool allocation = m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  if (!allocation && m.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) return false;
  if (m.deviceId >= 0xfe || m.bytes > static_cast<uint64_t>(INT64_MAX)) return false;  // not a real device
  uint64_t& total = allocated_[m.deviceId];
  total = allocation ? total + m.bytes : total - std::min(total, m.bytes);
  report->ticks = clock_->to_ticks(m.timestamp);
  report->address = m.address;
  report->bytes = allocation ? static_cast<int64_t>(m.bytes) : -static_cast<int64_t>(m.bytes);
  report->total = total;
  report->device = raw::memory_device(1, static_cast<int>(m.deviceId)) | raw::kMemoryFromDriver;  // c10 CUDA
  return true;
}

BufferStats record_buffer(uint8_t* buffer, size_t valid_bytes, NextRecordFn next,
                          ActivityTranslator& translator) {
  BufferStats stats;
  if (buffer == nullptr || valid_bytes == 0 || next == nullptr) return stats;
  CUpti_Activity* record = nullptr;
  for (;;) {
    CUptiResult result = next(buffer, valid_bytes, &record);
    if (result == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the buffer's end
    if (result != CUPTI_SUCCESS || record == nullptr) {
      stats.malformed = true;
      break;
    }
    ++stats.records;
    ActivityTranslator::MemoryReport memory;
    if (translator.translate_memory(*record, &memory)) {
      core::record_memory(memory.ticks, memory.address, memory.bytes, memory.total, memory.total,
                          memory.device);
      ++stats.recorded;
      continue;
    }
    core::Event activity{};
    core::GpuDetail detail{};
    core::GpuGraphDetail graph{};
    if (!translator.translate(*record, &activity, &detail, &graph)) continue;
    if (graph.node != 0) {
      translator.describe_graph_node(graph.node, graph.graph);
      core::record_gpu(activity, detail, graph);
    } else {
      core::record_gpu(activity, detail);
    }
    ++stats.recorded;
  }
  return stats;
}

}  // namespace trainprof::cupti
