// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// trace_view.pftrace (perfetto_trace.h).
//
// Protobuf is written by hand: the few messages used here are encoded
// field by field (varints, length-delimited submessages), the slice packets,
// which are nearly all of the file, into small stack buffers. Field numbers
// are Perfetto's (perfetto/trace/trace_packet.proto, track_event/*.proto).
#include "exporter/perfetto_trace.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analysis/gpu_launches.h"
#include "analysis/memory.h"
#include "analysis/passes.h"
#include "analysis/python_samples.h"
#include "exporter/gpu_activity.h"
#include "exporter/perfetto_proto.h"
#include "raw/format.h"

#include <libdeflate.h>

namespace trainprof::exporter {
namespace {

using analysis::Slice;
using analysis::TraceModel;
using namespace perfetto_proto;  // NOLINT: the encoding and field numbers

// ---- Track ids ----
//
// A track's uuid is any 64-bit number unique in the trace; small ones take
// one or two bytes in every event that names its track (sequence 1's).
enum TrackKind : uint64_t { kThreadTrack = 1, kLaneTrack, kCounterTrack, kGpuTrack, kStreamTrack };
uint64_t track_key(uint64_t kind, uint64_t a, uint64_t b = 0) {
  uint64_t h = kind * 0x9E3779B97F4A7C15ull;
  h = (h ^ a) * 0xD6E8FEB86659FD93ull;
  h = (h ^ (h >> 32) ^ b) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

// Tracks whose events may overlap (data stages, communication, async
// ranges): an event goes on the first lane of its group that is free at its
// start, so that a lane's slices never overlap.
struct Lanes {
  std::vector<uint64_t> free_at;  // per lane: the end of its last event
  size_t place(uint64_t start, uint64_t end) {
    for (size_t i = 0; i < free_at.size(); ++i) {
      if (free_at[i] <= start) {
        free_at[i] = end;
        return i;
      }
    }
    free_at.push_back(end);
    return free_at.size() - 1;
  }
};

// The packets of a compressed batch not deflated yet. The string's size
// stays above what is used, so that a slice's packet (at most kSmall bytes)
// is encoded where it stays: no copy (a packet encoded byte by byte on the
// stack and then copied stalled on the copy's loads).
struct PendingPackets {
  static constexpr size_t kSmall = 64;
  std::string bytes;
  size_t used = 0;

  void append(const uint8_t* p, size_t n) {
    if (used + n > bytes.size()) bytes.resize(std::max(2 * bytes.size(), used + n + kSmall));
    std::memcpy(bytes.data() + used, p, n);
    used += n;
  }
  // Where a packet of at most kSmall bytes is encoded in place; `used`
  // grows by its size after.
  uint8_t* room_for_small() {
    if (used + kSmall > bytes.size()) bytes.resize(std::max(2 * bytes.size(), used + 1024 * kSmall));
    return reinterpret_cast<uint8_t*>(bytes.data()) + used;
  }
};

}  // namespace

struct PerfettoTraceWriter::State {
  // A thread's packet sequence: its slices, begun in start order and ended
  // as later ones begin past their end.
  struct Sequence {
    uint32_t id = 0;
    uint64_t track = 0;
    uint64_t last_ts = 0;             // of the incremental clock
    std::vector<uint64_t> open_ends;  // a stack: innermost last
    std::vector<bool> interned;       // name ids whose iid this sequence defined
  };

  State(const TraceModel& m, const OutputPath& path, uint64_t first_slice_ns, bool compressed_output)
      : out(path), compress(compressed_output) {
    base = std::min(m.session_start_ns, first_slice_ns);
    for (const auto& i : m.instants) base = std::min(base, i.ts_ns);
    for (const auto& c : m.counters) base = std::min(base, c.ts_ns);
    for (const auto& r : m.memory) base = std::min(base, r.ts_ns);
    for (const auto& d : m.data_stages) base = std::min(base, d.start_ns);
    for (const auto& c : m.comm_calls) base = std::min(base, c.start_ns);
    for (const auto& a : m.async_ranges) base = std::min(base, a.start_ns);
    if (!m.gpu.empty()) base = std::min(base, m.gpu.front().start_ns);  // in start order
    process = next_uuid++;
    std::vector<analysis::ForwardBackwardLink> links = analysis::forward_backward_links(m);
    gpu_flow_base = links.size();
    for (size_t i = 0; i < links.size(); ++i) {
      flow_starts.emplace(key(links[i].forward_tid, links[i].forward_start_ns), i + 1);
      flow_ends.emplace(key(links[i].backward_tid, links[i].backward_start_ns), i + 1);
    }
    Message proc;
    proc.uint(1, m.pid).bytes(6,
                              "rank " + std::to_string(m.rank) + (m.host.empty() ? "" : " (" + m.host + ")"));
    Message track;
    track.uint(1, process).message(3, proc);
    global_packet(Message()
                      .uint(packet::kSequenceFlags, kIncrementalStateCleared)
                      .message(packet::kTrackDescriptor, track));
  }

