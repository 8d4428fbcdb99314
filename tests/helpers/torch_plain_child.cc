// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// An ordinary LibTorch program that knows nothing of trainprof: the
// zero-code-change test preloads the collector into it. Runs `mm` then `relu`
// five times.
#include <ATen/ATen.h>

#include <cstdio>

int main() {
  at::Tensor a = at::ones({3, 4});
  float total = 0;
  for (int i = 0; i < 5; ++i) total += at::relu(at::mm(a, a.t())).sum().item<float>();
  std::printf("total %.0f\n", total);
  return 0;
}
