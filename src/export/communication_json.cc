// Copyright trainprof authors.
#include "export/communication_json.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

namespace trainprof::exporter {
namespace {

using analysis::CollectiveTiming;
using nlohmann::json;

// The transports the seeds list, always all of them; MPI within one host
// moves through shared memory (counted as SDMA, the seeds' on-node copies),
// between hosts through the network (RDMA).
constexpr const char* kTransports[] = {"RDMA", "HCCS", "PCIE", "SDMA", "SIO"};

double round4(double v) {
  return std::round(v * 1e4) / 1e4;
}

double ms(uint64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

struct Totals {
  double elapse = 0, transit = 0, wait = 0;
  std::map<std::string, std::pair<double, double>> by_transport;  // MB, ms
};

json time_info(double start_us, double elapse, double transit, double wait) {
  double ratio = wait + transit > 0 ? round4(wait / (wait + transit)) : 0;
  return {{"Start Timestamp(us)", start_us},
          {"Elapse Time(ms)", elapse},
          {"Transit Time(ms)", transit},
          {"Wait Time(ms)", wait},
          {"Synchronization Time(ms)", wait},  // a collective's wait is all before its transfer
          {"Idle Time(ms)", std::max(0.0, elapse - transit - wait)},
          {"Wait Time Ratio", ratio},
          {"Synchronization Time Ratio", ratio}};
}

json bandwidth_info(const std::map<std::string, std::pair<double, double>>& by_transport, bool with_sizes,
                    const std::map<std::string, json>& distributions) {
  json out = json::object();
  for (const char* t : kTransports) {
    auto it = by_transport.find(t);
    double mb = it != by_transport.end() ? it->second.first : 0,
           time = it != by_transport.end() ? it->second.second : 0;
    json entry = {{"Transit Size(MB)", mb},
                  {"Transit Time(ms)", time},
                  {"Bandwidth(GB/s)", time > 0 ? round4(mb / time) : 0}};
    if (with_sizes) {
      entry["Large Packet Ratio"] = 0;
      auto d = distributions.find(t);
      entry["Size Distribution"] = d != distributions.end() ? d->second : json::object();
    }
    out[t] = entry;
  }
  return out;
}

std::string op_key(const CollectiveTiming& t) {
  return t.operation + "_" + std::to_string(t.sequence) + "@" + t.group;
}

std::string step_key(const CollectiveTiming& t) {
  return t.step >= 0 ? "step" + std::to_string(t.step) : "step";
}

json op_info(const CollectiveTiming& t, Totals* totals) {
  double elapse = ms(t.end_ns - std::min(t.start_ns, t.end_ns)), wait = ms(t.wait_ns);
  double transit = std::max(0.0, elapse - wait);
  double mb = static_cast<double>(t.bytes) / 1e6;
  std::string transport = t.one_host ? "SDMA" : "RDMA";
  totals->elapse += elapse;
  totals->transit += transit;
  totals->wait += wait;
  totals->by_transport[transport].first += mb;
  totals->by_transport[transport].second += transit;
  std::map<std::string, std::pair<double, double>> mine = {{transport, {mb, transit}}};
  json distribution = json::object();
  char size[32];
  std::snprintf(size, sizeof(size), "%g", mb);
  distribution[size] = json::array({1, transit});
  return {
      {"Communication Time Info", time_info(static_cast<double>(t.start_ns) / 1e3, elapse, transit, wait)},
      {"Communication Bandwidth Info", bandwidth_info(mine, true, {{transport, distribution}})}};
}

json total_info(const Totals& t) {
  json time = time_info(0, t.elapse, t.transit, t.wait);
  time.erase("Start Timestamp(us)");
  json bandwidth = bandwidth_info(t.by_transport, true, {});
  for (auto& [name, entry] : bandwidth.items()) entry.erase("Large Packet Ratio");
  return {{"Communication Time Info", time}, {"Communication Bandwidth Info", bandwidth}};
}

std::string group_tuple(const std::vector<int32_t>& ranks) {
  std::string out = "(";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  return out + (ranks.size() == 1 ? ",)" : ")");
}

}  // namespace

std::string cluster_communication_json(const std::vector<CollectiveTiming>& timings) {
  json out = json::object();
  std::map<std::tuple<std::string, std::string, std::string, int>, Totals>
      totals;  // (tuple, step, group, rank)
  for (const CollectiveTiming& t : timings) {
    std::string tuple = group_tuple(t.group_ranks), step = step_key(t);
    out[tuple][step][op_key(t)][std::to_string(t.rank)] = op_info(t, &totals[{tuple, step, t.group, t.rank}]);
  }
  for (const auto& [key, total] : totals) {
    const auto& [tuple, step, group, rank] = key;
    out[tuple][step]["Total Op Info@" + group][std::to_string(rank)] = total_info(total);
  }
  return out.dump(1) + "\n";
}

}  // namespace trainprof::exporter