  static uint64_t key(uint32_t tid, uint64_t ts) { return ts * 0x9E3779B97F4A7C15ull ^ tid; }

  void append_packet(const uint8_t* body, size_t size) {
    uint8_t head[12];
    uint8_t* p = put_varint(put_tag(head, kTracePacket, kBytes), size);
    if (compress) {
      packets.append(head, static_cast<size_t>(p - head));
      packets.append(body, size);
    } else {
      buf.append(reinterpret_cast<char*>(head), static_cast<size_t>(p - head));
      buf.append(reinterpret_cast<const char*>(body), size);
    }
    packet_appended();
  }
  void packet_appended() {
    if (compress && packets.used >= kCompressedChunk) flush_packets();
    if (buf.size() >= (1u << 20)) out.drain(buf);
  }

  // The packets so far as one TracePacket.compressed_packets: a Trace
  // (its packets) deflated in zlib's format, which Perfetto inflates.
  static constexpr size_t kCompressedChunk = 512 * 1024;
  void flush_packets() {
    if (packets.used == 0) return;
    size_t size = 0;
    if (compressor != nullptr) {
      compressed.resize(libdeflate_zlib_compress_bound(compressor.get(), packets.used));
      size = libdeflate_zlib_compress(compressor.get(), packets.bytes.data(), packets.used, compressed.data(),
                                      compressed.size());
    }
    if (size == 0) {
      buf.append(packets.bytes.data(), packets.used);  // not compressed, but whole
    } else {
      uint8_t head[24];
      uint8_t* p = put_varint(put_tag(head, packet::kCompressedPackets, kBytes), size);
      size_t inner = static_cast<size_t>(p - head) + size;
      uint8_t outer[12];
      uint8_t* q = put_varint(put_tag(outer, kTracePacket, kBytes), inner);
      buf.append(reinterpret_cast<char*>(outer), static_cast<size_t>(q - outer));
      buf.append(reinterpret_cast<char*>(head), static_cast<size_t>(p - head));
      buf.append(compressed.data(), size);
    }
    packets.used = 0;
  }
  void append_packet(const Message& m) {
    append_packet(reinterpret_cast<const uint8_t*>(m.data().data()), m.data().size());
  }
  // A packet of sequence 1 (descriptors, and events with absolute times).
  void global_packet(Message m) { append_packet(m.uint(packet::kSequenceId, 1)); }

  void describe_thread(const TraceModel& m, uint32_t tid, uint64_t uuid) {
    auto name = m.thread_names.find(tid);
    Message thread;
    thread.uint(1, m.pid).uint(2, tid);
    if (name != m.thread_names.end()) thread.bytes(5, name->second);
    Message track;
    track.uint(1, uuid).uint(5, process).message(4, thread);
    global_packet(Message().message(packet::kTrackDescriptor, track));
  }

  Sequence& sequence(const TraceModel& m, uint32_t tid) {
    auto it = sequences.find(tid);
    if (it != sequences.end()) return it->second;
    Sequence& s = sequences[tid];
    s.id = next_sequence++;
    s.track = thread_track(m, tid);
    // The first packet: a fresh incremental state, the clock (nanoseconds,
    // each packet's timestamp the delta from the one before) and the
    // thread's track as the default of every track event.
    Message clock6, clock64, snapshot, defaults, event_defaults;
    clock6.uint(1, kBootTime).uint(2, 0);
    clock64.uint(1, kThreadClock).uint(2, 0).uint(3, 1);
    snapshot.message(1, clock6).message(1, clock64).uint(2, kBootTime);
    event_defaults.uint(11, s.track);
    defaults.uint(58, kThreadClock).message(11, event_defaults);
    append_packet(Message()
                      .uint(packet::kSequenceId, s.id)
                      .uint(packet::kSequenceFlags, kIncrementalStateCleared)
                      .message(packet::kDefaults, defaults)
                      .message(packet::kClockSnapshot, snapshot));
    return s;
  }

