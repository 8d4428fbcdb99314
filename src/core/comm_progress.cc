// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// core/comm_progress.h: a fixed table under a lock, so that noting a collective
// never allocates.
#include "core/comm_progress.h"

#include <array>
#include <mutex>

#include "core/clock.h"

namespace trainprof::core {
namespace {

struct Entry {
  const char* group = nullptr;
  int64_t entered = -1;
  int64_t returned = -1;
  const char* entered_name = nullptr;
  uint64_t entered_realtime_ns = 0;
};

constexpr size_t kMaxGroups = 64;

struct Table {
  std::mutex mu;
  std::array<Entry, kMaxGroups> entries;
  size_t used = 0;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: collectives may run during exit
  return *t;
}

// The entry of `group`, made when there is room; nullptr otherwise. Under mu.
Entry* entry_of(Table& t, const char* group) {
  for (size_t i = 0; i < t.used; ++i) {
    if (t.entries[i].group == group) return &t.entries[i];
  }
  if (t.used == kMaxGroups) return nullptr;
  Entry& e = t.entries[t.used++];
  e = Entry{};
  e.group = group;
  return &e;
}

}  // namespace

void collective_entered(const char* group, uint32_t sequence, const char* name) noexcept {
  if (group == nullptr) return;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (Entry* e = entry_of(t, group)) {
    e->entered = sequence;
    e->entered_name = name;
    e->entered_realtime_ns = detail::realtime_now_ns();
  }
}

void collective_returned(const char* group, uint32_t sequence) noexcept {
  if (group == nullptr) return;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (Entry* e = entry_of(t, group); e != nullptr && static_cast<int64_t>(sequence) > e->returned) {
    e->returned = sequence;
  }
}

std::vector<GroupProgress> comm_progress() {
  Table& t = table();
  std::vector<GroupProgress> out;
  std::lock_guard<std::mutex> lock(t.mu);
  out.reserve(t.used);
  for (size_t i = 0; i < t.used; ++i) {
    const Entry& e = t.entries[i];
    out.push_back(GroupProgress{e.group, e.entered, e.returned, e.entered_name ? e.entered_name : "",
                                e.entered_realtime_ns});
  }
  return out;
}

void reset_comm_progress_for_testing() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.used = 0;
}

}  // namespace trainprof::core
