// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The demo's CNN for 28x28 grey images (two conv + pool blocks, two linear
// layers), shared with the overhead benchmark so that both measure the same
// model.
#ifndef TRAINPROF_EXAMPLES_FASHION_MNIST_NET_H_
#define TRAINPROF_EXAMPLES_FASHION_MNIST_NET_H_

#include <torch/torch.h>

namespace trainprof_demo {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

}  // namespace trainprof_demo

#endif  // TRAINPROF_EXAMPLES_FASHION_MNIST_NET_H_
