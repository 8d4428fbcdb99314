// Copyright trainprof authors. The demo: a CNN trained on Fashion-MNIST with
// LibTorch, profiled by trainprof with a schedule, analysed as each recorded
// cycle closes, and summarised at the end.
//
//   fashion_mnist_demo [OUTPUT_DIR] [STEPS]
//
// Data: Debian's dataset-fashion-mnist (gzip IDX files under
// /usr/share/datasets/fashion-mnist/, or $FASHION_MNIST_DIR). Linking
// trainprof::torch is all it takes for LibTorch's operators to be recorded.
#include <torch/torch.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "fashion_mnist_net.h"
#include "trainprof/torch_data.h"
#include "trainprof/trainprof.h"

namespace {

namespace fs = std::filesystem;
using trainprof_demo::Net;

std::string dataset_dir() {
  const char* env = std::getenv("FASHION_MNIST_DIR");
  return env != nullptr ? env : "/usr/share/datasets/fashion-mnist";
}

// Reads a gzip-compressed IDX file: big-endian magic, dimensions, then bytes.
std::vector<uint8_t> read_idx(const std::string& path, std::vector<int64_t>* dims) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw std::runtime_error("cannot open '" + path +
                             "': install Debian's dataset-fashion-mnist (scripts/install_deps.sh) or set "
                             "FASHION_MNIST_DIR");
  }
  auto read_be32 = [&](const char* what) {
    unsigned char b[4];
    if (gzread(f, b, 4) != 4) throw std::runtime_error("'" + path + "' ends inside its " + what);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  };
  uint32_t magic = read_be32("magic number");
  if ((magic >> 8) != 0x08) {  // 0x08: unsigned bytes
    gzclose(f);
    throw std::runtime_error("'" + path + "' is not an IDX file of unsigned bytes");
  }
  size_t count = 1;
  for (uint32_t i = 0; i < (magic & 0xff); ++i) {
    dims->push_back(read_be32("dimensions"));
    count *= static_cast<size_t>(dims->back());
  }
  std::vector<uint8_t> data(count);
  int got = gzread(f, data.data(), static_cast<unsigned>(count));
  gzclose(f);
  if (got != static_cast<int>(count)) throw std::runtime_error("'" + path + "' is truncated");
  return data;
}

class FashionMnist : public torch::data::datasets::Dataset<FashionMnist> {
 public:
  explicit FashionMnist(bool train) {
    std::string prefix = dataset_dir() + (train ? "/train" : "/t10k");
    std::vector<int64_t> image_dims, label_dims;
    auto images = read_idx(prefix + "-images-idx3-ubyte.gz", &image_dims);
    auto labels = read_idx(prefix + "-labels-idx1-ubyte.gz", &label_dims);
    if (image_dims.size() != 3 || label_dims.size() != 1 || image_dims[0] != label_dims[0]) {
      throw std::runtime_error("Fashion-MNIST files under '" + dataset_dir() + "' do not match");
    }
    images_ = torch::from_blob(images.data(), {image_dims[0], 1, image_dims[1], image_dims[2]}, torch::kUInt8)
                  .to(torch::kFloat32)
                  .div_(255.0)
                  .sub_(0.2860)
                  .div_(0.3530);
    labels_ = torch::from_blob(labels.data(), {label_dims[0]}, torch::kUInt8).to(torch::kInt64);
  }
  torch::data::Example<> get(size_t index) override {
    return {images_[static_cast<int64_t>(index)], labels_[static_cast<int64_t>(index)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(images_.size(0)); }

 private:
  torch::Tensor images_, labels_;
};

double accuracy(Net& net, FashionMnist& test, size_t n) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  for (size_t i = 0; i < n; i += 500) {
    std::vector<torch::Tensor> xs, ys;
    for (size_t j = i; j < std::min(n, i + 500); ++j) {
      auto e = test.get(j);
      xs.push_back(e.data);
      ys.push_back(e.target);
    }
    correct += net->forward(torch::stack(xs)).argmax(1).eq(torch::stack(ys)).sum().item<int64_t>();
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(n);
}

int run(const std::string& output, int steps) {
  torch::manual_seed(0);
  torch::set_num_threads(1);  // two cores: one for training, one for the loader workers
  using torch::data::transforms::Stack;
  FashionMnist test_set(false);
  // The wrappers time each sample (worker threads), each batch's collation
  // and each wait of this loop for a batch: dataset.csv and Dataset tracks.
  auto train_set = trainprof::ProfiledDataset<FashionMnist>(FashionMnist(true), "FashionMnist")
                       .map(trainprof::ProfiledBatchTransform<Stack<>>(Stack<>(), "Stack"));
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(train_set), torch::data::DataLoaderOptions().batch_size(64).workers(2));
  Net net;
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  trainprof::ProfilerOptions options;
  options.output_path = output;
  options.record_shapes = true;
  options.with_flops = true;
  options.profile_memory = true;
  options.data_process = true;
  options.schedule = trainprof::Schedule{.wait = 1, .warmup = 1, .active = 3, .repeat = 2, .skip_first = 10};
  options.on_trace_ready = trainprof::trace_handler(output);  // analyses each cycle as it closes
  trainprof::Profiler prof(options);

  std::printf(
      "training a CNN on Fashion-MNIST for %d steps (batch 64); profiling: skip 10, then 2 cycles of "
      "wait 1, warmup 1, active 3\n",
      steps);
  auto t0 = std::chrono::steady_clock::now();
  int step = 0;
  double running = 0;
  while (step < steps) {
    for (auto& batch : trainprof::ProfiledLoader(*loader)) {
      if (step >= steps) break;
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      running += loss.item<double>();
      prof.step();
      if (++step % 50 == 0) {
        std::printf("  step %4d  loss %.4f\n", step, running / 50);
        running = 0;
      }
    }
  }
  prof.stop();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trained %d steps in %.1f s; test accuracy on 2000 images: %.1f%%\n\n", steps, seconds,
              accuracy(net, test_set, 2000));

  int cycles = 0;
  for (const std::string& run_dir : trainprof::find_run_directories(output)) {
    std::fputs(trainprof::summarize_run(run_dir).c_str(), stdout);
    std::printf("\n");
    ++cycles;
  }
  std::printf("%d recorded cycle(s) under %s (open trace_view.json in https://ui.perfetto.dev)\n", cycles,
              output.c_str());
  return cycles == 2 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines interleave with the profiler's log
  std::string output = argc > 1 ? argv[1] : (fs::current_path() / "trainprof_demo_output").string();
  int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  if (steps < 30) {
    std::fprintf(stderr, "fashion_mnist_demo: STEPS must be at least 30 (the schedule needs 20)\n");
    return 2;
  }
  try {
    return run(output, steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist_demo: %s\n", e.what());
    return 1;
  }
}