  // The uuid of a track by its key, and whether it is new.
  std::pair<uint64_t, bool> uuid_of(uint64_t key) {
    auto [it, added] = uuids.emplace(key, next_uuid);
    if (added) ++next_uuid;
    return {it->second, added};
  }

  uint64_t thread_track(const TraceModel& m, uint32_t tid) {
    auto [uuid, added] = uuid_of(track_key(kThreadTrack, tid));
    if (added) describe_thread(m, tid, uuid);
    return uuid;
  }

  // A child track of thread `tid`'s (lanes of data stages, communication...),
  // or with tid 0 of the process's (GPU synchronizations).
  uint64_t lane_track(const TraceModel& m, uint32_t tid, const std::string& what, size_t lane) {
    auto [uuid, added] = uuid_of(track_key(kLaneTrack, tid, std::hash<std::string>()(what) + lane));
    if (added) {
      Message track;
      track.uint(1, uuid).uint(5, tid != 0 ? thread_track(m, tid) : process);
      track.bytes(2, lane == 0 ? what : what + " #" + std::to_string(lane + 1));
      global_packet(Message().message(packet::kTrackDescriptor, track));
    }
    return uuid;
  }

  uint64_t counter_track(const TraceModel& m, const std::string& name, uint32_t tid) {
    auto [uuid, added] = uuid_of(track_key(kCounterTrack, std::hash<std::string>()(name), tid));
    if (added) {
      Message track;
      track.uint(1, uuid)
          .uint(5, tid != 0 ? thread_track(m, tid) : process)
          .bytes(2, name)
          .message(8, Message());
      global_packet(Message().message(packet::kTrackDescriptor, track));
    }
    return uuid;
  }

  // A slice's begin (with its name and flows) or end, at `ts` ns since base.
  struct SliceEvent {
    uint64_t ts;
    bool begin;
    uint32_t name;
    uint64_t flow_out;
    uint64_t flow_in;
  };

  // One slice packet on `s`: a begin with its name (interned on first use)
  // and flows, or an end. The packet is encoded where it stays
  // (PendingPackets): the packet and its event are each under 128 bytes,
  // so each length is one varint byte, written after them.
  void slice_packet(const TraceModel& m, Sequence& s, const SliceEvent& slice) {
    auto [ts, begin, name, flow_out, flow_in] = slice;
    static_assert((kTracePacket << 3 | kBytes) < 128 && (packet::kTrackEvent << 3 | kBytes) < 128,
                  "one-byte tags");
    uint8_t local[PendingPackets::kSmall];
    uint8_t* packet = compress ? packets.room_for_small() : local;
    uint8_t* body = put_tag(packet, kTracePacket, kBytes) + 1;
    uint8_t* p = put_uint(body, packet::kTimestamp, ts - s.last_ts);
    s.last_ts = ts;
    // No SEQ_NEEDS_INCREMENTAL_STATE: it only tells a reader of a trace
    // with lost packets what to drop (2 bytes a packet).
    p = put_uint(p, packet::kSequenceId, s.id);
    p = put_tag(p, packet::kTrackEvent, kBytes) + 1;
    uint8_t* event = p;
    p = put_uint(p, event::kType, begin ? event::kSliceBegin : event::kSliceEnd);
    if (begin) p = put_uint(p, event::kNameIid, name);
    if (flow_out != 0) p = put_fixed64(p, event::kFlowIds, flow_out);
    if (flow_in != 0) p = put_fixed64(p, event::kTerminatingFlowIds, flow_in);
    event[-1] = static_cast<uint8_t>(p - event);  // at most 26 bytes
    if (begin && (name >= s.interned.size() || !s.interned[name])) {
      if (name >= s.interned.size()) s.interned.resize(std::max<size_t>(m.strings.size(), name + 1));
      s.interned[name] = true;
      std::string whole(reinterpret_cast<char*>(body), static_cast<size_t>(p - body));
      Message interned, event_name;
      event_name.uint(1, name).bytes(2, m.name(name));
      interned.message(2, event_name);
      Message tail;
      tail.message(packet::kInternedData, interned);
      whole += tail.data();
      append_packet(reinterpret_cast<const uint8_t*>(whole.data()), whole.size());
      return;
    }
    body[-1] = static_cast<uint8_t>(p - body);  // at most 45 bytes: the packet fits kSmall
    if (compress) {
      packets.used += static_cast<size_t>(p - packet);
    } else {
      buf.append(reinterpret_cast<char*>(packet), static_cast<size_t>(p - packet));
    }
    packet_appended();
  }

