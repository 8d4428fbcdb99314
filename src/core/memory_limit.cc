// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/memory_limit.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace trainprof::core {
namespace {

// First number in a small text file; 0 when absent or "max".
uint64_t read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(word.c_str(), &end, 10);
  return end != nullptr && *end == '\0' ? v : 0;
}

// A field of /proc/meminfo ("MemAvailable:"), bytes; 0 when absent.
uint64_t meminfo_bytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) != 0) continue;
    std::istringstream fields(line.substr(field.size()));
    uint64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

// The process's cgroup path: "0::/path" (v2) or "N:memory:/path" (v1).
std::string cgroup_path(bool v2) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (v2 && line.rfind("0::", 0) == 0) return line.substr(3);
    size_t colon = line.find(':');
    if (!v2 && colon != std::string::npos && line.compare(colon, 8, ":memory:") == 0)
      return line.substr(colon + 8);
  }
  return "";
}

// Room left under the cgroup's limit, or 0 when no limit is set; its
// limit in `*limit_bytes`.
uint64_t cgroup_room(std::string* limit_file, uint64_t* limit_bytes = nullptr) {
  struct Files {
    bool v2;
    const char* root;
    const char* limit;
    const char* usage;
  };
  static const Files kFiles[] = {
      {true, "/sys/fs/cgroup", "memory.max", "memory.current"},
      {false, "/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"},
  };
  for (const Files& f : kFiles) {
    std::string path = cgroup_path(f.v2);
    if (path.empty()) continue;
    // Inside a container the cgroup namespace roots the path at "/".
    for (std::string dir = std::string(f.root) + (path == "/" ? "" : path);;) {
      uint64_t limit = read_number(dir + "/" + f.limit);
      // v1 reports "no limit" as a huge number.
      if (limit > 0 && limit < (1ull << 60)) {
        uint64_t usage = read_number(dir + "/" + f.usage);
        *limit_file = dir + "/" + f.limit;
        if (limit_bytes != nullptr) *limit_bytes = limit;
        return limit > usage ? limit - usage : 1;
      }
      if (dir.size() <= std::string(f.root).size()) break;
      dir = dir.substr(0, dir.rfind('/'));  // a parent's limit binds too
    }
  }
  return 0;
}

}  // namespace

MemoryRoom memory_room() {
  MemoryRoom room;
  room.mem_available = meminfo_bytes("MemAvailable:");
  room.cgroup_room = cgroup_room(&room.cgroup_limit_file);
  room.bytes = room.mem_available;
  if (room.cgroup_room > 0 && (room.bytes == 0 || room.cgroup_room < room.bytes))
    room.bytes = room.cgroup_room;
  if (room.bytes == 0) room.bytes = 1ull << 62;  // nothing known: no cap
  return room;
}

uint64_t buffer_cap_bytes(MemoryRoom* room_out) {
  MemoryRoom room = memory_room();
  if (const char* forced = std::getenv("TRAINPROF_TEST_MEMORY_ROOM_MB")) {
    room.bytes = std::strtoull(forced, nullptr, 10) << 20;
  }
  if (room_out != nullptr) *room_out = room;
  return std::max<uint64_t>(room.bytes / kBufferShareDivisor, 1ull << 20);
}

MemoryLimit memory_limit() {
  MemoryLimit out;
  std::string file;
  cgroup_room(&file, &out.bytes);
  out.source = "cgroup memory limit";
  if (out.bytes == 0) {
    out.bytes = meminfo_bytes("MemTotal:");
    out.source = "machine's memory";
  }
  if (const char* forced = std::getenv("TRAINPROF_TEST_MEMORY_LIMIT_MB")) {
    out.bytes = std::strtoull(forced, nullptr, 10) << 20;
    out.source = "cgroup memory limit";
  }
  return out;
}

}  // namespace trainprof::core
