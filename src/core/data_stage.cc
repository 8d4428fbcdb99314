// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Data pipeline stages (trainprof/dataset.h).
//
// The switch is a collector of the core: the session starts it with the
// options, so DataStage records only while a session with data_process is
// open.
#include <atomic>

#include "core/clock.h"
#include "core/collector.h"
#include "core/event.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "core/step_health.h"
#include "trainprof/dataset.h"
#include "trainprof/range.h"

namespace trainprof {
namespace {

std::atomic<bool> g_data_recording{false};

class DataStageSwitch final : public core::Collector {
 public:
  std::string_view name() const override { return "data"; }
  void start(const ProfilerOptions& options) noexcept override {
    g_data_recording.store(options.data_process, std::memory_order_relaxed);
  }
  void stop() noexcept override { g_data_recording.store(false, std::memory_order_relaxed); }
};

__attribute__((constructor)) void register_data_stage_switch() {
  static DataStageSwitch* data = new DataStageSwitch();  // lives as long as the process
  core::register_collector(data);
}

// The stage's interned names; false when out of memory (not recorded).
bool intern_stage(std::string_view operation, std::string_view stage, std::string_view custom_info,
                  const char** operation_out, uint16_t* stage_out, uint16_t* custom_info_out) noexcept {
  try {
    *stage_out = core::domain_id(stage);
    *custom_info_out = custom_info.empty() ? 0 : static_cast<uint16_t>(core::domain_id(custom_info) + 1);
    *operation_out = detail::intern(operation);
    return true;
  } catch (...) {
    return false;
  }
}

void append_stage(const char* operation, uint16_t stage, uint16_t custom_info, uint64_t start,
                  uint64_t end) noexcept {
  // The training loop waiting for a batch: the step health's data wait.
  static const uint16_t wait_stage = [] {
    try {
      return core::domain_id("wait");
    } catch (...) {
      return core::kDomainOverflow;
    }
  }();
  if (stage == wait_stage && end > start) core::add_data_wait_ticks(end - start);
  core::record_event_fields(start, end, operation, static_cast<uint8_t>(raw::EventKind::kDataStage), 0, stage,
                            custom_info);
}

}  // namespace

DataStage::DataStage(std::string_view operation, std::string_view stage,
                     std::string_view custom_info) noexcept {
  if (!detail::data_stages_recording()) return;
  if (!intern_stage(operation, stage, custom_info, &operation_, &stage_, &custom_info_)) {
    operation_ = nullptr;
    return;
  }
  start_ = detail::now_ticks();  // last: the bookkeeping above is not the stage's time
}

DataStage::~DataStage() {
  if (operation_ == nullptr || !detail::host_recording()) return;
  append_stage(operation_, stage_, custom_info_, start_, detail::now_ticks());
}

namespace detail {

uint64_t stage_clock_ticks() noexcept {
  core::init_clock();  // a spawned process that has recorded nothing yet picks it here
  return detail::now_ticks();
}

bool data_stages_recording() noexcept {
  return g_data_recording.load(std::memory_order_relaxed) && detail::host_recording();
}

void record_data_stage(std::string_view operation, std::string_view stage, uint64_t start_ticks,
                       uint64_t end_ticks, std::string_view custom_info) noexcept {
  if (!detail::data_stages_recording()) return;
  const char* name = nullptr;
  uint16_t stage_id = 0;
  uint16_t info = 0;
  if (intern_stage(operation, stage, custom_info, &name, &stage_id, &info))
    append_stage(name, stage_id, info, start_ticks, end_ticks);
}

}  // namespace detail

}  // namespace trainprof