  void end_until(const TraceModel& m, Sequence& s, uint64_t until) {
    while (!s.open_ends.empty() && s.open_ends.back() <= until) {
      slice_packet(m, s, {s.open_ends.back(), false, 0, 0, 0});
      s.open_ends.pop_back();
    }
  }

  void thread_slices(const TraceModel& m, const analysis::ThreadSlices& t, uint64_t window_end) {
    if (t.first_own >= t.slices.size()) return;
    Sequence& s = sequence(m, t.tid);
    for (size_t i = t.first_own; i < t.slices.size(); ++i) {
      const Slice& sl = t.slices[i];
      uint64_t start = sl.start_ns - base, end = m.end(sl) - base;
      end_until(m, s, start);
      if (!s.open_ends.empty() && end > s.open_ends.back()) {
        end = s.open_ends.back();  // a range that crosses its parent's end
        ++result.clamped_slices;
      }
      uint64_t out = take(flow_starts, t.tid, sl.start_ns), in = take(flow_ends, t.tid, sl.start_ns);
      slice_packet(m, s, {start, true, m.name_id(sl), out, in});
      s.open_ends.push_back(end);
      ++result.slices;
    }
    if (window_end != std::numeric_limits<uint64_t>::max()) end_until(m, s, window_end - base);
  }

  // The flow id at a slice start, once (the outermost slice there takes it).
  static uint64_t take(std::unordered_map<uint64_t, uint64_t>& flows, uint32_t tid, uint64_t ts) {
    if (flows.empty()) return 0;
    auto it = flows.find(key(tid, ts));
    if (it == flows.end()) return 0;
    uint64_t id = it->second;
    flows.erase(it);
    return id;
  }

  // ---- Sequence 1: events with absolute times ----

  Message event_on(uint64_t track, uint64_t type) {
    Message e;
    e.uint(event::kType, type).uint(event::kTrackUuid, track);
    return e;
  }
  void global_event(uint64_t ts, const Message& e) {
    global_packet(Message().uint(packet::kTimestamp, ts - base).message(packet::kTrackEvent, e));
  }
  void global_slice(uint64_t track, uint64_t start, uint64_t end, const std::string& name) {
    Message begin = event_on(track, event::kSliceBegin);
    begin.bytes(23, name);
    global_event(start, begin);
    global_event(end, event_on(track, event::kSliceEnd));
  }

  void others(const TraceModel& m) {
    for (const analysis::Instant& i : m.instants) {
      Message e = event_on(thread_track(m, i.tid), event::kInstant);
      global_event(i.ts_ns, e.bytes(23, m.name(i.name)));
    }
    for (const analysis::CounterSample& c : m.counters) {
      Message e = event_on(counter_track(m, m.name(c.name), c.tid), event::kCounter);
      global_event(c.ts_ns, e.dbl(event::kDoubleCounterValue, c.value));
    }
    for (const analysis::MemoryRecord& r : m.memory) {
      std::string device = analysis::memory_device_name(r.device);
      Message allocated = event_on(counter_track(m, "Memory allocated (" + device + ")", 0), event::kCounter);
      global_event(r.ts_ns, allocated.sint(event::kCounterValue, static_cast<int64_t>(r.total_allocated)));
      Message reserved = event_on(counter_track(m, "Memory reserved (" + device + ")", 0), event::kCounter);
      global_event(r.ts_ns, reserved.sint(event::kCounterValue, static_cast<int64_t>(r.total_reserved)));
    }
    for (const analysis::DataStageSlice& d : m.data_stages) {
      uint64_t end = d.start_ns + d.dur_ns;
      global_slice(on_lane(m, d.tid, "Data pipeline", d.start_ns, end), d.start_ns, end,
                   m.name(d.operation) + " " + m.name(d.stage));
    }
    for (const analysis::CommCall& c : m.comm_calls) {
      bool in_flight = (c.flags & raw::kCommCompletion) != 0;
      global_slice(
          on_lane(m, c.tid, in_flight ? "Communication in flight" : "Communication", c.start_ns, c.end_ns),
          c.start_ns, c.end_ns, m.name(c.name));
    }
    for (const analysis::AsyncRange& a : m.async_ranges) {
      global_slice(on_lane(m, a.begin_tid, "Ranges", a.start_ns, a.end_ns), a.start_ns, a.end_ns,
                   m.name(a.name));
    }
  }

