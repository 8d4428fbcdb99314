// Copyright trainprof authors. Data pipeline stages (trainprof/dataset.h).
//
// The switch is a collector of the core: the session starts it with the
// options, so DataStage records only while a session with data_process is
// open.
#include <atomic>

#include "core/collector.h"
#include "core/event.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "trainprof/dataset.h"
#include "trainprof/range.h"

namespace trainprof {
namespace {

std::atomic<bool> g_data_recording{false};

class DataStageSwitch final : public detail::Collector {
 public:
  std::string_view name() const override { return "data"; }
  void start(const ProfilerOptions& options) noexcept override {
    g_data_recording.store(options.data_process, std::memory_order_relaxed);
  }
  void stop() noexcept override { g_data_recording.store(false, std::memory_order_relaxed); }
};

__attribute__((constructor)) void register_data_stage_switch() {
  static DataStageSwitch* data = new DataStageSwitch();  // lives as long as the process
  detail::register_collector(data);
}

}  // namespace

DataStage::DataStage(std::string_view operation, std::string_view stage,
                     std::string_view custom_info) noexcept {
  if (!g_data_recording.load(std::memory_order_relaxed) || !detail::host_recording()) return;
  try {
    stage_ = detail::domain_id(stage);
    custom_info_ = custom_info.empty() ? 0 : static_cast<uint16_t>(detail::domain_id(custom_info) + 1);
    operation_ = detail::intern(operation);
  } catch (...) {
    operation_ = nullptr;  // out of memory: the stage is not recorded
    return;
  }
  start_ = detail::now_ticks();  // last: the bookkeeping above is not the stage's time
}

DataStage::~DataStage() {
  if (operation_ == nullptr || !detail::host_recording()) return;
  detail::Event e{
      start_, detail::now_ticks(), operation_, static_cast<uint8_t>(raw::EventKind::kDataStage), 0,
      stage_, custom_info_};
  detail::Recorder::instance().append(e);
}

}  // namespace trainprof
