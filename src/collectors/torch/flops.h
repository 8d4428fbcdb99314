// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Floating-point operations of an operator (with_flops), by the formulas
// LibTorch's own profiler uses, so that the two count alike. The collector
// reads the shapes and arguments out of LibTorch's inputs; the formulas take
// plain numbers, so they compile without LibTorch and are tested with known
// answers beside the core's.
#ifndef TRAINPROF_COLLECTORS_TORCH_FLOPS_H_
#define TRAINPROF_COLLECTORS_TORCH_FLOPS_H_

#include <cstdint>
#include <span>
#include <string_view>

namespace trainprof::torch {

// The operators whose FLOPs are counted (what LibTorch counts).
enum class FlopsOp { kNone, kConv2d, kMm, kAddmm, kBmm, kBaddbmm, kElementwise };

// By name: a few string compares, only while with_flops is on.
FlopsOp flops_op(std::string_view name);

// aten::conv2d(input, weight, bias, stride, padding, dilation, groups):
// 2 x N x Hout x Wout x Kh x Kw x Cin x Cout / groups. Each of stride,
// padding and dilation holds the (height, width) values.
struct Conv2dShape {
  std::span<const int64_t> input;   // N, Cin, H, W
  std::span<const int64_t> weight;  // Cout, Cin / groups, Kh, Kw
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
  bool same_padding = false;  // padding="same": the output is as large as the input
};
// 0 for shapes that are not 4-d, and for arguments no convolution accepts
// (a stride or a group count below 1, an empty output).
uint64_t conv2d_flops(const Conv2dShape& conv);

// A product of two matrices (rank 2) or of two batches of them (rank 3):
// 2 x M x K x N, times the batch. 0 when either shape has another rank.
uint64_t matmul_flops(std::span<const int64_t> a, std::span<const int64_t> b, size_t rank);

// An elementwise operator: one operation per element of its first input.
uint64_t elementwise_flops(std::span<const int64_t> sizes);

}  // namespace trainprof::torch

#endif  // TRAINPROF_COLLECTORS_TORCH_FLOPS_H_