  // The lane of `tid`'s child track `what` that is free at `start`.
  uint64_t on_lane(const TraceModel& m, uint32_t tid, const std::string& what, uint64_t start, uint64_t end) {
    size_t lane = lanes[track_key(kLaneTrack, tid, std::hash<std::string>()(what))].place(start, end);
    return lane_track(m, tid, what, lane);
  }

  // ---- GPU activities (CUPTI), on sequence 1 ----
  //
  // Kernels, copies and sets on a track per device and stream; runtime and
  // driver calls on a "CUDA API" child track of their calling thread (not the
  // thread's own track: its slices are begun and ended on the thread's
  // sequence, and a call mapped from CUPTI's clock may cross an operator's
  // end there, which would unpair them), or, for a thread CUPTI named that
  // never recorded, and for synchronizations, on the process's "CUDA API and
  // synchronization" track. A flow from each launching call to each activity
  // it launched.

  // The track of device `device`, "GPU d": a top-level track, not a
  // process's: a ProcessDescriptor needs a pid, and the device index is a
  // real process's (pid 0 is trace_processor's idle process). Its streams
  // come in their numbers' order.
  uint64_t gpu_track(int32_t device) {
    auto [uuid, added] = uuid_of(track_key(kGpuTrack, static_cast<uint32_t>(device)));
    if (added) {
      Message track;
      track.uint(1, uuid)
          .bytes(2, "GPU " + std::to_string(device))
          .uint(track::kChildOrdering, track::kExplicitOrder);
      global_packet(Message().message(packet::kTrackDescriptor, track));
    }
    return uuid;
  }

  // Stream `stream` of `device`, a child of its GPU's track, in lanes like
  // the threads' child tracks: a stream runs one task at a time, but the
  // mapping from CUPTI's clock may make neighbours overlap by a little.
  uint64_t stream_track(int32_t device, uint32_t stream, uint64_t start, uint64_t end) {
    uint64_t by_stream = static_cast<uint64_t>(stream) << 32;
    size_t lane = lanes[track_key(kStreamTrack, static_cast<uint32_t>(device), by_stream)].place(start, end);
    auto [uuid, added] = uuid_of(track_key(kStreamTrack, static_cast<uint32_t>(device), by_stream | lane));
    if (added) {
      std::string name = "stream " + std::to_string(stream);
      if (lane > 0) name += " #" + std::to_string(lane + 1);
      Message track;
      track.uint(1, uuid)
          .uint(5, gpu_track(device))
          .bytes(2, name)
          .uint(track::kSiblingOrderRank, std::min<uint32_t>(stream, std::numeric_limits<int32_t>::max()));
      global_packet(Message().message(packet::kTrackDescriptor, track));
    }
    return uuid;
  }

  uint64_t gpu_activity_track(const TraceModel& m, const analysis::GpuActivity& a) {
    static const std::string kApi = "CUDA API", kHost = "CUDA API and synchronization";
    if (analysis::is_device_activity(a)) return stream_track(a.device, a.stream, a.start_ns, a.end_ns);
    if (a.kind == raw::EventKind::kGpuApi && a.thread != 0)
      return on_lane(m, a.thread, kApi, a.start_ns, a.end_ns);
    return on_lane(m, 0, kHost, a.start_ns, a.end_ns);
  }

