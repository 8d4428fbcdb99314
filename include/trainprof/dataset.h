// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Data pipeline stages: where the input of a training step comes from and how
// long each stage takes.
//
//   Example get(size_t i) override {
//     trainprof::DataStage stage("FashionMnist", trainprof::kStageDatasetGet);
//     return decode(i);
//   }
//
// Recorded only while a profiler records with ProfilerOptions::data_process;
// otherwise a DataStage costs a load and a branch. Each stage becomes a slice
// on a "Dataset" track of its thread in the timeline, and dataset.csv sums
// them per (operation, stage). For LibTorch's data loader,
// trainprof/torch_data.h wraps datasets, transforms and the loader itself.
#ifndef TRAINPROF_DATASET_H_
#define TRAINPROF_DATASET_H_

#include <cstdint>
#include <string_view>

namespace trainprof {

// The stages of a data pipeline, in the order a sample goes through them.
inline constexpr std::string_view kStageDatasetGet = "dataset";   // read / decode one sample
inline constexpr std::string_view kStageTransform = "transform";  // per-sample or per-batch transform
inline constexpr std::string_view kStageCollate = "collate";      // samples -> batch
inline constexpr std::string_view kStageLoaderWait = "wait";      // the training loop waiting for a batch

// Times one stage of a data pipeline, from construction to destruction.
// `operation` names what runs (a dataset, a transform); `stage` is one of the
// kStage* names or any other; `custom_info` is shown beside them in
// dataset.csv (e.g. "workers=2"). Stage and custom info share the 65,534
// ids of marker domains: keep their distinct values few.
class DataStage {
 public:
  DataStage(std::string_view operation, std::string_view stage, std::string_view custom_info = {}) noexcept;
  ~DataStage();
  DataStage(const DataStage&) = delete;
  DataStage& operator=(const DataStage&) = delete;

 private:
  const char* operation_ = nullptr;  // nullptr: not recording
  uint64_t start_ = 0;
  uint16_t stage_ = 0;
  uint16_t custom_info_ = 0;  // domain id + 1, 0: none
};

namespace detail {

// For front ends that time stages themselves (the Python package times
// torch DataLoader stages, in worker processes too, and records them in the
// training process). The clock of every event: TSC ticks where invariant,
// else CLOCK_MONOTONIC ns; the same in every process of the machine.
uint64_t stage_clock_ticks() noexcept;

// True while a profiler records with data_process.
bool data_stages_recording() noexcept;

// Records a stage timed with stage_clock_ticks() on the calling thread's
// Dataset track, when data_stages_recording(); otherwise nothing.
void record_data_stage(std::string_view operation, std::string_view stage, uint64_t start_ticks,
                       uint64_t end_ticks, std::string_view custom_info = {}) noexcept;

}  // namespace detail

}  // namespace trainprof

#endif  // TRAINPROF_DATASET_H_
