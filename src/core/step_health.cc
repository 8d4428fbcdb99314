// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/step_health.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>

#include "base/string_format.h"
#include "core/clock.h"
#include "trainprof/frontend.h"

namespace trainprof::core {
namespace {

std::atomic<uint64_t> g_data_wait_ticks{0};
std::atomic<uint64_t> g_comm_ticks{0};

uint64_t ticks_to_ns(uint64_t ticks) {
  return static_cast<uint64_t>(static_cast<double>(ticks) / ticks_per_ns());
}

uint64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void append_metric(std::string& out, const char* name, const char* type, const char* help,
                   const std::string& labels, double value) {
  char line[512];
  std::snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.9g\n", name, help, name, type, name,
                labels.c_str(), value);
  out += line;
}

}  // namespace

void add_data_wait_ticks(uint64_t ticks) noexcept {
  g_data_wait_ticks.fetch_add(ticks, std::memory_order_relaxed);
}

void add_comm_ticks(uint64_t ticks) noexcept {
  g_comm_ticks.fetch_add(ticks, std::memory_order_relaxed);
}

HealthSeries::HealthSeries(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

HealthSeries::~HealthSeries() {
  if (schedstat_fd_ >= 0) ::close(schedstat_fd_);
}

bool HealthSeries::read_thread_schedstat(uint64_t* on_cpu_ns, uint64_t* waiting_ns) {
  long tid = ::syscall(SYS_gettid);
  if (tid != schedstat_tid_) {
    if (schedstat_fd_ >= 0) ::close(schedstat_fd_);
    schedstat_fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    schedstat_tid_ = tid;
  }
  if (schedstat_fd_ < 0) return false;
  // The file is made anew at each read from its start: one pread, no reopen.
  char text[96];
  ssize_t n = ::pread(schedstat_fd_, text, sizeof(text) - 1, 0);
  if (n <= 0) return false;
  text[n] = '\0';
  unsigned long long on_cpu = 0, waiting = 0;
  if (std::sscanf(text, "%llu %llu", &on_cpu, &waiting) != 2) return false;
  *on_cpu_ns = on_cpu;
  *waiting_ns = waiting;
  return true;
}

void HealthSeries::start() {
  data_wait_ticks_at_ = g_data_wait_ticks.load(std::memory_order_relaxed);
  comm_ticks_at_ = g_comm_ticks.load(std::memory_order_relaxed);
  cpu_ns_at_ = process_cpu_ns();
  thread_known_ = read_thread_schedstat(&thread_cpu_ns_at_, &thread_wait_ns_at_);
}

const StepHealth& HealthSeries::on_step(int64_t step, uint64_t step_ns) {
  uint64_t data_wait = g_data_wait_ticks.load(std::memory_order_relaxed);
  uint64_t comm = g_comm_ticks.load(std::memory_order_relaxed);
  uint64_t cpu = process_cpu_ns();
  long tid_before = schedstat_tid_;
  uint64_t thread_cpu = 0, thread_wait = 0;
  bool thread_read = read_thread_schedstat(&thread_cpu, &thread_wait);
  StepHealth h;
  h.step = step;
  h.end_realtime_ns = detail::realtime_now_ns();
  h.step_ns = step_ns;
  h.data_wait_ns = ticks_to_ns(data_wait - data_wait_ticks_at_);
  h.comm_ns = ticks_to_ns(comm - comm_ticks_at_);
  h.cpu_ns = cpu - cpu_ns_at_;
  data_wait_ticks_at_ = data_wait;
  comm_ticks_at_ = comm;
  cpu_ns_at_ = cpu;
  // Known when the same thread ended the step before too.
  if (thread_read && thread_known_ && tid_before == schedstat_tid_ && thread_cpu >= thread_cpu_ns_at_ &&
      thread_wait >= thread_wait_ns_at_) {
    h.thread_cpu_ns = thread_cpu - thread_cpu_ns_at_;
    h.thread_cpu_wait_ns = thread_wait - thread_wait_ns_at_;
  }
  thread_known_ = thread_read;
  thread_cpu_ns_at_ = thread_cpu;
  thread_wait_ns_at_ = thread_wait;
  // What was reported of it while it ran; reports for steps before it that
  // never ended (not kept) are dropped.
  if (auto it = ahead_.find(step); it != ahead_.end()) {
    h.loss = it->second.loss;
    h.gradient_norm = it->second.gradient_norm;
  }
  ahead_.erase(ahead_.begin(), ahead_.upper_bound(step));
  totals_.step += 1;
  totals_.end_realtime_ns = h.end_realtime_ns;
  totals_.step_ns += h.step_ns;
  totals_.data_wait_ns += h.data_wait_ns;
  totals_.comm_ns += h.comm_ns;
  totals_.cpu_ns += h.cpu_ns;
  totals_.thread_cpu_ns += h.thread_cpu_ns;
  totals_.thread_cpu_wait_ns += h.thread_cpu_wait_ns;
  steps_.push_back(h);
  if (steps_.size() > capacity_) steps_.pop_front();
  return steps_.back();
}

std::string number_text(double value) {
  return std::isnan(value) ? "nan" : base::format("%.9g", value);
}

StepHealth* HealthSeries::reported_step(int64_t step) {
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    if (it->step == step) return &*it;
    if (it->step < step) break;
  }
  bool ended = !steps_.empty() && step <= steps_.back().step;
  constexpr size_t kMaxAhead = 16;  // a caller reporting far ahead of the steps is not kept for long
  if (ended || (ahead_.size() >= kMaxAhead && ahead_.count(step) == 0)) return nullptr;
  return &ahead_[step];
}