  // Interned once on sequence 1, before the first GPU event: the categories
  // (iid = index + 1) and the debug annotations' names (iid: GpuArg), the
  // same names as trace_view.json's args.
  static constexpr const char* kCategories[] = {"kernel",       "gpu_memcpy",  "gpu_memset",
                                                "cuda_runtime", "cuda_driver", "cuda_sync"};
  enum GpuArg : uint64_t {
    kCorrelationArg = 1,
    kDeviceArg,
    kStreamArg,
    kContextArg,
    kGridArg,
    kBlockArg,
    kRegistersArg,
    kSharedMemoryArg,
    kBytesArg,
    kBandwidthArg,
    kGraphArg,
    kGraphNodeArg,
    kCaptureOperatorArg
  };
  static constexpr const char* kGpuArgNames[] = {"correlation",
                                                 "device",
                                                 "stream",
                                                 "context",
                                                 "grid",
                                                 "block",
                                                 "registers per thread",
                                                 "shared memory",
                                                 "bytes",
                                                 "memory bandwidth (GB/s)",
                                                 "graph id",
                                                 "graph node id",
                                                 "capture operator"};
  void intern_gpu_names() {
    Message interned, entry;
    for (uint64_t i = 0; i < std::size(kCategories); ++i) {
      interned.message(interned::kEventCategories, entry.clear().uint(1, i + 1).bytes(2, kCategories[i]));
    }
    for (uint64_t i = 0; i < std::size(kGpuArgNames); ++i) {
      interned.message(interned::kDebugAnnotationNames,
                       entry.clear().uint(1, i + 1).bytes(2, kGpuArgNames[i]));
    }
    global_packet(Message().message(packet::kInternedData, interned));
  }
  static uint64_t category_iid(const analysis::GpuActivity& a) {
    std::string_view category = gpu_category(a);
    for (uint64_t i = 0; i < std::size(kCategories); ++i) {
      if (category == kCategories[i]) return i + 1;
    }
    return 0;
  }

  void uint_arg(GpuArg name, uint64_t v) {
    gpu_event.message(event::kDebugAnnotations,
                      gpu_arg.clear().uint(annotation::kNameIid, name).uint(annotation::kUintValue, v));
  }
  void triple_arg(GpuArg name, const uint64_t (&v)[3]) {
    gpu_arg.clear().uint(annotation::kNameIid, name);
    for (uint64_t x : v)
      gpu_arg.message(annotation::kArrayValues, gpu_item.clear().uint(annotation::kUintValue, x));
    gpu_event.message(event::kDebugAnnotations, gpu_arg);
  }

  // The args of trace_view.json's GPU events, as debug annotations.
  void gpu_args(const TraceModel& m, const analysis::GpuActivity& a) {
    uint_arg(kCorrelationArg, a.correlation);
    if (a.device >= 0) uint_arg(kDeviceArg, static_cast<uint32_t>(a.device));
    if (a.kind != raw::EventKind::kGpuApi) {
      uint_arg(kStreamArg, a.stream);
      uint_arg(kContextArg, a.context);
    }
    if (a.kind == raw::EventKind::kGpuKernel) {
      if (std::optional<KernelGeometry> g = kernel_geometry(m.name(a.detail))) {
        triple_arg(kGridArg, g->grid);
        triple_arg(kBlockArg, g->block);
        uint_arg(kRegistersArg, g->registers);
        uint_arg(kSharedMemoryArg, g->static_shared + g->dynamic_shared);
      }
    }
    if (a.graph_node != 0) {
      uint_arg(kGraphArg, a.graph);
      uint_arg(kGraphNodeArg, a.graph_node);
      if (uint32_t captured = analysis::graph_capture_operator(m, a); captured != 0) {
        gpu_event.message(event::kDebugAnnotations, gpu_arg.clear()
                                                        .uint(annotation::kNameIid, kCaptureOperatorArg)
                                                        .bytes(annotation::kStringValue, m.name(captured)));
      }
    }
    if (a.kind == raw::EventKind::kGpuMemcpy || a.kind == raw::EventKind::kGpuMemset) {
      uint_arg(kBytesArg, a.bytes);
      double ns = static_cast<double>(std::max<uint64_t>(a.end_ns - a.start_ns, 1));
      gpu_event.message(event::kDebugAnnotations,
                        gpu_arg.clear()
                            .uint(annotation::kNameIid, kBandwidthArg)
                            .dbl(annotation::kDoubleValue, static_cast<double>(a.bytes) / ns));
    }
  }

