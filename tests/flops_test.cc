// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// The FLOPs formulas of with_flops, with answers worked out by hand (2 x
// multiply-adds, as LibTorch's profiler counts; the LibTorch tests compare
// whole runs with LibTorch's own counts).
#include "collectors/torch/flops.h"

#include <gtest/gtest.h>

#include <vector>

namespace trainprof::torch {
namespace {

TEST(Flops, OperatorsAreKnownByTheirLibTorchNames) {
  EXPECT_EQ(flops_op("aten::conv2d"), FlopsOp::kConv2d);
  EXPECT_EQ(flops_op("aten::mm"), FlopsOp::kMm);
  EXPECT_EQ(flops_op("aten::addmm"), FlopsOp::kAddmm);
  EXPECT_EQ(flops_op("aten::bmm"), FlopsOp::kBmm);
  EXPECT_EQ(flops_op("aten::baddbmm"), FlopsOp::kBaddbmm);
  EXPECT_EQ(flops_op("aten::add"), FlopsOp::kElementwise);
  EXPECT_EQ(flops_op("aten::mul"), FlopsOp::kElementwise);
  EXPECT_EQ(flops_op("aten::add_"), FlopsOp::kNone);  // in place: not counted
  EXPECT_EQ(flops_op("aten::conv1d"), FlopsOp::kNone);
  EXPECT_EQ(flops_op(""), FlopsOp::kNone);
}

struct Conv {
  std::vector<int64_t> input, weight;
  Conv2dShape shape() const {
    Conv2dShape c;
    c.input = input;
    c.weight = weight;
    return c;
  }
};

TEST(Flops, Conv2dCountsEveryOutputPixelsMultiplyAdds) {
  Conv conv{{2, 3, 32, 32}, {16, 3, 3, 3}};
  Conv2dShape c = conv.shape();
  c.padding[0] = c.padding[1] = 1;  // 32 x 32 out
  EXPECT_EQ(conv2d_flops(c), 2ull * 2 * 32 * 32 * 3 * 3 * 3 * 16);

  c = conv.shape();  // no padding, stride 2: (32 - 3) / 2 + 1 = 15
  c.stride[0] = c.stride[1] = 2;
  EXPECT_EQ(conv2d_flops(c), 2ull * 2 * 15 * 15 * 3 * 3 * 3 * 16);

  c = conv.shape();  // height and width apart: (32 + 2 - 3) / 1 + 1 = 32 high, (32 - 3) / 3 + 1 = 10 wide
  c.padding[0] = 1;
  c.stride[1] = 3;
  EXPECT_EQ(conv2d_flops(c), 2ull * 2 * 32 * 10 * 3 * 3 * 3 * 16);

  c = conv.shape();  // dilation 2 widens the kernel to 5: (32 + 4 - 5) + 1 = 32
  c.padding[0] = c.padding[1] = 2;
  c.dilation[0] = c.dilation[1] = 2;
  EXPECT_EQ(conv2d_flops(c), 2ull * 2 * 32 * 32 * 3 * 3 * 3 * 16);

  c = conv.shape();
  c.same_padding = true;
  EXPECT_EQ(conv2d_flops(c), 2ull * 2 * 32 * 32 * 3 * 3 * 3 * 16);
}

TEST(Flops, Conv2dGroupsDivideTheCount) {
  Conv depthwise{{1, 8, 10, 10}, {8, 1, 3, 3}};
  Conv2dShape c = depthwise.shape();
  c.groups = 8;  // 8 x 8 out
  EXPECT_EQ(conv2d_flops(c), 2ull * 1 * 8 * 8 * 3 * 3 * 8 * 8 / 8);
}

TEST(Flops, Conv2dArgumentsNoConvolutionTakesCountNothing) {
  Conv conv{{1, 3, 8, 8}, {4, 3, 3, 3}};
  Conv2dShape c = conv.shape();
  c.stride[1] = 0;
  EXPECT_EQ(conv2d_flops(c), 0u);
  c = conv.shape();
  c.groups = 0;
  EXPECT_EQ(conv2d_flops(c), 0u);
  Conv too_large{{1, 3, 2, 2}, {4, 3, 3, 3}};  // a kernel larger than the input: no output
  EXPECT_EQ(conv2d_flops(too_large.shape()), 0u);
  Conv unbatched{{3, 8, 8}, {4, 3, 3, 3}};
  EXPECT_EQ(conv2d_flops(unbatched.shape()), 0u);
}

TEST(Flops, MatrixProductsAreTwiceMTimesKTimesN) {
  std::vector<int64_t> a{2, 3}, b{3, 4};
  EXPECT_EQ(matmul_flops(a, b, 2), 2u * 2 * 3 * 4);
  std::vector<int64_t> batch_a{5, 2, 3}, batch_b{5, 3, 4};
  EXPECT_EQ(matmul_flops(batch_a, batch_b, 3), 2u * 5 * 2 * 3 * 4);
  EXPECT_EQ(matmul_flops(batch_a, b, 3), 0u);  // ranks that do not match the operator
  EXPECT_EQ(matmul_flops(a, b, 3), 0u);
}

TEST(Flops, ElementwiseIsOnePerElementOfTheFirstInput) {
  std::vector<int64_t> sizes{2, 3, 4};
  EXPECT_EQ(elementwise_flops(sizes), 24u);
  EXPECT_EQ(elementwise_flops({}), 1u);  // a scalar tensor
  std::vector<int64_t> empty{4, 0};
  EXPECT_EQ(elementwise_flops(empty), 0u);
}

}  // namespace
}  // namespace trainprof::torch
