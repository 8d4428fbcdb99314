// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Fashion-MNIST from Debian's dataset-fashion-mnist (gzip IDX files under
// /usr/share/datasets/fashion-mnist/, or $FASHION_MNIST_DIR) as a LibTorch
// dataset, normalised; shared by the demos.
#ifndef TRAINPROF_EXAMPLES_FASHION_MNIST_DATA_H_
#define TRAINPROF_EXAMPLES_FASHION_MNIST_DATA_H_

#include <torch/torch.h>
#include <zlib.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainprof_demo {

inline std::string dataset_dir() {
  const char* env = std::getenv("FASHION_MNIST_DIR");
  return env != nullptr ? env : "/usr/share/datasets/fashion-mnist";
}

// Reads a gzip-compressed IDX file: big-endian magic, dimensions, then bytes.
inline std::vector<uint8_t> read_idx(const std::string& path, std::vector<int64_t>* dims) {
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

}  // namespace trainprof_demo

#endif  // TRAINPROF_EXAMPLES_FASHION_MNIST_DATA_H_
