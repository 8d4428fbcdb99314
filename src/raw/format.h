// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The raw format: every constant in one place. docs/FORMAT.md is the
// specification; keep the two in step.
#ifndef TRAINPROF_RAW_FORMAT_H_
#define TRAINPROF_RAW_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace trainprof::raw {

inline constexpr char kFileMagic[8] = {'T', 'P', 'R', 'A', 'W', '\r', '\n', '\x1a'};
// Version 2 added the chunk sequence number, version 3 the COMM and
// COMM_GROUP events, version 4 the GPU events, version 5 MEMORY_TAG,
// version 6 the CUDA graph ids of GPU activities and GPU_GRAPH_NODE
// (docs/FORMAT.md, "Versioning"); version 1 files are still read, without
// the sequence checks.
inline constexpr uint32_t kFormatVersion = 6;
inline constexpr uint32_t kOldestReadableVersion = 1;
inline constexpr uint32_t kFileHeaderSize = 128;
inline constexpr uint32_t kChunkMagic = 0x4b435054;  // "TPCK" little-endian
inline constexpr uint32_t kChunkHeaderSize = 24;
inline constexpr uint32_t kMaxChunkPayload = 16u << 20;
// Version 2: every chunk payload starts with the chunk's u32 sequence number,
// its position among the chunks of the file (0, 1, 2, ...), so that a lost,
// duplicated or moved chunk is detected.
inline constexpr uint32_t kChunkSequenceSize = 4;
inline constexpr uint32_t kFirstSequencedVersion = 2;
inline constexpr const char* kRawDirName = "raw";
inline constexpr const char* kHostRawFileName = "host.tpraw";

// Fixed file header, little-endian, 128 bytes.
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint32_t clock_source;  // 1: TSC ticks, 2: CLOCK_MONOTONIC ns
  uint32_t pid;
  int32_t rank;
  int32_t world_size;
  uint64_t anchor_ticks;
  uint64_t anchor_monotonic_ns;
  uint64_t anchor_realtime_ns;
  double ticks_per_ns;  // calibrated estimate
  char host[60];        // NUL-padded
  uint32_t crc;         // CRC-32C of bytes [0, 124)
};
static_assert(sizeof(FileHeader) == kFileHeaderSize, "FileHeader is part of the format");
static_assert(offsetof(FileHeader, crc) == 124, "FileHeader is part of the format");

enum class ChunkType : uint16_t {
  kStrings = 1,  // {varint id, varint len, bytes}*
  kEvents = 2,   // encoded events of one producer thread (see EventHead)
  kClock = 3,    // {u64 ticks, u64 monotonic_ns, u64 realtime_ns}
  kThread = 4,   // {varint tid, varint len, name bytes}*
  kStats = 5,    // {varint events_written, varint events_dropped, u8 final}
};

// Chunk header, 24 bytes, followed by `payload_size` bytes (version 2: the
// u32 sequence number, then the body).
struct ChunkHeader {
  uint32_t magic;
  uint16_t type;
  uint16_t flags;      // 0
  uint32_t thread_id;  // producing OS thread (0 when not applicable)
  uint32_t payload_size;
  uint32_t record_count;
  uint32_t crc;  // CRC-32C of header bytes [0, 20) then the payload
};
static_assert(sizeof(ChunkHeader) == kChunkHeaderSize, "ChunkHeader is part of the format");