  void gpu(const TraceModel& m) {
    if (m.gpu.empty()) return;
    intern_gpu_names();
    // Flow ids after the fwdbwd ones: an activity's index + 1, so that each
    // launch -> activity pair has its own (a graph launch starts several).
    std::vector<uint32_t> launches = gpu_launches(m);
    std::vector<std::pair<uint32_t, uint32_t>> launched;  // (launch, activity), by launch
    for (uint32_t i = 0; i < launches.size(); ++i) {
      if (launches[i] != kNoLaunch) launched.emplace_back(launches[i], i);
    }
    std::sort(launched.begin(), launched.end());
    auto next = launched.begin();
    for (uint32_t i = 0; i < m.gpu.size(); ++i) {
      const analysis::GpuActivity& a = m.gpu[i];
      uint64_t track = gpu_activity_track(m, a);
      gpu_event.clear().uint(event::kType, event::kSliceBegin).uint(event::kTrackUuid, track);
      if (a.name != 0) gpu_event.uint(event::kNameIid, a.name);
      gpu_event.uint(event::kCategoryIids, category_iid(a));
      for (; next != launched.end() && next->first == i; ++next) {
        gpu_event.fixed64(event::kFlowIds, gpu_flow_base + next->second + 1);
      }
      if (launches[i] != kNoLaunch) gpu_event.fixed64(event::kTerminatingFlowIds, gpu_flow_base + i + 1);
      gpu_args(m, a);
      gpu_packet.clear()
          .uint(packet::kTimestamp, a.start_ns - base)
          .uint(packet::kSequenceId, 1)
          .message(packet::kTrackEvent, gpu_event);
      if (a.name != 0 && (a.name >= global_interned.size() || !global_interned[a.name])) {
        if (a.name >= global_interned.size())
          global_interned.resize(std::max<size_t>(m.strings.size(), a.name + 1));
        global_interned[a.name] = true;
        Message interned, event_name;
        event_name.uint(1, a.name).bytes(2, m.name(a.name));
        gpu_packet.message(packet::kInternedData, interned.message(interned::kEventNames, event_name));
      }
      append_packet(gpu_packet);
      gpu_event.clear().uint(event::kType, event::kSliceEnd).uint(event::kTrackUuid, track);
      gpu_packet.clear()
          .uint(packet::kTimestamp, a.end_ns - base)
          .uint(packet::kSequenceId, 1)
          .message(packet::kTrackEvent, gpu_event);
      append_packet(gpu_packet);
      ++result.gpu_slices;
    }
  }

  // ---- Python stack samples ----
  //
  // Each sample a PerfSample on sequence 1 at the time the sampler looked,
  // so that Perfetto draws a thread's samples on its track and their stacks
  // as a flame graph. A frame is a function of a file (the file is the
  // frame's mapping, so that same-named functions of two files stay apart);
  // the line is left out, or every line would be a frame of its own.
  void stack_samples(const TraceModel& m) {
    std::unordered_map<uint32_t, uint64_t> callstacks;  // stack string id -> iid
    std::unordered_map<std::string, uint64_t> functions, files;
    std::unordered_map<uint64_t, uint64_t> frames;  // (file iid, function iid) -> frame iid
    Message interned, entry, callstack, perf_sample, packet;
    auto iid = [](auto& table, const auto& key, bool* added) -> uint64_t {
      auto [it, fresh] = table.emplace(key, table.size() + 1);
      *added = fresh;
      return it->second;
    };
    for (const analysis::StackSample& s : m.stack_samples) {
      if (s.end_ns < base) continue;  // before the trace's first event: nothing to draw it beside
      auto [stack, fresh] = callstacks.emplace(s.stack, callstacks.size() + 1);
      if (fresh) {
        std::vector<analysis::StackFrame> parsed = analysis::parse_stack(m.name(s.stack));
        callstack.clear().uint(1, stack->second);
        for (auto f = parsed.rbegin(); f != parsed.rend(); ++f) {  // Perfetto's order: the root first
          bool added = false;
          uint64_t function = iid(functions, f->function, &added);
          if (added)
            interned.message(interned::kFunctionNames, entry.clear().uint(1, function).bytes(2, f->function));
          uint64_t file = iid(files, f->file, &added);
          if (added) {
            interned.message(interned::kMappingPaths, entry.clear().uint(1, file).bytes(2, f->file));
            interned.message(interned::kMappings,
                             entry.clear().uint(1, file).uint(sample::kMappingPathStringIds, file));
          }
          uint64_t frame = iid(frames, file << 32 | function, &added);
          if (added) {
            interned.message(interned::kFrames, entry.clear()
                                                    .uint(1, frame)
                                                    .uint(sample::kFrameFunctionNameId, function)
                                                    .uint(sample::kFrameMappingId, file));
          }
          callstack.uint(sample::kCallstackFrameIds, frame);
        }
        interned.message(interned::kCallstacks, callstack);
      }
      perf_sample.clear()
          .uint(sample::kPid, m.pid)
          .uint(sample::kTid, s.tid)
          .uint(sample::kCallstackIid, stack->second);
      packet.clear().uint(packet::kTimestamp, s.end_ns - base).uint(packet::kSequenceId, 1);
      if (!interned.data().empty()) {
        packet.message(packet::kInternedData, interned);
        interned.clear();
      }
      append_packet(packet.message(packet::kPerfSample, perf_sample));
      ++result.stack_samples;
    }
  }

