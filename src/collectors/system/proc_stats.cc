// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "collectors/system/proc_stats.h"

#include <charconv>

namespace trainprof::system {
namespace {

// Splits text into lines and lines into blank-separated fields, without
// copying.
class Fields {
 public:
  explicit Fields(std::string_view text) : rest_(text) {}
  // The next field of this line; "" at its end.
  std::string_view next() {
    size_t i = 0;
    while (i < rest_.size() && (rest_[i] == ' ' || rest_[i] == '\t')) ++i;
    size_t j = i;
    while (j < rest_.size() && rest_[j] != ' ' && rest_[j] != '\t' && rest_[j] != '\n') ++j;
    std::string_view field = rest_.substr(i, j - i);
    rest_ = rest_.substr(j);
    return field;
  }
  bool number(uint64_t* out) {
    std::string_view f = next();
    auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), *out);
    return ec == std::errc() && end == f.data() + f.size() && !f.empty();
  }

 private:
  std::string_view rest_;
};

// Calls line(text) for each line of text; stops when it returns false.
template <typename F>
void for_each_line(std::string_view text, F line) {
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view l = text.substr(0, end);
    if (!line(l)) return;
    if (end == std::string_view::npos) return;
    text = text.substr(end + 1);
  }
}

bool cpu_line(std::string_view line, CpuTicks* ticks) {
  Fields f(line);
  f.next();            // "cpu" or "cpuN"
  uint64_t v[8] = {};  // user nice system idle iowait irq softirq steal
  for (uint64_t& x : v) {
    if (!f.number(&x)) return false;
  }
  ticks->busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  ticks->total = ticks->busy + v[3] + v[4];
  return true;
}

bool is_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// sda1 of sda, nvme0n1p2 of nvme0n1, mmcblk0p1 of mmcblk0.
bool is_partition_of(std::string_view name, std::string_view disk) {
  if (name.size() <= disk.size() || name.substr(0, disk.size()) != disk) return false;
  std::string_view rest = name.substr(disk.size());
  if (rest[0] == 'p') rest.remove_prefix(1);
  return is_digits(rest);
}

bool is_virtual_disk(std::string_view name) {
  for (std::string_view prefix : {"loop", "ram", "zram", "dm-", "md"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// The name (third field) of a diskstats line.
std::string_view disk_name(std::string_view line) {
  Fields f(line);
  f.next();
  f.next();
  return f.next();
}

}  // namespace

bool parse_proc_stat(std::string_view text, CpuTicks* all, std::vector<CpuTicks>* cores) {
  cores->clear();
  bool found = false;
  for_each_line(text, [&](std::string_view line) {
    if (line.substr(0, 3) != "cpu") return false;  // the cpu lines come first
    CpuTicks ticks;
    if (!cpu_line(line, &ticks)) return false;  // cut short by the reader's buffer
    if (line.size() > 3 && line[3] == ' ') {
      *all = ticks;
      found = true;
    } else {
      cores->push_back(ticks);
    }
    return true;
  });
  return found;
}

bool parse_process_cpu_ticks(std::string_view text, uint64_t* ticks) {
  size_t close = text.rfind(')');
  if (close == std::string_view::npos) return false;
  Fields f(text.substr(close + 1));
  for (int field = 3; field < 14; ++field) {
    if (f.next().empty()) return false;
  }
  uint64_t utime = 0, stime = 0;
  if (!f.number(&utime) || !f.number(&stime)) return false;
  *ticks = utime + stime;
  return true;
}

bool parse_meminfo(std::string_view text, MemInfo* info) {
  bool total = false, available = false;
  for_each_line(text, [&](std::string_view line) {
    Fields f(line);
    std::string_view key = f.next();
    if (key == "MemTotal:") total = f.number(&info->total_kib);
    if (key == "MemAvailable:") available = f.number(&info->available_kib);
    return !(total && available);
  });
  return total && available && info->available_kib <= info->total_kib;
}

bool parse_statm_resident_pages(std::string_view text, uint64_t* pages) {
  Fields f(text);
  uint64_t size = 0;
  return f.number(&size) && f.number(pages);
}

bool parse_diskstats(std::string_view text, DiskBytes* bytes) {
  *bytes = DiskBytes{};
  bool any = false;
  // The kernel lists each disk right before its partitions: one pass,
  // comparing each name with the last whole disk's.
  std::string_view disk;
  for_each_line(text, [&](std::string_view line) {
    std::string_view name = disk_name(line);
    if (name.empty() || is_virtual_disk(name)) return true;
    if (!disk.empty() && is_partition_of(name, disk)) return true;
    disk = name;
    Fields f(line);
    f.next();
    f.next();
    f.next();
    uint64_t v[7] = {};  // reads, reads merged, sectors read, ms, writes, writes merged, sectors written
    for (uint64_t& x : v) {
      if (!f.number(&x)) return true;  // a cut line: not counted
    }
    bytes->read += v[2] * 512;
    bytes->written += v[6] * 512;
    any = true;
    return true;
  });
  return any;
}

bool parse_net_dev(std::string_view text, NetBytes* bytes) {
  *bytes = NetBytes{};
  bool any = false;
  for_each_line(text, [&](std::string_view line) {
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return true;  // the two header lines
    Fields name(line.substr(0, colon));
    if (name.next() == "lo") return true;
    Fields f(line.substr(colon + 1));
    uint64_t v[9] = {};  // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes
    for (uint64_t& x : v) {
      if (!f.number(&x)) return true;
    }
    bytes->received += v[0];
    bytes->sent += v[8];
    any = true;
    return true;
  });
  return any;
}

}  // namespace trainprof::system
