// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The protobuf encoding of Perfetto's trace format, as much as trainprof's
// traces use (trace_view.pftrace, cluster_trace_view.pftrace): varints and
// length-delimited fields written by hand, and the field numbers of
// perfetto/trace/trace_packet.proto, track_event/track_event.proto,
// track_descriptor.proto and their parts.
#ifndef TRAINPROF_EXPORTER_PERFETTO_PROTO_H_
#define TRAINPROF_EXPORTER_PERFETTO_PROTO_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace trainprof::exporter::perfetto_proto {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2 };

inline uint8_t* put_varint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}
inline uint8_t* put_tag(uint8_t* p, uint32_t field, WireType type) {
  return put_varint(p, (static_cast<uint64_t>(field) << 3) | type);
}
inline uint8_t* put_uint(uint8_t* p, uint32_t field, uint64_t v) {
  return put_varint(put_tag(p, field, kVarint), v);
}
inline uint8_t* put_fixed64(uint8_t* p, uint32_t field, uint64_t v) {
  p = put_tag(p, field, kFixed64);
  for (int i = 0; i < 8; ++i) *p++ = static_cast<uint8_t>(v >> (8 * i));
  return p;
}

// A message being built (the uncommon packets: descriptors, interned names,
// events with absolute times).
class Message {
 public:
  Message& uint(uint32_t field, uint64_t v) {
    uint8_t b[20];
    bytes_.append(reinterpret_cast<char*>(b), static_cast<size_t>(put_uint(b, field, v) - b));
    return *this;
  }
  Message& sint(uint32_t field, int64_t v) {
    return uint(field, static_cast<uint64_t>(v));
  }  // int64: two's complement
  Message& fixed64(uint32_t field, uint64_t v) {
    uint8_t b[20];
    bytes_.append(reinterpret_cast<char*>(b), static_cast<size_t>(put_fixed64(b, field, v) - b));
    return *this;
  }
  Message& dbl(uint32_t field, double v) {
    uint64_t bits;
    static_assert(sizeof(bits) == sizeof(v));
    std::memcpy(&bits, &v, sizeof(v));
    return fixed64(field, bits);
  }
  Message& bytes(uint32_t field, std::string_view v) {
    uint8_t b[20];
    uint8_t* p = put_varint(put_tag(b, field, kBytes), v.size());
    bytes_.append(reinterpret_cast<char*>(b), static_cast<size_t>(p - b));
    bytes_ += v;
    return *this;
  }
  Message& message(uint32_t field, const Message& m) { return bytes(field, m.bytes_); }
  // Empty again, keeping the buffer: a message rebuilt for every event of a
  // kind allocates once.
  Message& clear() {
    bytes_.clear();
    return *this;
  }
  const std::string& data() const { return bytes_; }

 private:
  std::string bytes_;
};

// Field numbers.
constexpr uint32_t kTracePacket = 1;  // Trace.packet
namespace packet {
constexpr uint32_t kClockSnapshot = 6, kTimestamp = 8, kSequenceId = 10, kTrackEvent = 11, kInternedData = 12,
                   kSequenceFlags = 13, kCompressedPackets = 50, kDefaults = 59, kTrackDescriptor = 60,
                   kPerfSample = 66;
}  // namespace packet
namespace event {
constexpr uint32_t kCategoryIids = 3, kDebugAnnotations = 4, kType = 9, kNameIid = 10, kTrackUuid = 11,
                   kCounterValue = 30, kDoubleCounterValue = 44, kFlowIds = 47, kTerminatingFlowIds = 48;
constexpr uint64_t kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4;
}  // namespace event
namespace interned {  // InternedData
constexpr uint32_t kEventCategories = 1, kEventNames = 2, kDebugAnnotationNames = 3, kFunctionNames = 5,
                   kFrames = 6, kCallstacks = 7, kMappingPaths = 17, kMappings = 19;
}  // namespace interned
namespace sample {  // PerfSample, and the stacks it names (profile_common.proto)
constexpr uint32_t kPid = 2, kTid = 3, kCallstackIid = 4;
constexpr uint32_t kFrameFunctionNameId = 2, kFrameMappingId = 3;  // Frame (iid: 1)
constexpr uint32_t kCallstackFrameIds = 2;                         // Callstack (iid: 1), root first
constexpr uint32_t kMappingPathStringIds = 7;                      // Mapping (iid: 1)
}  // namespace sample
namespace annotation {  // DebugAnnotation
constexpr uint32_t kNameIid = 1, kUintValue = 3, kDoubleValue = 5, kStringValue = 6, kArrayValues = 12;
}  // namespace annotation
namespace track {  // TrackDescriptor
constexpr uint32_t kChildOrdering = 11, kSiblingOrderRank = 12;
constexpr uint64_t kExplicitOrder = 3;  // ChildTracksOrdering.EXPLICIT: by sibling_order_rank
}  // namespace track
constexpr uint64_t kIncrementalStateCleared = 1;
constexpr uint32_t kBootTime = 6, kThreadClock = 64;  // 64: the first sequence-scoped clock id

// A TracePacket (`body`) as a Trace.packet field, appended to `out`.
inline void append_packet(std::string& out, const Message& body) {
  uint8_t head[12];
  uint8_t* p = put_varint(put_tag(head, kTracePacket, kBytes), body.data().size());
  out.append(reinterpret_cast<char*>(head), static_cast<size_t>(p - head));
  out += body.data();
}

}  // namespace trainprof::exporter::perfetto_proto

#endif  // TRAINPROF_EXPORTER_PERFETTO_PROTO_H_