// Event kinds (low 5 bits of an event's head byte).
enum class EventKind : uint8_t {
  kRange = 1,           // user range: name, t0, duration
  kStep = 2,            // ProfilerStep#N: name, t0, duration, a = kStep* flags, b = step number
  kMark = 3,            // instant: name = message, a = domain string id
  kCounter = 4,         // name, t0, b = IEEE-754 bits of the value
  kAsyncBegin = 5,      // name = message, a = domain string id, b = range id
  kAsyncEnd = 6,        // b = range id (name id 0)
  kOperator = 7,        // framework operator: name, t0, duration,
                        // a = OperatorFlags | forward thread id << 8, b = sequence number + 1 (0: none)
  kOperatorInputs = 8,  // name = "dims\x1ftypes" of the preceding kOperator of this thread; t0 = its t0
  kMemory = 9,          // allocator report: t0, a = zigzag(bytes, < 0: a free), b = address, then
                        // always varint total allocated, total reserved, device (MemoryDevice)
  kDataStage = 10,      // data pipeline stage: name = operation, t0, duration, a = stage string id,
                        // b = custom info string id (0: none)
  kComm = 11,           // communication call: name = operation, t0, duration, a = CommFlags,
                        // b = sequence number in its group + 1 (0: none), then always varint bytes,
                        // group string id (0: none), zigzag(peer), zigzag(tag)
  kCommGroup = 12,      // a communicator: name = "group name\x1fworld ranks\x1fhow it was made", t0
  // GPU activity (CUPTI). All five: name, t0, duration (host clock), a = CUPTI correlation id,
  // b = device + 1 (0: none), then always varint context, stream, subkind, bytes, detail string
  // id (0: none), thread (OS id of the calling thread, kGpuApi; else 0). A kernel, copy or set
  // that a CUDA graph launched has kGpuFromGraph set in its subkind varint, and two more varints
  // follow: the graph id and the graph node id (CUPTI's).
  kGpuKernel = 13,     // name = kernel; detail = "grid x,y,z\x1fblock x,y,z\x1fregisters\x1fstatic
                       // shared bytes\x1fdynamic shared bytes"
  kGpuMemcpy = 14,     // name = "Memcpy HtoD (Pageable -> Device)"; subkind = CUPTI copy kind; bytes
  kGpuMemset = 15,     // name = "Memset (Device)"; bytes
  kGpuApi = 16,        // runtime or driver call: name = function; subkind = GpuApiKind; thread
  kGpuSync = 17,       // synchronization: name = its type ("Stream Synchronize"); subkind = CUPTI type
  kMemoryTag = 18,     // what an allocation holds: name = category ("parameter", ...), t0, a = bytes,
                       // b = address, then always varint device (MemoryDevice)
  kGpuGraphNode = 19,  // a CUDA graph node that launched GPU activities of this run: name = the
                       // operator open where it was made (captured), "" when none; t0 = when it was
                       // made (may precede the run), a = graph node id, b = graph id
  kStackSample = 20,   // a thread's stack as a sampler found it: name = the stack ("file(line):
                       // function" frames, innermost first, joined by ';'), t0, duration = the span
                       // the sample stands for, a = the sampled thread's OS id
};
inline constexpr uint8_t kMaxEventKind = 20;

inline constexpr bool is_gpu_event_kind(EventKind kind) {
  return kind >= EventKind::kGpuKernel && kind <= EventKind::kGpuSync;
}
// kGpuApi subkind.
enum class GpuApiKind : uint8_t { kRuntime = 1, kDriver = 2 };
// In a GPU activity's subkind varint: the graph id and node id follow.
inline constexpr uint64_t kGpuFromGraph = 0x100;
// Separates the fields of a kGpuKernel detail.
inline constexpr char kGpuDetailSeparator = '\x1f';

// kComm flags (`a`).
inline constexpr uint64_t kCommCollective = 1;   // a collective over its group
inline constexpr uint64_t kCommSend = 2;         // point-to-point: this rank sends to `peer`
inline constexpr uint64_t kCommRecv = 4;         // point-to-point: this rank receives from `peer`
inline constexpr uint64_t kCommNonblocking = 8;  // the posting call of a nonblocking operation
inline constexpr uint64_t kCommCompletion = 16;  // a nonblocking operation, from its post to its completion
inline constexpr uint64_t kCommWait = 32;        // a wait or test call (MPI_Wait*, MPI_Test*)
inline constexpr uint64_t kCommManagement = 64;  // creates or frees a communicator
// Timed on the device: an NCCL operation from its first GPU channel's start to
// its last one's end (format 6), recorded by NCCL's threads; not a host call.
// Its name may carry the algorithm and protocol NCCL chose after the
// operation, each after a kCommNameSeparator: "AllReduce\x1fRing\x1fLL".
inline constexpr uint64_t kCommOnDevice = 128;
inline constexpr char kCommNameSeparator = '\x1f';
// Separates the fields of a kCommGroup name.
inline constexpr char kCommGroupSeparator = '\x1f';

