// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "core/slow_steps.h"

#include <algorithm>

#include "base/string_format.h"

namespace trainprof::core {
namespace {

std::string ms(double ns) {
  return base::format("%.1f", ns / 1e6);
}

std::string ratio_text(double ratio) {
  return base::format(ratio >= 10 ? "%.0f" : "%.1f", ratio);
}

// A step's figures: each field's mean over `steps`, or its median.
struct Figures {
  double step = 0, process_cpu = 0, thread_cpu = 0, thread_wait = 0, data_wait = 0, comm = 0;
};

template <typename Reduce>
Figures reduce(Reduce of) {
  Figures f;
  f.step = of([](const StepHealth& h) { return h.step_ns; });
  f.process_cpu = of([](const StepHealth& h) { return h.cpu_ns; });
  f.thread_cpu = of([](const StepHealth& h) { return h.thread_cpu_ns; });
  f.thread_wait = of([](const StepHealth& h) { return h.thread_cpu_wait_ns; });
  f.data_wait = of([](const StepHealth& h) { return h.data_wait_ns; });
  f.comm = of([](const StepHealth& h) { return h.comm_ns; });
  return f;
}

Figures mean_of(const std::vector<StepHealth>& steps) {
  return reduce([&steps](auto field) {
    double sum = 0;
    for (const StepHealth& h : steps) sum += static_cast<double>(field(h));
    return steps.empty() ? 0.0 : sum / static_cast<double>(steps.size());
  });
}

Figures median_figures(const std::vector<StepHealth>& steps) {
  return reduce([&steps](auto field) {
    std::vector<uint64_t> values;
    values.reserve(steps.size());
    for (const StepHealth& h : steps) values.push_back(field(h));
    return static_cast<double>(median_of(std::move(values)));
  });
}

}  // namespace

std::string whose_time(const std::vector<StepHealth>& slow, const std::vector<StepHealth>& normal,
                       nlohmann::json* cause) {
  if (slow.empty()) return "";
  Figures s = mean_of(slow), n = median_figures(normal);
  double longer = s.step - n.step;
  if (longer <= 0) return "";
  // The thread's own figures come from the kernel's scheduler statistics;
  // without them (0 throughout) its wait is unknown.
  bool thread_known = s.thread_cpu > 0;
  struct Share {
    const char* kind;
    double ns;
  };
  std::vector<Share> shares = {
      {"cpu_contention", thread_known ? s.thread_wait - n.thread_wait : 0},
      {"data", s.data_wait - n.data_wait},
      {"communication", s.comm - n.comm},
      {"compute", thread_known ? s.thread_cpu - n.thread_cpu : s.process_cpu - n.process_cpu}};
  const Share& top = *std::max_element(shares.begin(), shares.end(),
                                       [](const Share& a, const Share& b) { return a.ns < b.ns; });
  // Half of the extra time or more: the cause; else none of these was.
  std::string kind = top.ns >= 0.5 * longer ? top.kind : "blocked";
  std::string of_step = " of " + ms(s.step) + " ms";
  std::string median = " (a median step: ";
  std::string text;
  if (kind == "cpu_contention") {
    text = "the process ran " + ms(s.process_cpu) + of_step + " and its training thread waited " +
           ms(s.thread_wait) + " ms for a CPU: another process or the system held the CPU";
  } else if (kind == "data") {
    text = ms(s.data_wait) + of_step + " waiting for data" + median + ms(n.data_wait) +
           " ms): the input pipeline is behind";
  } else if (kind == "communication") {
    text = ms(s.comm) + of_step + " in communication" + median + ms(n.comm) +
           " ms): a slower rank or the network";
  } else if (kind == "compute") {
    text = thread_known ? "the training thread computed " + ms(s.thread_cpu) + of_step + median +
                              ms(n.thread_cpu) + " ms): the job's own work grew"
                        : "the process computed " + ms(s.process_cpu) + of_step + median + ms(n.process_cpu) +
                              " ms): the job's own work grew";
  } else {
    text = "the process ran " + ms(s.process_cpu) + of_step +
           ", waiting for neither a CPU, data nor communication: blocked (I/O, a sleep, a lock, the "
           "device, or the process stopped)";
  }
  if (slow.size() > 1) text = "per step, " + text;
  if (cause != nullptr) {
    *cause = {{"kind", kind},
              {"steps", slow.size()},
              {"step_ms", s.step / 1e6},
              {"median_step_ms", n.step / 1e6},
              {"process_cpu_ms", s.process_cpu / 1e6},
              {"median_process_cpu_ms", n.process_cpu / 1e6},
              {"data_wait_ms", s.data_wait / 1e6},
              {"communication_ms", s.comm / 1e6}};
    if (thread_known) {
      (*cause)["thread_cpu_ms"] = s.thread_cpu / 1e6;
      (*cause)["thread_cpu_wait_ms"] = s.thread_wait / 1e6;
      (*cause)["median_thread_cpu_wait_ms"] = n.thread_wait / 1e6;
    }
  }
  return text;
}

SlowSteps::SlowSteps(SlowStepRule rule) : rule_(rule) {
  rule_.window = std::max<uint32_t>(rule_.window, 1);
  rule_.min_steps = std::max<uint32_t>(rule_.min_steps, 1);
}

uint64_t SlowSteps::median_ns() const {
  return median_of(std::vector<uint64_t>(recent_ns_.begin(), recent_ns_.end()));
}

std::optional<nlohmann::json> SlowSteps::on_step(const StepHealth& health,
                                                 const std::deque<StepHealth>& history, uint64_t now_ns,
                                                 bool start_up) {
  std::optional<nlohmann::json> trigger;
  if (!start_up && rule_.factor > 0 && recent_ns_.size() >= rule_.min_steps) {
    uint64_t median = std::max<uint64_t>(median_ns(), 1);
    double ratio = static_cast<double>(health.step_ns) / static_cast<double>(median);
    bool slow = ratio > rule_.factor;
    if (burst_ && slow) {
      burst_->last = health.step;
      burst_->min_ratio = std::min(burst_->min_ratio, ratio);
      burst_->max_ratio = std::max(burst_->max_ratio, ratio);
      if (burst_->last - burst_->first + 1 >= kMaxBurstSteps) trigger = close(history, now_ns, true);
    } else if (burst_) {
      trigger = close(history, now_ns, false);
    } else if (slow) {
      bool cooled =
          last_dump_ns_ == 0 || now_ns - last_dump_ns_ >= static_cast<uint64_t>(rule_.cooldown_s * 1e9);
      bool escalates = !cooled && last_dump_ratio_ > 0 && ratio >= kEscalation * last_dump_ratio_;
      if (cooled || escalates) {
        Burst b{health.step, health.step, ratio, ratio, median, recent_ns_.size(), ""};
        if (escalates) {
          b.earlier = base::format("; larger than the one dumped %.0f s ago (%.1fx)",
                                   static_cast<double>(now_ns - last_dump_ns_) / 1e9, last_dump_ratio_);
        }
        burst_ = b;
      }
    }
  }
  if (!start_up) {  // the median is of steps
    recent_ns_.push_back(health.step_ns);
    if (recent_ns_.size() > rule_.window) recent_ns_.pop_front();
  }
  return trigger;
}

std::optional<nlohmann::json> SlowSteps::flush(const std::deque<StepHealth>& history, uint64_t now_ns) {
  if (!burst_) return std::nullopt;
  return close(history, now_ns, false);
}

void SlowSteps::absorb(int64_t last_step, uint64_t now_ns) {
  last_dump_ns_ = now_ns;
  last_dump_ratio_ = std::max(last_dump_ratio_, rule_.factor);  // another rank's: at least a slow step's
  if (burst_ && burst_->first <= last_step) burst_.reset();
}

nlohmann::json SlowSteps::close(const std::deque<StepHealth>& history, uint64_t now_ns, bool goes_on) {
  Burst b = *burst_;
  burst_.reset();
  last_dump_ns_ = now_ns;
  last_dump_ratio_ = b.max_ratio;
  std::vector<StepHealth> slow, normal;
  for (const StepHealth& h : history) {
    if (h.step >= b.first && h.step <= b.last) slow.push_back(h);
    if (h.step < b.first) normal.push_back(h);
  }
  if (normal.size() > b.window_steps)
    normal.erase(normal.begin(), normal.end() - static_cast<std::ptrdiff_t>(b.window_steps));
  std::string of_median = "the median of the last " + std::to_string(b.window_steps) + " steps (" +
                          ms(static_cast<double>(b.median_ns)) + " ms)";
  std::string reason;
  uint64_t longest = 0;
  for (const StepHealth& h : slow) longest = std::max(longest, h.step_ns);
  if (b.first == b.last) {
    reason = "step " + std::to_string(b.first) + " took " + ms(static_cast<double>(longest)) + " ms, " +
             ratio_text(b.max_ratio) + "x " + of_median;
  } else {
    std::string low = ratio_text(b.min_ratio), high = ratio_text(b.max_ratio);
    reason = "steps " + std::to_string(b.first) + "-" + std::to_string(b.last) + " slow, " +
             (low == high ? high : low + "-" + high) + "x " + of_median;
    if (goes_on) reason += ", and still slow: written after " + std::to_string(kMaxBurstSteps) + " steps";
  }
  reason += b.earlier;
  nlohmann::json cause;
  std::string whose = whose_time(slow, normal, &cause);
  if (!whose.empty()) reason += "; " + whose;
  nlohmann::json trigger = {
      {"trigger", "slow_step"}, {"reason", reason},         {"step", b.first},
      {"last_step", b.last},    {"step_ns", longest},       {"median_ns", b.median_ns},
      {"ratio", b.max_ratio},   {"min_ratio", b.min_ratio}, {"window_steps", b.window_steps},
      {"factor", rule_.factor}};
  if (!cause.is_null()) trigger["cause"] = std::move(cause);
  if (goes_on) trigger["still_slow"] = true;
  return trigger;
}

}  // namespace trainprof::core
