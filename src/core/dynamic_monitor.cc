// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// DynamicSchedule and DynamicProfilerMonitor (include/trainprof/dynamic.h):
// which steps the edited config asks for, and a Profiler that records them.
#include <exception>
#include <stdexcept>
#include <string>

#include "base/log.h"
#include "base/run_directory.h"
#include "core/dynamic_config_watcher.h"
#include "trainprof/dynamic.h"

namespace trainprof {

DynamicSchedule::DynamicSchedule(std::string cfg_path, std::string output_path, double poll_interval_s)
    : output_path_(base::absolute_path(output_path)) {
  if (output_path_.empty())
    throw std::invalid_argument("DynamicProfilerMonitor: output_path must not be empty");
  rank_ = base::detect_rank().rank;
  watcher_ = std::make_unique<core::DynamicConfigWatcher>(cfg_path, poll_interval_s);
  if (watcher_->version() != seen_version_) take_new_config();
  start_planned();  // a config asking for step 1 records the first step
}

DynamicSchedule::~DynamicSchedule() = default;

uint64_t DynamicSchedule::configs_read() const {
  return watcher_->version();
}

DynamicSchedule::Action DynamicSchedule::step() {
  Action action;
  ++step_num_;
  // The only work of a step when the file did not change.
  if (watcher_->version() != seen_version_) take_new_config();
  if (active_ && (step_num_ >= active_->stop_step || stop_requested_)) {
    action.stop = true;
    active_.reset();
  }
  stop_requested_ = false;
  action.start = start_planned();
  return action;
}

void DynamicSchedule::take_new_config() {
  DynamicConfig config = watcher_->latest(&seen_version_);
  if (config.start_step < 1) {
    planned_.reset();
    if (active_) {
      stop_requested_ = true;
      base::log_info("DynamicProfilerMonitor: start_step is -1: the collection of steps " +
                     std::to_string(active_->start_step) + "-" + std::to_string(active_->stop_step) +
                     " ends with step " + std::to_string(step_num_));
    }
    return;
  }
  if (active_) {
    base::log_info("DynamicProfilerMonitor: a new config (steps " + std::to_string(config.start_step) + "-" +
                   std::to_string(config.stop_step) + ") waits for the collection of steps " +
                   std::to_string(active_->start_step) + "-" + std::to_string(active_->stop_step) +
                   " to end");
  }
  planned_ = std::move(config);
}

// Starts the planned collection when its first step is the next one (or has
// passed: then as many steps from the next one, said in a warning).
bool DynamicSchedule::start_planned() {
  if (active_ || !planned_ || planned_->start_step > step_num_ + 1) return false;
  DynamicConfig config = std::move(*planned_);
  planned_.reset();
  int64_t first = config.start_step, last = config.stop_step;
  if (first <= step_num_) {
    first = step_num_ + 1;
    last = first + (config.stop_step - config.start_step);
    base::log_warning("DynamicProfilerMonitor: start_step " + std::to_string(config.start_step) +
                      " has passed (" + std::to_string(step_num_) + " steps done): recording steps " +
                      std::to_string(first) + "-" + std::to_string(last) + " instead");
  }
  DynamicCollection c{first, last, config.analyse_mode, std::move(config.options)};
  c.options.output_path = output_path_;
  c.options.start_profile = false;
  c.options.schedule.reset();
  std::string worker =
      "rank" + std::to_string(rank_) + "_start" + std::to_string(first) + "_stop" + std::to_string(last);
  c.options.on_trace_ready = trace_handler(output_path_, worker, c.analyse_mode >= 0, c.analyse_mode == 1);
  active_ = std::move(c);
  return true;
}

DynamicProfilerMonitor::DynamicProfilerMonitor(std::string cfg_path, std::string output_path,
                                               double poll_interval_s)
    : schedule_(std::move(cfg_path), std::move(output_path), poll_interval_s) {
  if (schedule_.collecting()) start_collection(false);
}

DynamicProfilerMonitor::~DynamicProfilerMonitor() {
  if (profiler_ != nullptr) stop_collection(false);
}

void DynamicProfilerMonitor::step() noexcept {
  try {
    DynamicSchedule::Action action = schedule_.step();
    if (profiler_ != nullptr && !action.stop) profiler_->step();  // a step inside the collection
    if (action.stop) stop_collection(true);
    if (action.start) start_collection(true);
  } catch (const std::exception& e) {
    base::log_error(std::string("DynamicProfilerMonitor: step() failed: ") + e.what() + "; training goes on");
  }
}

void DynamicProfilerMonitor::start_collection(bool at_step_boundary) noexcept {
  const DynamicCollection& c = *schedule_.collection();
  try {
    profiler_ = std::make_unique<Profiler>(c.options);
    profiler_->set_step_num(c.start_step);
    if (at_step_boundary) {
      profiler_->start_at_step_boundary();  // called from step(): step start_step begins now
    } else {
      profiler_->start();
    }
    base::log_info("DynamicProfilerMonitor: recording steps " + std::to_string(c.start_step) + "-" +
                   std::to_string(c.stop_step) + " into " + profiler_->current_run_dir());
  } catch (const std::exception& e) {
    profiler_.reset();
    base::log_error(std::string("DynamicProfilerMonitor: cannot record steps ") +
                    std::to_string(c.start_step) + "-" + std::to_string(c.stop_step) + ": " + e.what());
  }
}

void DynamicProfilerMonitor::stop_collection(bool at_step_boundary) noexcept {
  try {
    // The trace handler analyses, as analyse_mode says.
    if (at_step_boundary) {
      profiler_->stop_at_step_boundary();
    } else {
      profiler_->stop();
    }
    if (std::string run = profiler_->last_run().run_dir; !run.empty()) runs_.push_back(run);
  } catch (const std::exception& e) {
    base::log_error(std::string("DynamicProfilerMonitor: stopping the collection failed: ") + e.what());
  }
  profiler_.reset();
}

}  // namespace trainprof