  OutputFile out;
  bool compress;
  std::string buf;
  PendingPackets packets;  // not compressed yet
  std::string compressed;  // scratch
  // Level 1, the fastest: a tenth of the packets' size on a training run.
  struct FreeCompressor {
    void operator()(libdeflate_compressor* c) const { libdeflate_free_compressor(c); }
  };
  std::unique_ptr<libdeflate_compressor, FreeCompressor> compressor{libdeflate_alloc_compressor(1)};
  uint64_t base = 0;
  uint64_t process = 0;
  uint32_t next_sequence = 2;  // 1: descriptors and absolute-time events
  std::unordered_map<uint32_t, Sequence> sequences;
  std::unordered_map<uint64_t, uint64_t> flow_starts, flow_ends;  // (tid, start) -> flow id
  std::unordered_map<uint64_t, uint64_t> uuids;                   // track key -> uuid
  std::unordered_map<uint64_t, Lanes> lanes;                      // per (thread, what) and (device, stream)
  uint64_t gpu_flow_base = 0;                                     // the fwdbwd flows' ids are 1..this
  std::vector<bool> global_interned;                              // name ids whose iid sequence 1 defined
  Message gpu_event, gpu_arg, gpu_item, gpu_packet;               // rebuilt per GPU event
  uint64_t next_uuid = 1;
  PerfettoTraceResult result;
};

PerfettoTraceWriter::PerfettoTraceWriter(const TraceModel& model, const OutputPath& path,
                                         uint64_t first_slice_ns, bool compress)
    : state_(std::make_unique<State>(model, path, first_slice_ns, compress)) {}

PerfettoTraceWriter::~PerfettoTraceWriter() = default;

void PerfettoTraceWriter::add_window(const TraceModel& m, uint64_t end_ns) {
  for (const analysis::ThreadSlices& t : m.threads) state_->thread_slices(m, t, end_ns);
}

PerfettoTraceResult PerfettoTraceWriter::finish(const TraceModel& m,
                                                const std::vector<analysis::PathSegment>& critical_path) {
  State& st = *state_;
  for (auto& [tid, s] : st.sequences) st.end_until(m, s, std::numeric_limits<uint64_t>::max());
  st.others(m);
  const analysis::PathSegment* drawn = nullptr;
  for (const analysis::PathSegment& s : critical_path) {
    // A run's gaps (the row after it) lie inside its span: drawn with it.
    if (drawn != nullptr && drawn->step == s.step && s.start_ns < drawn->start_ns + drawn->span_ns) continue;
    std::string name = analysis::path_kind_name(s.kind);
    if (s.name != 0) name += ": " + m.name(s.name);
    if (s.count > 1) name += " (x" + std::to_string(s.count) + ")";
    st.global_slice(st.lane_track(m, 0, "Critical path", 0), s.start_ns, s.start_ns + s.span_ns, name);
    drawn = &s;
  }
  st.gpu(m);
  st.stack_samples(m);
  st.flush_packets();
  st.result.bytes = st.out.offset() + st.buf.size();
  if (!st.out.commit(st.buf)) st.result.error = st.out.error();
  return st.result;
}

}  // namespace trainprof::exporter
