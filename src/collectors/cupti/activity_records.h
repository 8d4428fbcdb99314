// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// CUPTI activity records into trainprof events.
//
// CUPTI hands over its records in buffers (cuptiActivityRegisterCallbacks);
// record_buffer() walks one with cuptiActivityGetNextRecord and records each
// kernel, copy, set, runtime or driver call and synchronization as a GPU
// activity (raw/format.h, kGpu*): times on the host clock (GpuClock), the
// kernel's demangled name and launch geometry, the copy's direction and
// memory kinds, the call's function name and thread (its OS id, when the
// thread recorded anything: Recorder::os_tid_of_cupti_thread), and the correlation id
// that joins a launch to what it launched; device memory allocations and
// releases as memory reports. Other kinds are counted, not kept. A kernel,
// copy or set that a CUDA graph launched also carries its graph and node
// ids, and the first activity of each node in a session is preceded by the
// node's description (GPU_GRAPH_NODE: the operator that made it, from
// graph_nodes.h).
#ifndef TRAINPROF_COLLECTORS_CUPTI_ACTIVITY_RECORDS_H_
#define TRAINPROF_COLLECTORS_CUPTI_ACTIVITY_RECORDS_H_

#include <cupti_activity.h>

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "collectors/cupti/gpu_clock.h"
#include "collectors/cupti/graph_nodes.h"
#include "core/event.h"
#include "raw/format.h"

namespace trainprof::cupti {

// cuptiGetCallbackName's shape: the function name of a runtime or driver call.
using CallbackNameFn = CUptiResult (*)(CUpti_CallbackDomain domain, uint32_t cbid, const char** name);
// cuptiActivityGetNextRecord's shape.
using NextRecordFn = CUptiResult (*)(uint8_t* buffer, size_t valid_bytes, CUpti_Activity** record);

class ActivityTranslator {
 public:
  // `clock` and `graph_nodes` must outlive the translator; `callback_name`
  // may be nullptr (calls are then named "cuda runtime call #cbid"),
  // `graph_nodes` too (graph nodes are then not described).
  ActivityTranslator(const GpuClock* clock, CallbackNameFn callback_name,
                     const GraphNodeTable* graph_nodes = nullptr)
      : clock_(clock), callback_name_(callback_name), graph_nodes_(graph_nodes) {}

  // Fills `activity`, `detail` and, for an activity a CUDA graph launched,
  // `graph` (else its node is 0) from one record; false for a kind that is
  // not recorded.
  bool translate(const CUpti_Activity& record, core::Event* activity, core::GpuDetail* detail,
                 core::GpuGraphDetail* graph);

  // Records the description of graph node `node` (GPU_GRAPH_NODE) the first
  // time the translator sees it, when the table knows it.
  void describe_graph_node(uint64_t node, uint32_t graph);

  // A device or managed memory allocation or release (CUPTI_ACTIVITY_KIND_
  // MEMORY2) as a memory report of CUDA device d with raw::kMemoryFromDriver:
  // bytes (< 0 for a release) and the device's total allocated through the
  // driver since the session started (what CUPTI reported; a release of an
  // older block does not take it below 0). False for other records.
  struct MemoryReport {
    uint64_t ticks = 0;
    uint64_t address = 0;
    int64_t bytes = 0;
    uint64_t total = 0;
    uint64_t device = 0;  // raw::memory_device(CUDA, d) | raw::kMemoryFromDriver
  };
  bool translate_memory(const CUpti_Activity& record, MemoryReport* report);

 private:
  core::Event head(raw::EventKind kind, const char* name, uint64_t start, uint64_t end, uint32_t device,
                   uint32_t correlation) const;
  const char* kernel_name(const char* mangled);
  const char* kernel_geometry(const CUpti_ActivityKernel10& k);
  const char* geometry_text(const CUpti_ActivityKernel10& k);
  const char* api_name(raw::GpuApiKind kind, uint32_t cbid);
  uint32_t os_tid(uint32_t cupti_thread_id);

  const GpuClock* clock_;
  CallbackNameFn callback_name_;
  const GraphNodeTable* graph_nodes_;
  std::unordered_set<uint64_t> described_;  // graph nodes described in this session
  // grid x, y, z, block x, y, z, registers, static and dynamic shared memory.
  using Geometry = std::array<int64_t, 9>;
  struct GeometryHash {
    size_t operator()(const Geometry& g) const noexcept {
      uint64_t h = 0xcbf29ce484222325ull;
      for (int64_t v : g) h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ull;
      return h;
    }
  };
  std::unordered_map<const char*, const char*> demangled_;              // CUPTI's name -> interned demangled
  std::unordered_map<Geometry, const char*, GeometryHash> geometries_;  // -> interned detail text
  std::unordered_map<uint64_t, const char*> api_names_;                 // kind << 32 | cbid -> interned
  std::unordered_map<uint32_t, uint32_t> os_tids_;    // CUPTI thread id -> OS id (found ones)
  std::unordered_map<uint32_t, uint64_t> allocated_;  // device -> bytes allocated through the driver
};

struct BufferStats {
  uint64_t records = 0;    // walked
  uint64_t recorded = 0;   // recorded as GPU activities
  bool malformed = false;  // the walk ended on an error other than the buffer's end
};

// Walks `valid_bytes` of `buffer` with `next` and records every record the
// translator takes (core::record_gpu).
BufferStats record_buffer(uint8_t* buffer, size_t valid_bytes, NextRecordFn next,
                          ActivityTranslator& translator);

// The names trainprof gives (Kineto's where it has them).
const char* copy_kind_name(uint8_t copy_kind);       // "HtoD"
const char* memory_kind_name(uint32_t memory_kind);  // "Pageable"
const char* sync_type_name(uint32_t type);           // "Stream Synchronize"
// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel".
std::string without_version_suffix(std::string name);

}  // namespace trainprof::cupti

#endif  // TRAINPROF_COLLECTORS_CUPTI_ACTIVITY_RECORDS_H_