void HealthSeries::set_loss(int64_t step, double value) {
  if (StepHealth* h = reported_step(step)) h->loss = value;
}

void HealthSeries::set_gradient_norm(int64_t step, double value) {
  if (StepHealth* h = reported_step(step)) h->gradient_norm = value;
}

std::string HealthSeries::csv() const {
  std::string out =
      "Step,End Time (ns),Step Time (us),Data Wait (us),Communication (us),Process CPU (us),"
      "Thread CPU (us),Thread CPU Wait (us),Loss,Gradient Norm\n";
  char row[256];
  auto reported = [](const std::optional<double>& v) { return v ? number_text(*v) : std::string(); };
  for (const StepHealth& h : steps_) {
    std::snprintf(row, sizeof(row), "%lld,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n",
                  static_cast<long long>(h.step), static_cast<unsigned long long>(h.end_realtime_ns),
                  static_cast<double>(h.step_ns) / 1e3, static_cast<double>(h.data_wait_ns) / 1e3,
                  static_cast<double>(h.comm_ns) / 1e3, static_cast<double>(h.cpu_ns) / 1e3,
                  static_cast<double>(h.thread_cpu_ns) / 1e3,
                  static_cast<double>(h.thread_cpu_wait_ns) / 1e3);
    out += row;
    out.back() = ',';
    out += reported(h.loss) + "," + reported(h.gradient_norm) + "\n";
  }
  // Steps not ended yet (a dump written while one runs): what was reported of them.
  for (const auto& [step, h] : ahead_)
    out += std::to_string(step) + ",,,,,,,," + reported(h.loss) + "," + reported(h.gradient_norm) + "\n";
  return out;
}

std::string prometheus_text(const StepHealth& t, const StepHealth& last, const HealthLabels& labels,
                            uint64_t median_step_ns,
                            const std::map<std::string, uint64_t>& dumps_by_trigger) {
  std::string l = "rank=\"" + std::to_string(labels.rank) + "\",pid=\"" + std::to_string(labels.pid) + "\"";
  std::string out;
  append_metric(out, "trainprof_steps_total", "counter", "Training steps ended.", l,
                static_cast<double>(t.step));
  append_metric(out, "trainprof_step_seconds_total", "counter", "Time in training steps.", l,
                static_cast<double>(t.step_ns) / 1e9);
  append_metric(out, "trainprof_data_wait_seconds_total", "counter",
                "Time the training loop waited for data, within steps.", l,
                static_cast<double>(t.data_wait_ns) / 1e9);
  append_metric(out, "trainprof_communication_seconds_total", "counter",
                "Time in communication calls (collectives, point-to-point).", l,
                static_cast<double>(t.comm_ns) / 1e9);
  append_metric(out, "trainprof_cpu_seconds_total", "counter",
                "CPU time of the training process, within steps.", l, static_cast<double>(t.cpu_ns) / 1e9);
  append_metric(out, "trainprof_thread_cpu_wait_seconds_total", "counter",
                "Time the training thread waited for a CPU (other processes held them), within steps.", l,
                static_cast<double>(t.thread_cpu_wait_ns) / 1e9);
  append_metric(out, "trainprof_last_step_seconds", "gauge", "Duration of the last step.", l,
                static_cast<double>(last.step_ns) / 1e9);
  append_metric(out, "trainprof_median_step_seconds", "gauge", "Median step of the slow-step window.", l,
                static_cast<double>(median_step_ns) / 1e9);
  append_metric(out, "trainprof_last_step_end_timestamp_seconds", "gauge",
                "When the last step ended (Unix time; its age is how long no step ended).", l,
                static_cast<double>(t.end_realtime_ns) / 1e9);
  out +=
      "# HELP trainprof_flight_dumps_total Runs the flight recorder wrote, by trigger.\n"
      "# TYPE trainprof_flight_dumps_total counter\n";
  for (const auto& [trigger, n] : dumps_by_trigger) {
    out += "trainprof_flight_dumps_total{" + l + ",trigger=\"" + trigger + "\"} " + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace trainprof::core
