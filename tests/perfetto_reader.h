// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// A minimal protobuf walker for the tests that read trainprof's Perfetto traces
// back (trace_view.pftrace): the fields of a message, the trace's packets with
// compressed batches inflated, and the slices of sequence 1 (absolute times)
// with their tracks, interned names, categories, debug annotations and flows.
#ifndef TRAINPROF_TESTS_PERFETTO_READER_H_
#define TRAINPROF_TESTS_PERFETTO_READER_H_

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace trainprof::test {

// A protobuf message's fields: (number, varint or the bytes of a
// length-delimited field); fixed64 fields as varints of their value.
struct Field {
  uint32_t number;
  uint64_t value = 0;
  std::string bytes;
};

inline uint64_t varint(const std::string& s, size_t* at) {
  uint64_t v = 0;
  for (int shift = 0; *at < s.size(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(s[(*at)++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  return v;
}

inline std::vector<Field> fields(const std::string& s) {
  std::vector<Field> out;
  for (size_t at = 0; at < s.size();) {
    uint64_t tag = varint(s, &at);
    Field f{static_cast<uint32_t>(tag >> 3), 0, {}};
    switch (tag & 7) {
      case 0: f.value = varint(s, &at); break;
      case 1:
        for (int i = 0; i < 8; ++i)
          f.value |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
        at += 8;
        break;
      case 2: {
        size_t n = varint(s, &at);
        f.bytes = s.substr(at, n);
        at += n;
        break;
      }
      default: ADD_FAILURE() << "wire type " << (tag & 7); return out;
    }
    out.push_back(f);
  }
  return out;
}

inline const Field* find(const std::vector<Field>& fs, uint32_t number) {
  for (const Field& f : fs)
    if (f.number == number) return &f;
  return nullptr;
}

// The trace's packets, compressed batches inflated.
inline std::vector<std::string> packets(const std::string& trace, int* batches) {
  std::vector<std::string> out;
  for (const Field& p : fields(trace)) {
    EXPECT_EQ(p.number, 1u);  // Trace.packet
    std::vector<Field> packet = fields(p.bytes);
    if (const Field* c = find(packet, 50)) {
      ++*batches;
      std::string inflated(64 << 20, '\0');
      uLongf size = inflated.size();
      EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(inflated.data()), &size,
                           reinterpret_cast<const Bytef*>(c->bytes.data()), c->bytes.size()),
                Z_OK);
      inflated.resize(size);
      for (const Field& inner : fields(inflated)) out.push_back(inner.bytes);
    } else {
      out.push_back(p.bytes);
    }
  }
  return out;
}

// A track descriptor's parts the tests look at.
struct TrackInfo {
  uint64_t parent = 0;
  std::string name;
  uint64_t tid = 0;  // a thread's track
  uint64_t pid = 0;  // a process's or a thread's
  uint64_t child_ordering = 0;
  uint64_t sibling_order_rank = 0;
};

// A slice of sequence 1, begun and ended on one track.
struct GlobalSlice {
  uint64_t track = 0;
  uint64_t start = 0, end = 0;
  std::string name, category;
  std::vector<uint64_t> flows_out, flows_in;
  // Debug annotations as text: unsigned numbers, strings, arrays "a,b,c", doubles "%.6f".
  std::map<std::string, std::string> args;
};

struct GlobalEvents {
  std::map<uint64_t, TrackInfo> tracks;  // by uuid
  std::vector<GlobalSlice> slices;       // in begin order
  // The track's name with its parents', outermost first: "GPU 0/stream 7".
  std::string path(uint64_t uuid) const {
    auto it = tracks.find(uuid);
    if (it == tracks.end()) return "?";
    return it->second.parent != 0 ? path(it->second.parent) + "/" + it->second.name : it->second.name;
  }
  std::vector<const GlobalSlice*> named(const std::string& name) const {
    std::vector<const GlobalSlice*> out;
    for (const GlobalSlice& s : slices)
      if (s.name == name) out.push_back(&s);
    return out;
  }
};

inline std::string annotation_text(const std::vector<Field>& a) {
  if (const Field* v = find(a, 3)) return std::to_string(v->value);  // uint_value
  if (const Field* v = find(a, 6)) return v->bytes;                  // string_value
  if (const Field* v = find(a, 5)) {                                 // double_value
    double d;
    std::memcpy(&d, &v->value, sizeof(d));
    char text[40];
    std::snprintf(text, sizeof(text), "%.6f", d);
    return text;
  }
  std::string items;
  for (const Field& item : a) {
    if (item.number != 12) continue;  // array_values
    items += (items.empty() ? "" : ",") + annotation_text(fields(item.bytes));
  }
  return items;
}

// Track descriptors, and the slices of sequence 1 paired per track in time
// order (ties in file order, as trace_processor sorts), with their names
// and annotation names read through sequence 1's interned data.
inline GlobalEvents read_global_events(const std::vector<std::string>& ps) {
  GlobalEvents out;
  std::map<uint64_t, std::string> names, categories, arg_names;
  struct Pending {
    uint64_t ts;
    size_t order;
    std::vector<Field> event;
  };
  std::vector<Pending> events;
  for (const std::string& p : ps) {
    std::vector<Field> f = fields(p);
    if (const Field* d = find(f, 60)) {
      std::vector<Field> t = fields(d->bytes);
      TrackInfo info;
      for (const Field& x : t) {
        if (x.number == 2) info.name = x.bytes;
        if (x.number == 5) info.parent = x.value;
        if (x.number == 11) info.child_ordering = x.value;
        if (x.number == 12) info.sibling_order_rank = x.value;
        if (x.number == 3 || x.number == 4) {
          std::vector<Field> desc = fields(x.bytes);
          if (const Field* pid = find(desc, 1)) info.pid = pid->value;
          if (x.number == 4 && find(desc, 2) != nullptr) info.tid = find(desc, 2)->value;
          if (const Field* name = find(desc, x.number == 3 ? 6 : 5)) info.name = name->bytes;
        }
      }
      out.tracks[find(t, 1)->value] = info;
    }
    const Field* seq = find(f, 10);
    if (seq == nullptr || seq->value != 1) continue;
    if (const Field* interned = find(f, 12)) {
      for (const Field& n : fields(interned->bytes)) {
        std::vector<Field> entry = fields(n.bytes);
        std::map<uint64_t, std::string>* table = n.number == 1   ? &categories
                                                 : n.number == 2 ? &names
                                                 : n.number == 3 ? &arg_names
                                                                 : nullptr;
        if (table != nullptr) (*table)[find(entry, 1)->value] = find(entry, 2)->bytes;
      }
    }
    if (const Field* te = find(f, 11)) {
      events.push_back({find(f, 8) != nullptr ? find(f, 8)->value : 0, events.size(), fields(te->bytes)});
    }
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Pending& a, const Pending& b) { return a.ts < b.ts; });
  std::map<uint64_t, std::vector<size_t>> open;  // track -> indices into out.slices
  for (const Pending& p : events) {
    const std::vector<Field>& e = p.event;
    uint64_t type = find(e, 9)->value;
    uint64_t track = find(e, 11) != nullptr ? find(e, 11)->value : 0;
    if (type == 1) {
      GlobalSlice s;
      s.track = track;
      s.start = p.ts;
      for (const Field& x : e) {
        if (x.number == 10) s.name = names[x.value];
        if (x.number == 23) s.name = x.bytes;
        if (x.number == 3) s.category = categories[x.value];
        if (x.number == 47) s.flows_out.push_back(x.value);
        if (x.number == 48) s.flows_in.push_back(x.value);
        if (x.number == 4) {
          std::vector<Field> a = fields(x.bytes);
          std::string name = find(a, 1) != nullptr ? arg_names[find(a, 1)->value] : find(a, 10)->bytes;
          s.args[name] = annotation_text(a);
        }
      }
      open[track].push_back(out.slices.size());
      out.slices.push_back(s);
    } else if (type == 2) {
      EXPECT_FALSE(open[track].empty()) << "an end without a begin on track " << track;
      if (open[track].empty()) continue;
      out.slices[open[track].back()].end = p.ts;
      open[track].pop_back();
    }
  }
  for (const auto& entry : open) EXPECT_TRUE(entry.second.empty()) << "track " << entry.first << " left open";
  return out;
}

}  // namespace trainprof::test

#endif  // TRAINPROF_TESTS_PERFETTO_READER_H_