inline bool is_known_event_kind(uint8_t kind) {
  return kind >= 1 && kind <= kMaxEventKind;
}

// kMemory device: c10::DeviceType in the low byte, device index + 1 above it
// (0: no index, as for the CPU).
inline constexpr uint64_t memory_device(int type, int index) {
  return static_cast<uint64_t>(type & 0xff) | (static_cast<uint64_t>(index + 1) & 0xff) << 8;
}
inline constexpr int memory_device_type(uint64_t device) {
  return static_cast<int>(device & 0xff);
}
inline constexpr int memory_device_index(uint64_t device) {
  return static_cast<int>((device >> 8) & 0xff) - 1;
}
// Set in a memory report's device when the GPU collector saw the allocation
// in the CUDA driver (CUPTI's memory records): device memory as cudaMalloc
// gives it, apart from a framework allocator's own reports of its blocks.
inline constexpr uint64_t kMemoryFromDriver = uint64_t{1} << 16;
inline constexpr bool memory_from_driver(uint64_t device) {
  return (device & kMemoryFromDriver) != 0;
}
// Set in a memory report's device for an allocation that failed (out of
// memory): bytes = what was asked for, address 0; no block was made.
inline constexpr uint64_t kMemoryFailed = uint64_t{1} << 17;
// The domain of the MARK that names the operator of a failed allocation
// (same time, same thread).
inline constexpr const char* kOutOfMemoryDomain = "out of memory";
inline constexpr bool memory_failed(uint64_t device) {
  return (device & kMemoryFailed) != 0;
}
// "CPU", "CUDA:0", "CUDA:0 driver", ... for a memory device code (its type
// is c10::DeviceType).
inline std::string memory_device_name(uint64_t device) {
  int type = memory_device_type(device);
  int index = memory_device_index(device);
  std::string name;
  switch (type) {
    case 0: name = "CPU"; break;
    case 1: name = "CUDA"; break;
    case 6: name = "HIP"; break;
    case 9: name = "XLA"; break;
    case 12: name = "XPU"; break;
    case 13: name = "MPS"; break;
    case 14: name = "Meta"; break;
    default: name = "Device" + std::to_string(type); break;
  }
  if (index >= 0) name += ":" + std::to_string(index);
  return memory_from_driver(device) ? name + " driver" : name;
}

// kOperator flags (low 8 bits of `a`).
// STEP's `a`: a step not bounded by step() calls on both sides. The one
// begun at start() holds whatever ran before the first step boundary
// (imports, model build, the first batch): the start-up phase. The one
// ended by stop() is the open tail after the last step. The analysis keeps
// both out of the step statistics.
inline constexpr uint64_t kStepStartUp = 1;
inline constexpr uint64_t kStepTail = 2;
inline constexpr uint64_t kOperatorBackward = 1;  // an autograd node (LibTorch BACKWARD_FUNCTION scope)
inline constexpr uint64_t kOperatorUser = 2;      // a user scope (torch record_function)
// Separates the dims from the types in a kOperatorInputs name.
inline constexpr char kInputsSeparator = '\x1f';

// Head byte: kind | present-field bits. Absent fields are zero.
inline constexpr uint8_t kHeadKindMask = 0x1f;
inline constexpr uint8_t kHeadHasDuration = 0x20;
inline constexpr uint8_t kHeadHasA = 0x40;
inline constexpr uint8_t kHeadHasB = 0x80;

inline bool is_little_endian() {
  uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

}  // namespace trainprof::raw

#endif  // TRAINPROF_RAW_FORMAT_H_
