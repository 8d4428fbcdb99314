// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/intern.h"

#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace trainprof::core {
namespace {

struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Sharded so that threads interning different names rarely contend. Nodes of
// an unordered_set never move, so c_str() pointers stay valid forever.
struct InternShard {
  std::mutex mu;
  std::unordered_set<std::string, TransparentHash, std::equal_to<>> strings;
};

constexpr size_t kShards = 16;

std::array<InternShard, kShards>& shards() {
  static auto* s = new std::array<InternShard, kShards>();  // never destroyed: used at exit
  return *s;
}

struct DomainTable {
  std::mutex mu;
  std::unordered_map<std::string, uint16_t, TransparentHash, std::equal_to<>> ids;
  std::deque<const char*> names;
};

DomainTable& domains() {
  static auto* t = [] {
    auto* table = new DomainTable();
    table->ids.emplace("default", 0);
    table->names.push_back(detail::intern("default"));
    return table;
  }();
  return *t;
}

const char* intern_shared(std::string_view name, size_t h) {
  InternShard& shard = shards()[h % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.strings.find(name);
  if (it == shard.strings.end()) it = shard.strings.emplace(name).first;
  return it->c_str();
}

// Each thread's cache in front of the shared table (direct-mapped by hash):
// a name this thread interned before is found without a lock or a set
// lookup. A range by runtime name cost 42 ns against 27 ns with a literal
// name; the cache takes most of the difference (docs/PERFORMANCE.md).
struct InternCacheEntry {
  size_t hash = 0;
  size_t size = 0;
  const char* interned = nullptr;
};
constexpr size_t kCacheEntries = 256;
struct InternCache {
  std::array<InternCacheEntry, kCacheEntries> entries;
};

// The fast path reads one initial-exec pointer; the owner frees the cache
// at thread exit and stops later calls (other exit handlers) from making a
// new one.
[[gnu::tls_model("initial-exec")]] thread_local InternCache* tls_cache = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local bool tls_cache_gone = false;
struct InternCacheOwner {
  InternCache* cache = nullptr;
  ~InternCacheOwner() {
    tls_cache = nullptr;
    tls_cache_gone = true;
    delete cache;
  }
};
thread_local InternCacheOwner tls_cache_owner;

}  // namespace

}  // namespace trainprof::core

namespace trainprof::detail {

const char* intern(std::string_view name) {
  size_t h = core::TransparentHash{}(name);
  core::InternCache* cache = core::tls_cache;
  if (cache != nullptr) {
    const core::InternCacheEntry& e = cache->entries[h % core::kCacheEntries];
    if (e.hash == h && e.size == name.size() && e.interned != nullptr &&
        std::memcmp(e.interned, name.data(), name.size()) == 0) {
      return e.interned;
    }
  }
  const char* interned = core::intern_shared(name, h);
  if (cache == nullptr && !core::tls_cache_gone) {
    cache = new (std::nothrow) core::InternCache();
    core::tls_cache_owner.cache = cache;
    core::tls_cache = cache;
  }
  if (cache != nullptr)
    cache->entries[h % core::kCacheEntries] = core::InternCacheEntry{h, name.size(), interned};
  return interned;
}

}  // namespace trainprof::detail

namespace trainprof::core {

size_t interned_count() {
  size_t n = 0;
  for (InternShard& shard : shards()) {
    std::lock_guard<std::mutex> lock(shard.mu);
    n += shard.strings.size();
  }
  return n;
}

uint16_t domain_id(std::string_view domain) {
  DomainTable& t = domains();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(domain);
  if (it != t.ids.end()) return it->second;
  if (t.names.size() >= kDomainOverflow) return kDomainOverflow;
  uint16_t id = static_cast<uint16_t>(t.names.size());
  t.names.push_back(detail::intern(domain));
  t.ids.emplace(std::string(domain), id);
  return id;
}

const char* domain_name(uint16_t id) {
  DomainTable& t = domains();
  std::lock_guard<std::mutex> lock(t.mu);
  return id < t.names.size() ? t.names[id] : nullptr;
}

// domain_id() interns while it holds the domain table's lock: that lock first.
void intern_lock_for_fork() {
  domains().mu.lock();
  for (InternShard& shard : shards()) shard.mu.lock();
}

void intern_unlock_after_fork() {
  for (InternShard& shard : shards()) shard.mu.unlock();
  domains().mu.unlock();
}

}  // namespace trainprof::core
