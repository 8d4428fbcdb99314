// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// LibTorch's data loader, with its stages timed (trainprof/dataset.h): wrap the
// dataset, the collation and the loop.
//
//   auto data = trainprof::ProfiledDataset<MyDataset>(MyDataset(), "MyDataset")
//                   .map(trainprof::ProfiledBatchTransform<torch::data::transforms::Stack<>>(
//                       torch::data::transforms::Stack<>(), "Stack"));
//   auto loader = torch::data::make_data_loader(std::move(data), options);
//   for (auto& batch : trainprof::ProfiledLoader(*loader)) { ... }
//
// get() runs on the loader's worker threads: each sample is a "dataset"
// stage there, each batch a "collate" stage; the training thread's wait for
// the next batch is a "wait" stage. Nothing is recorded unless a profiler
// records with data_process. Needs LibTorch: link trainprof::torch.
#ifndef TRAINPROF_TORCH_DATA_H_
#define TRAINPROF_TORCH_DATA_H_

#include <torch/data.h>

#include <string>
#include <string_view>
#include <utility>

#include "trainprof/dataset.h"

namespace trainprof {

// A dataset whose get() is timed as the kStageDatasetGet stage of `name`.
template <typename Inner>
class ProfiledDataset
    : public torch::data::datasets::Dataset<ProfiledDataset<Inner>, typename Inner::ExampleType> {
 public:
  using ExampleType = typename Inner::ExampleType;
  ProfiledDataset(Inner inner, std::string name) : inner_(std::move(inner)), name_(std::move(name)) {}

  ExampleType get(size_t index) override {
    DataStage stage(name_, kStageDatasetGet);
    return inner_.get(index);
  }
  torch::optional<size_t> size() const override { return inner_.size(); }

 private:
  Inner inner_;
  std::string name_;
};

// A batch transform (a collation such as Stack<>, or any BatchTransform)
// timed as `stage` (kStageCollate by default) of `name`.
template <typename Inner>
class ProfiledBatchTransform
    : public torch::data::transforms::BatchTransform<typename Inner::InputBatchType,
                                                     typename Inner::OutputBatchType> {
 public:
  using InputBatchType = typename Inner::InputBatchType;
  using OutputBatchType = typename Inner::OutputBatchType;
  ProfiledBatchTransform(Inner inner, std::string name, std::string_view stage = kStageCollate)
      : inner_(std::move(inner)), name_(std::move(name)), stage_(stage) {}

  OutputBatchType apply_batch(InputBatchType input) override {
    DataStage stage(name_, stage_);
    return inner_.apply_batch(std::move(input));
  }

 private:
  Inner inner_;
  std::string name_;
  std::string stage_;
};

// Iterates a data loader (`*make_data_loader(...)`) in a range-for; each
// wait for a batch, the first included, is a kStageLoaderWait stage of `name`.
template <typename Loader>
class ProfiledLoader {
 public:
  explicit ProfiledLoader(Loader& loader, std::string name = "DataLoader")
      : loader_(loader), name_(std::move(name)) {}

  class Iterator {
   public:
    using Inner = decltype(std::declval<Loader&>().begin());
    Iterator(Inner inner, const std::string* name) : inner_(std::move(inner)), name_(name) {}
    Iterator& operator++() {
      DataStage stage(*name_, kStageLoaderWait);
      ++inner_;
      return *this;
    }
    auto& operator*() { return *inner_; }
    // LibTorch fetches the first batch on the first comparison with end().
    bool operator!=(const Iterator& other) {
      if (first_) {
        first_ = false;
        DataStage stage(*name_, kStageLoaderWait);
        return inner_ != other.inner_;
      }
      return inner_ != other.inner_;
    }

   private:
    Inner inner_;
    const std::string* name_;
    bool first_ = true;
  };

  Iterator begin() { return Iterator(loader_.begin(), &name_); }
  Iterator end() { return Iterator(loader_.end(), &name_); }

 private:
  Loader& loader_;
  std::string name_;
};

}  // namespace trainprof

#endif  // TRAINPROF_TORCH_DATA_H_
