// Copyright trainprof authors.
#include "core/intern.h"

#include <array>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace trainprof::detail {
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
    table->names.push_back(intern("default"));
    return table;
  }();
  return *t;
}

}  // namespace

const char* intern(std::string_view name) {
  size_t h = TransparentHash{}(name);
  InternShard& shard = shards()[h % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.strings.find(name);
  if (it == shard.strings.end()) it = shard.strings.emplace(name).first;
  return it->c_str();
}

uint16_t domain_id(std::string_view domain) {
  DomainTable& t = domains();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(domain);
  if (it != t.ids.end()) return it->second;
  if (t.names.size() >= kDomainOverflow) return kDomainOverflow;
  uint16_t id = static_cast<uint16_t>(t.names.size());
  t.names.push_back(intern(domain));
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

}  // namespace trainprof::detail
