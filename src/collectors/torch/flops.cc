// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The FLOPs formulas (flops.h).
#include "collectors/torch/flops.h"

namespace trainprof::torch {

FlopsOp flops_op(std::string_view name) {
  if (name == "aten::conv2d") return FlopsOp::kConv2d;
  if (name == "aten::mm") return FlopsOp::kMm;
  if (name == "aten::addmm") return FlopsOp::kAddmm;
  if (name == "aten::bmm") return FlopsOp::kBmm;
  if (name == "aten::baddbmm") return FlopsOp::kBaddbmm;
  if (name == "aten::add" || name == "aten::mul") return FlopsOp::kElementwise;
  return FlopsOp::kNone;
}

uint64_t conv2d_flops(const Conv2dShape& conv) {
  const std::span<const int64_t> in = conv.input, w = conv.weight;
  if (in.size() != 4 || w.size() != 4) return 0;
  int64_t out[2];
  for (size_t d = 0; d < 2; ++d) {
    if (conv.stride[d] <= 0) return 0;
    int64_t k = w[2 + d];
    out[d] = conv.same_padding
                 ? in[2 + d]
                 : (in[2 + d] + 2 * conv.padding[d] - conv.dilation[d] * (k - 1) - 1) / conv.stride[d] + 1;
    if (out[d] <= 0) return 0;
  }
  if (conv.groups <= 0) return 0;
  return static_cast<uint64_t>(2 * in[0] * out[0] * out[1] * w[2] * w[3] * in[1] * w[0] / conv.groups);
}

uint64_t matmul_flops(std::span<const int64_t> a, std::span<const int64_t> b, size_t rank) {
  if (a.size() != rank || b.size() != rank) return 0;
  uint64_t batch = rank == 3 ? static_cast<uint64_t>(a[0]) : 1;
  return 2 * batch * static_cast<uint64_t>(a[rank - 2] * a[rank - 1] * b[rank - 1]);
}

uint64_t elementwise_flops(std::span<const int64_t> sizes) {
  uint64_t elements = 1;
  for (int64_t d : sizes) elements *= static_cast<uint64_t>(d);
  return elements;
}

}  // namespace trainprof::torch
