// Every monet::ops function in every mode against the plain torch op: forward equal, analytic
// gradients equal in double to 1e-10, and gradients equal to finite differences on small inputs.
// LibTorch C++ has no gradcheck; comparing with torch's own analytic gradients is the stronger
// check, and the finite differences guard against both being wrong alike.
#include "monet/ops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/autocast.h"
#include "monet/op_mode.h"
#include "op_check.h"

namespace monet {
namespace {

using namespace op_check;  // the helpers both devices' op tests share

// Forward and gradients of `op` in every variant mode against `reference` (the plain torch op).
void expect_matches(const Op& op, const Op& reference, const Inputs& inputs, double tolerance) {
  torch::manual_seed(7);
  const torch::Tensor probe = reference(inputs);
  const torch::Tensor grad_y = torch::randn_like(probe);
  const Outcome want = run(reference, inputs, grad_y, OpMode::kDefault);
  const Outcome plain = run(op, inputs, grad_y, OpMode::kDefault);
  EXPECT_EQ(plain.node, want.node) << "the default mode must be torch's own op";
  for (OpMode mode : kVariants) {
    SCOPED_TRACE(std::string(op_mode_name(mode)));
    const Outcome got = run(op, inputs, grad_y, mode);
    EXPECT_NE(got.node, want.node) << "no variant ran";
    ASSERT_EQ(got.y.sizes(), want.y.sizes());
    EXPECT_LE(max_diff(got.y, want.y), tolerance);
    ASSERT_EQ(got.grads.size(), want.grads.size());
    for (std::size_t i = 0; i < got.grads.size(); ++i) {
      ASSERT_TRUE(got.grads[i].defined()) << "input " << i;
      EXPECT_LE(max_diff(got.grads[i], want.grads[i]), tolerance) << "input " << i;
    }
  }
}

// The variant's gradient of sum(op(x) * g) against central differences, for input 0.
void expect_finite_differences(const Op& op, const Inputs& inputs, OpMode mode) {
  SCOPED_TRACE(std::string(op_mode_name(mode)));
  torch::manual_seed(11);
  const torch::Tensor grad_y = torch::randn_like(op(inputs));
  const Outcome got = run(op, inputs, grad_y, mode);
  const double h = 1e-6;
  torch::Tensor x = inputs[0].detach().clone();
  torch::Tensor numeric = torch::zeros_like(x);
  auto loss = [&](const torch::Tensor& xx) {
    Inputs in = inputs;
    in[0] = xx;
    OpModeScope scope(mode);
    torch::NoGradGuard no_grad;
    return (op(in) * grad_y).sum().item<double>();
  };
  auto flat = x.view({-1});
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double v = flat[i].item<double>();
    flat[i] = v + h;
    const double up = loss(x);
    flat[i] = v - h;
    const double down = loss(x);
    flat[i] = v;
    numeric.view({-1})[i] = (up - down) / (2 * h);
  }
  EXPECT_LE(max_diff(got.grads[0], numeric), 1e-6);
}

torch::Tensor away_from_zero(torch::Tensor t) { return t + 0.1 * t.sign(); }

torch::TensorOptions f64() { return torch::dtype(torch::kDouble); }

// --- relu ---

TEST(OpsTest, ReluMatchesTorch) {
  const Op op = [](const Inputs& in) { return ops::relu(in[0]); };
  const Op ref = [](const Inputs& in) { return torch::relu(in[0]); };
  const Inputs inputs{away_from_zero(torch::randn({2, 3, 4, 5}, f64())).requires_grad_()};
  expect_matches(op, ref, inputs, 1e-10);
  for (OpMode mode : kVariants) expect_finite_differences(op, inputs, mode);
}

TEST(OpsTest, ReluIsBitwiseTorchsInFloat) {
  torch::Tensor x = torch::randn({1000}).requires_grad_();
  torch::Tensor g = torch::randn({1000});
  const Op op = [](const Inputs& in) { return ops::relu(in[0]); };
  const Op ref = [](const Inputs& in) { return torch::relu(in[0]); };
  const Outcome want = run(ref, {x}, g, OpMode::kDefault);
  const Outcome got = run(op, {x}, g, OpMode::kCompact);
  EXPECT_TRUE(torch::equal(got.y, want.y));
  EXPECT_TRUE(torch::equal(got.grads[0], want.grads[0]));
}

// torch's ReLU backward is threshold_backward(grad, result, 0): result <= 0 ? 0 : grad. It passes
// the gradient where the output is NaN and drops it at either zero; so must the kept mask, in a
// full mask word and a partial one, and for a double too small for a float.
TEST(OpsTest, ReluGradientIsTorchsAtNanAndZeros) {
  const double inf = std::numeric_limits<double>::infinity();
  for (torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
    const torch::Tensor x =
        torch::tensor({std::nan(""), -std::nan(""), 1.0, -1.0, 0.0, -0.0, 1e-300, inf, -inf}, f64())
            .repeat({5})
            .to(dtype)
            .requires_grad_();
    const torch::Tensor g = torch::randn({45}, torch::dtype(dtype));
    const Op op = [](const Inputs& in) { return ops::relu(in[0]); };
    const Op ref = [](const Inputs& in) { return torch::relu(in[0]); };
    const Outcome want = run(ref, {x}, g, OpMode::kDefault);
    for (OpMode mode : kVariants) {
      const Outcome got = run(op, {x}, g, mode);
      EXPECT_NE(got.node, want.node);
      EXPECT_TRUE(torch::equal(got.grads[0], want.grads[0]))
          << dtype << " " << op_mode_name(mode) << ": " << got.grads[0] << want.grads[0];
    }
  }
}

TEST(OpsTest, EveryCallCountsOnceInEveryMode) {
  torch::Tensor x = torch::randn({4, 3, 4, 4}).requires_grad_();
  for (OpMode mode : {OpMode::kDefault, OpMode::kCompact, OpMode::kRegenerate}) {
    OpModeScope scope(mode);
    const std::uint64_t before = variant_op_calls();
    ops::relu(x);
    ops::dropout(x, 0.5, true);
    ops::batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5);
    ops::batch_norm_relu(x, {}, {}, {}, {}, true, 0.1, 1e-5);
    ops::max_pool2d(x, {2, 2});
    ops::gelu(x);
    ops::softmax(x, 1);
    ops::batch_norm_relu_conv2d(x, {}, {}, {}, {}, true, 0.1, 1e-5, torch::randn({2, 3, 1, 1}), {},
                                {1, 1}, {0, 0}, {1, 1}, 1);
    EXPECT_EQ(variant_op_calls() - before, 8u) << op_mode_name(mode);
  }
}

TEST(OpsTest, NoGradCallsRunThePlainOp) {
  torch::Tensor x = torch::randn({8});
  OpModeScope scope(OpMode::kCompact);
  EXPECT_EQ(ops::relu(x).grad_fn(), nullptr);
  EXPECT_TRUE(torch::equal(ops::relu(x), torch::relu(x)));
}

// --- dropout ---

TEST(OpsTest, CompactDropoutIsTorchsDropoutBitForBit) {
  for (torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
    torch::Tensor x = torch::randn({3, 50, 7}, torch::dtype(dtype)).requires_grad_();
    torch::Tensor g = torch::randn({3, 50, 7}, torch::dtype(dtype));
    const Op op = [](const Inputs& in) { return ops::dropout(in[0], 0.3, true); };
    const Op ref = [](const Inputs& in) { return torch::dropout(in[0], 0.3, true); };
    torch::manual_seed(123);
    const Outcome want = run(ref, {x}, g, OpMode::kDefault);
    torch::manual_seed(123);
    const Outcome got = run(op, {x}, g, OpMode::kCompact);
    EXPECT_NE(got.node, want.node);
    // Bits, not values: a dropped negative element is -0 in torch's, and must be here too.
    const torch::ScalarType bits = dtype == torch::kFloat ? torch::kInt : torch::kLong;
    EXPECT_TRUE(torch::equal(got.y.view(bits), want.y.view(bits))) << dtype;
    EXPECT_TRUE(torch::equal(got.grads[0].view(bits), want.grads[0].view(bits))) << dtype;
  }
}

TEST(OpsTest, RegeneratingDropoutIsConsistentAndScaled) {
  const double p = 0.25;
  torch::Tensor x = away_from_zero(torch::randn({4, 1000}, f64())).requires_grad_();
  torch::Tensor g = torch::randn({4, 1000}, f64());
  const Op op = [p](const Inputs& in) { return ops::dropout(in[0], p, true); };
  const Outcome got = run(op, {x}, g, OpMode::kRegenerate);
  // x has no zeros: the kept elements are where y is not zero.
  const torch::Tensor noise = (got.y != 0).to(torch::kDouble).div_(1 - p);
  EXPECT_TRUE(torch::equal(got.y, x.detach() * noise));
  EXPECT_TRUE(torch::equal(got.grads[0], g * noise));
  EXPECT_NEAR((got.y != 0).to(torch::kDouble).mean().item<double>(), 1 - p, 0.03);
}

TEST(OpsTest, DropoutRerunsDrawTheSameMaskAfterTheGeneratorIsRestored) {
  torch::Tensor x = torch::randn({64, 64}).requires_grad_();
  for (OpMode mode : kVariants) {
    OpModeScope scope(mode);
    at::Generator gen = at::globalContext().defaultGenerator(at::kCPU);
    const torch::Tensor state = gen.get_state();
    const torch::Tensor first = ops::dropout(x, 0.5, true);
    const torch::Tensor other = ops::dropout(x, 0.5, true);
    EXPECT_FALSE(torch::equal(first, other)) << "each call draws afresh";
    gen.set_state(state);
    torch::Tensor again;
    {
      // A checkpoint recomputes without grad first, then with it: both draw alike.
      torch::NoGradGuard no_grad;
      again = ops::dropout(x, 0.5, true);
    }
    EXPECT_TRUE(torch::equal(first, again)) << op_mode_name(mode);
    torch::manual_seed(5);
    const torch::Tensor a = ops::dropout(x, 0.5, true);
    torch::manual_seed(5);
    EXPECT_TRUE(torch::equal(a, ops::dropout(x, 0.5, true))) << op_mode_name(mode);
  }
}

TEST(OpsTest, DropoutEdgeCasesAreTorchs) {
  torch::Tensor x = torch::randn({10}).requires_grad_();
  for (OpMode mode : kVariants) {
    OpModeScope scope(mode);
    EXPECT_TRUE(torch::equal(ops::dropout(x, 0.5, false), x));
    EXPECT_TRUE(torch::equal(ops::dropout(x, 0.0, true), x));
    EXPECT_TRUE(torch::equal(ops::dropout(x, 1.0, true), torch::zeros_like(x)));
    EXPECT_THROW(ops::dropout(x, 1.5, true), c10::Error);
  }
}

// --- batch_norm ---

struct BatchNormCase {
  torch::Tensor x, weight, bias, mean, var;
};

BatchNormCase batch_norm_case(torch::IntArrayRef shape) {
  const std::int64_t c = shape[1];
  return {torch::randn(shape, f64()).mul(2).add(0.5).requires_grad_(),
          torch::randn({c}, f64()).add(1.5).requires_grad_(),
          torch::randn({c}, f64()).requires_grad_(), torch::zeros({c}, f64()),
          torch::ones({c}, f64())};
}

// Running statistics: `mine` for monet's op, `ref` for torch's, both from the case's.
struct RunningStats {
  torch::Tensor mean_mine, var_mine, mean_ref, var_ref;
  void reset(const BatchNormCase& bn) {
    mean_mine = bn.mean.clone(), var_mine = bn.var.clone();
    mean_ref = bn.mean.clone(), var_ref = bn.var.clone();
  }
};

// One call of `op` in each variant mode updates the running statistics as one call of `ref`, for
// each BatchNorm's case and statistics.
void expect_statistics_updated_once(
    const Op& op, const Op& ref, const Inputs& inputs,
    const std::vector<std::pair<const BatchNormCase*, RunningStats*>>& norms) {
  for (OpMode mode : kVariants) {
    SCOPED_TRACE(std::string(op_mode_name(mode)));
    for (const auto& [bn, stats] : norms) stats->reset(*bn);
    {
      OpModeScope scope(mode);
      op(inputs);
    }
    ref(inputs);
    for (const auto& [bn, stats] : norms) {
      EXPECT_LE(max_diff(stats->mean_mine, stats->mean_ref), 1e-12);
      EXPECT_LE(max_diff(stats->var_mine, stats->var_ref), 1e-12);
      EXPECT_GT(max_diff(stats->mean_mine, bn->mean), 0.0);
    }
  }
}

void expect_batch_norm_matches(const BatchNormCase& bn, bool fused) {
  RunningStats stats;
  stats.reset(bn);
  const Op op = [&](const Inputs& in) {
    auto f = fused ? ops::batch_norm_relu : ops::batch_norm;
    return f(in[0], in[1], in[2], stats.mean_mine, stats.var_mine, true, 0.1, 1e-5);
  };
  const Op ref = [&](const Inputs& in) {
    torch::Tensor y = torch::batch_norm(in[0], in[1], in[2], stats.mean_ref, stats.var_ref, true,
                                        0.1, 1e-5, false);
    return fused ? torch::relu(y) : y;
  };
  const Inputs inputs{bn.x, bn.weight, bn.bias};
  expect_matches(op, ref, inputs, 1e-10);
  expect_statistics_updated_once(op, ref, inputs, {{&bn, &stats}});
}

TEST(OpsTest, BatchNormMatchesTorch) {
  expect_batch_norm_matches(batch_norm_case({4, 3, 5, 5}), false);
}

TEST(OpsTest, BatchNormReluMatchesTorch) {
  expect_batch_norm_matches(batch_norm_case({4, 3, 5, 5}), true);
}

TEST(OpsTest, BatchNormWithNearZeroWeightsKeepsThoseChannelsInputs) {
  BatchNormCase bn = batch_norm_case({4, 4, 3, 3});
  {
    torch::NoGradGuard no_grad;
    bn.weight[1] = 0.0;   // a zero-initialized residual BatchNorm
    bn.weight[2] = 1e-4;  // too small to invert to 1e-10
    bn.bias[3] = 1e4;     // large against its weight
  }
  expect_batch_norm_matches(bn, false);
  expect_batch_norm_matches(bn, true);
}

// The compact BatchNorm keeps its output: modifying it in place stops backward with torch's own
// error (ops.h, nn.h), rather than recovering x_hat from the wrong numbers.
TEST(OpsTest, BatchNormOutputModifiedInPlaceStopsBackwardLoudly) {
  const BatchNormCase bn = batch_norm_case({2, 3, 4, 4});
  for (OpMode mode : kVariants) {
    SCOPED_TRACE(std::string(op_mode_name(mode)));
    OpModeScope scope(mode);
    torch::Tensor y = ops::batch_norm(bn.x, bn.weight, bn.bias, {}, {}, true, 0.1, 1e-5);
    y += 1.0;
    EXPECT_THROW(y.sum().backward(), c10::Error);
    torch::Tensor z = ops::batch_norm(bn.x, bn.weight, bn.bias, {}, {}, true, 0.1, 1e-5);
    z = z + 1.0;
    EXPECT_NO_THROW(z.sum().backward());
  }
}

TEST(OpsTest, BatchNormWithoutAffineOrRunningStats) {
  BatchNormCase bn = batch_norm_case({3, 2, 4, 4});
  const Op op = [](const Inputs& in) {
    return ops::batch_norm(in[0], {}, {}, {}, {}, true, 0.1, 1e-5);
  };
  const Op ref = [](const Inputs& in) {
    return torch::batch_norm(in[0], {}, {}, {}, {}, true, 0.1, 1e-5, false);
  };
  expect_matches(op, ref, {bn.x}, 1e-10);
}

TEST(OpsTest, BatchNormFiniteDifferences) {
  BatchNormCase bn = batch_norm_case({2, 2, 3, 3});
  for (bool fused : {false, true}) {
    const Op op = [fused](const Inputs& in) {
      auto f = fused ? ops::batch_norm_relu : ops::batch_norm;
      return f(in[0], in[1], in[2], {}, {}, true, 0.1, 1e-5);
    };
    for (OpMode mode : kVariants) expect_finite_differences(op, {bn.x, bn.weight, bn.bias}, mode);
  }
}

// --- batch_norm_relu_conv2d ---

struct ConvCase {
  std::int64_t out, kernel, stride, padding, dilation, groups;
  bool bias;

  // Its weight and bias (undefined without one) for `in` input channels, in double.
  std::pair<torch::Tensor, torch::Tensor> parameters(std::int64_t in) const {
    return {torch::randn({out, in / groups, kernel, kernel}, f64()).requires_grad_(),
            bias ? torch::randn({out}, f64()).requires_grad_() : torch::Tensor()};
  }
};

void expect_batch_norm_relu_conv_matches(const BatchNormCase& bn, const ConvCase& c) {
  SCOPED_TRACE("kernel " + std::to_string(c.kernel) + " stride " + std::to_string(c.stride) +
               " groups " + std::to_string(c.groups));
  const auto [conv_weight, conv_bias] = c.parameters(bn.x.size(1));
  RunningStats stats;
  stats.reset(bn);
  const Op op = [&](const Inputs& in) {
    return ops::batch_norm_relu_conv2d(in[0], in[1], in[2], stats.mean_mine, stats.var_mine, true,
                                       0.1, 1e-5, in[3], c.bias ? in[4] : torch::Tensor(),
                                       {c.stride, c.stride}, {c.padding, c.padding},
                                       {c.dilation, c.dilation}, c.groups);
  };
  const Op ref = [&](const Inputs& in) {
    torch::Tensor y = torch::batch_norm(in[0], in[1], in[2], stats.mean_ref, stats.var_ref, true,
                                        0.1, 1e-5, false);
    return torch::conv2d(torch::relu(y), in[3], c.bias ? in[4] : torch::Tensor(), c.stride,
                         c.padding, c.dilation, c.groups);
  };
  Inputs inputs{bn.x, bn.weight, bn.bias, conv_weight};
  if (c.bias) inputs.push_back(conv_bias);
  expect_matches(op, ref, inputs, 1e-10);
  expect_statistics_updated_once(op, ref, inputs, {{&bn, &stats}});
}

TEST(OpsTest, BatchNormReluConvMatchesTorch) {
  torch::manual_seed(5);
  const BatchNormCase bn = batch_norm_case({3, 4, 7, 6});
  expect_batch_norm_relu_conv_matches(bn, {5, 3, 1, 1, 1, 1, false});  // a basic block's
  expect_batch_norm_relu_conv_matches(bn, {6, 1, 2, 0, 1, 1, true});   // a downsampling 1x1
  expect_batch_norm_relu_conv_matches(bn, {4, 3, 2, 2, 2, 2, true});   // dilated, grouped
}

TEST(OpsTest, BatchNormReluConvWithNearZeroWeights) {
  BatchNormCase bn = batch_norm_case({4, 4, 5, 5});
  {
    torch::NoGradGuard no_grad;
    bn.weight[1] = 0.0;
    bn.bias[3] = 1e4;
  }
  expect_batch_norm_relu_conv_matches(bn, {3, 3, 1, 1, 1, 1, true});
}

TEST(OpsTest, BatchNormReluConvFiniteDifferences) {
  torch::manual_seed(6);
  const BatchNormCase bn = batch_norm_case({2, 2, 4, 4});
  const torch::Tensor conv_weight = torch::randn({3, 2, 3, 3}, f64()).requires_grad_();
  const Op op = [&](const Inputs& in) {
    return ops::batch_norm_relu_conv2d(in[0], in[1], in[2], {}, {}, true, 0.1, 1e-5, in[3], {},
                                       {1, 1}, {1, 1}, {1, 1}, 1);
  };
  for (OpMode mode : kVariants) {
    expect_finite_differences(op, {bn.x, bn.weight, bn.bias, conv_weight}, mode);
  }
}

TEST(OpsTest, BatchNormReluConvRefusesBadArguments) {
  const torch::Tensor x = torch::randn({2, 3, 4, 4}).requires_grad_();
  const torch::Tensor w = torch::randn({3, 3, 3, 3});
  OpModeScope scope(OpMode::kCompact);
  EXPECT_THROW(ops::batch_norm_relu_conv2d(x.view({2, 3, 16}), {}, {}, {}, {}, true, 0.1, 1e-5, w,
                                           {}, {1, 1}, {1, 1}, {1, 1}, 1),
               c10::Error);
  EXPECT_THROW(ops::batch_norm_relu_conv2d(x, {}, {}, {}, {}, true, 0.1, 1e-5, w, {}, {1}, {1, 1},
                                           {1, 1}, 1),
               c10::Error);
}

// --- batch_norm_relu_conv2d_batch_norm ---

// The op against torch's four ops, in double, with the second BatchNorm's running statistics
// updated once by either.
void expect_block_middle_matches(const BatchNormCase& bn, const BatchNormCase& bn2,
                                 const ConvCase& c) {
  SCOPED_TRACE("kernel " + std::to_string(c.kernel) + " stride " + std::to_string(c.stride) +
               " groups " + std::to_string(c.groups));
  const auto [conv_weight, conv_bias] = c.parameters(bn.x.size(1));
  RunningStats stats, stats2;
  stats.reset(bn);
  stats2.reset(bn2);
  const Op op = [&](const Inputs& in) {
    return ops::batch_norm_relu_conv2d_batch_norm(
        in[0], {in[1], in[2], stats.mean_mine, stats.var_mine, 0.1, 1e-5},
        {in[3],
         c.bias ? in[6] : torch::Tensor(),
         {c.stride, c.stride},
         {c.padding, c.padding},
         {c.dilation, c.dilation},
         c.groups},
        {in[4], in[5], stats2.mean_mine, stats2.var_mine, 0.2, 1e-4}, true);
  };
  const Op ref = [&](const Inputs& in) {
    torch::Tensor y = torch::batch_norm(in[0], in[1], in[2], stats.mean_ref, stats.var_ref, true,
                                        0.1, 1e-5, false);
    y = torch::conv2d(torch::relu(y), in[3], c.bias ? in[6] : torch::Tensor(), c.stride, c.padding,
                      c.dilation, c.groups);
    return torch::batch_norm(y, in[4], in[5], stats2.mean_ref, stats2.var_ref, true, 0.2, 1e-4,
                             false);
  };
  Inputs inputs{bn.x, bn.weight, bn.bias, conv_weight, bn2.weight, bn2.bias};
  if (c.bias) inputs.push_back(conv_bias);
  expect_matches(op, ref, inputs, 1e-10);
  expect_statistics_updated_once(op, ref, inputs, {{&bn, &stats}, {&bn2, &stats2}});
}

TEST(OpsTest, BatchNormReluConvBatchNormMatchesTorch) {
  torch::manual_seed(15);
  const BatchNormCase bn = batch_norm_case({3, 4, 7, 6});
  expect_block_middle_matches(bn, batch_norm_case({1, 5, 1, 1}),
                              {5, 3, 1, 1, 1, 1, false});  // a basic block's
  expect_block_middle_matches(bn, batch_norm_case({1, 6, 1, 1}),
                              {6, 1, 2, 0, 1, 1, true});  // a downsampling 1x1
  expect_block_middle_matches(bn, batch_norm_case({1, 4, 1, 1}),
                              {4, 3, 2, 2, 2, 2, true});  // dilated, grouped
}

TEST(OpsTest, BatchNormReluConvBatchNormWithNearZeroWeights) {
  torch::manual_seed(16);
  BatchNormCase bn = batch_norm_case({4, 4, 5, 5});
  BatchNormCase bn2 = batch_norm_case({1, 3, 1, 1});
  {
    torch::NoGradGuard no_grad;
    bn.weight[1] = 0.0;
    bn.bias[3] = 1e4;
    bn2.weight[0] = 0.0;  // a zero-initialized last BatchNorm of a residual branch
    bn2.weight[2] = 1e-4;
  }
  expect_block_middle_matches(bn, bn2, {3, 3, 1, 1, 1, 1, true});
}

TEST(OpsTest, BatchNormReluConvBatchNormFiniteDifferences) {
  torch::manual_seed(17);
  const BatchNormCase bn = batch_norm_case({2, 2, 4, 4});
  const torch::Tensor conv_weight = torch::randn({3, 2, 3, 3}, f64()).requires_grad_();
  const torch::Tensor w2 = torch::randn({3}, f64()).add(1.5).requires_grad_();
  const torch::Tensor b2 = torch::randn({3}, f64()).requires_grad_();
  const Op op = [&](const Inputs& in) {
    return ops::batch_norm_relu_conv2d_batch_norm(in[0], {in[1], in[2], {}, {}},
                                                  {in[3], {}, {1, 1}, {1, 1}, {1, 1}, 1},
                                                  {in[4], in[5], {}, {}}, true);
  };
  for (OpMode mode : kVariants) {
    expect_finite_differences(op, {bn.x, bn.weight, bn.bias, conv_weight, w2, b2}, mode);
  }
}

TEST(OpsTest, BatchNormReluConvBatchNormRecomputesOnlyWhereAsked) {
  const torch::Tensor x = torch::randn({2, 3, 4, 4}).requires_grad_();
  const torch::Tensor w = torch::randn({3, 3, 3, 3}).requires_grad_();
  const auto call = [&] {
    return ops::batch_norm_relu_conv2d_batch_norm(x, {}, {w, {}, {1, 1}, {1, 1}, {1, 1}, 1}, {},
                                                  true);
  };
  for (OpMode mode : {OpMode::kDefault, OpMode::kCompact, OpMode::kRecompute}) {
    OpModeScope scope(mode);
    const std::uint64_t calls = variant_op_calls(), recomputing = recomputing_op_calls();
    const torch::Tensor y = call();
    EXPECT_EQ(variant_op_calls() - calls, 1u) << op_mode_name(mode);
    EXPECT_EQ(recomputing_op_calls() - recomputing, 1u) << op_mode_name(mode);
    ops::relu(x);
    EXPECT_EQ(recomputing_op_calls() - recomputing, 1u) << "relu recomputes nothing";
  }
  OpModeScope scope(OpMode::kRecompute);
  EXPECT_THROW(ops::batch_norm_relu_conv2d_batch_norm(x.view({2, 3, 16}), {},
                                                      {w, {}, {1, 1}, {1, 1}, {1, 1}, 1}, {}, true),
               c10::Error);
  EXPECT_THROW(
      ops::batch_norm_relu_conv2d_batch_norm(x, {}, {w, {}, {1}, {1, 1}, {1, 1}, 1}, {}, true),
      c10::Error);
  // Without a gradient, the plain ops.
  {
    torch::NoGradGuard no_grad;
    EXPECT_EQ(call().grad_fn(), nullptr);
  }
}

TEST(OpsTest, BatchNormInEvalIsThePlainOp) {
  BatchNormCase bn = batch_norm_case({2, 3, 4, 4});
  OpModeScope scope(OpMode::kCompact);
  torch::Tensor y = ops::batch_norm(bn.x, bn.weight, bn.bias, bn.mean, bn.var, false, 0.1, 1e-5);
  EXPECT_EQ(y.grad_fn()->name(),
            torch::batch_norm(bn.x, bn.weight, bn.bias, bn.mean, bn.var, false, 0.1, 1e-5, false)
                .grad_fn()
                ->name());
}

// --- max_pool2d ---

TEST(OpsTest, MaxPoolMatchesTorch) {
  for (const PoolCase& c : pool_cases()) {
    const Op op = max_pool_op(c);
    const Op ref = max_pool_reference(c);
    expect_matches(op, ref, {torch::randn({2, 3, 11, 10}, f64()).requires_grad_()}, 1e-10);
    expect_matches(op, ref, {torch::randn({3, 9, 9}, f64()).requires_grad_()}, 1e-10);
    for (OpMode mode : kVariants) {
      expect_finite_differences(op, {torch::randn({1, 2, 6, 6}, f64()).requires_grad_()}, mode);
    }
  }
}

// torch's pooling takes `val > maxval || isnan(val)`: the last NaN of a window is its argmax, and
// the gradient goes there.
TEST(OpsTest, MaxPoolGradientGoesToTorchsNan) {
  const float nan = std::nanf("");
  // Windows [NaN, NaN; 0, 0], [1, NaN; NaN, 2], [3, 4; 5, 6], [NaN, 0; 0, NaN].
  const torch::Tensor x = torch::tensor({nan, nan, 1.f, nan, 0.f, 0.f, nan, 2.f,  //
                                         3.f, 4.f, nan, 0.f, 5.f, 6.f, 0.f, nan})
                              .view({1, 1, 4, 4})
                              .requires_grad_();
  const torch::Tensor g = torch::randn({1, 1, 2, 2});
  const PoolCase c{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false};
  const Outcome want = run(max_pool_reference(c), {x}, g, OpMode::kDefault);
  for (OpMode mode : kVariants) {
    const Outcome got = run(max_pool_op(c), {x}, g, mode);
    EXPECT_NE(got.node, want.node);
    EXPECT_TRUE(torch::equal(got.grads[0], want.grads[0])) << op_mode_name(mode);
  }
  EXPECT_TRUE(torch::equal(want.grads[0].view({-1}).nonzero().view({-1}),
                           torch::tensor({1, 6, 13, 15}, torch::kLong)))
      << "the last NaN of each window";
}

// What torch's max_pool2d_with_indices refuses, the compact pooling refuses before it runs, with
// torch's message: its CUDA path sizes its output itself.
TEST(OpsTest, MaxPoolRefusesBadArgumentsWithTorchsMessages) {
  struct Bad {
    std::vector<std::int64_t> sizes, kernel, stride, padding, dilation;
    const char* what;
  };
  const std::vector<Bad> cases = {
      {{1, 2, 6, 6}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, "stride 0"},
      {{1, 2, 6, 6}, {2, 2}, {-1, 2}, {0, 0}, {1, 1}, "a negative stride"},
      {{1, 2, 6, 6}, {3, 3}, {1, 1}, {2, 2}, {1, 1}, "padding over half the kernel"},
      {{1, 2, 6, 6}, {3, 3}, {1, 1}, {-1, 0}, {1, 1}, "a negative padding"},
      {{1, 2, 6, 6}, {0, 2}, {1, 1}, {0, 0}, {1, 1}, "a kernel of 0"},
      {{1, 2, 6, 6}, {2, 2}, {2, 2}, {0, 0}, {0, 1}, "a dilation of 0"},
      {{1, 2, 6, 6}, {2, 2}, {2, 2, 2}, {0, 0}, {1, 1}, "three strides"},
      {{1, 2, 6, 6}, {2, 2}, {2, 2}, {}, {1, 1}, "no padding"},
      {{1, 2, 6, 6}, {2, 2}, {2, 2}, {0, 0}, {1, 1, 1}, "three dilations"},
      {{1, 2, 6, 6}, {2, 2, 2}, {2, 2}, {0, 0}, {1, 1}, "three kernel sizes"},
      {{1, 1, 2, 6, 6}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, "a 5-d input"},
      {{1, 2, 2, 2}, {3, 3}, {1, 1}, {0, 0}, {1, 1}, "an output of no elements"},
      {{1, 0, 6, 6}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, "no channels"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.what);
    const torch::Tensor x = torch::randn(c.sizes).requires_grad_();
    std::string want;
    try {
      at::max_pool2d_with_indices(x, c.kernel, c.stride, c.padding, c.dilation, false);
    } catch (const c10::Error& e) {
      want = e.msg();
    }
    ASSERT_FALSE(want.empty()) << "torch refuses it";
    for (OpMode mode : kVariants) {
      OpModeScope scope(mode);
      try {
        ops::max_pool2d(x, c.kernel, c.stride, c.padding, c.dilation, false);
        ADD_FAILURE() << op_mode_name(mode) << ": no error; torch's: " << want;
      } catch (const c10::Error& e) {
        EXPECT_EQ(e.msg(), want) << op_mode_name(mode);
      }
    }
  }
}

TEST(OpsTest, MaxPoolWindowsOver16PositionsRunThePlainOp) {
  torch::Tensor x = torch::randn({1, 1, 10, 10}).requires_grad_();
  OpModeScope scope(OpMode::kCompact);
  EXPECT_EQ(ops::max_pool2d(x, {5, 5}).grad_fn()->name(),
            torch::max_pool2d(x, {5, 5}).grad_fn()->name());
}

// --- gelu, softmax ---

TEST(OpsTest, GeluMatchesTorch) {
  for (const char* approximate : {"none", "tanh"}) {
    const Op op = [approximate](const Inputs& in) { return ops::gelu(in[0], approximate); };
    const Op ref = [approximate](const Inputs& in) { return torch::gelu(in[0], approximate); };
    const Inputs inputs{torch::randn({3, 4, 5}, f64()).requires_grad_()};
    expect_matches(op, ref, inputs, 0.0);
    for (OpMode mode : kVariants) expect_finite_differences(op, inputs, mode);
  }
}

TEST(OpsTest, SoftmaxMatchesTorch) {
  for (std::int64_t dim : {1, -1}) {
    const Op op = [dim](const Inputs& in) { return ops::softmax(in[0], dim); };
    const Op ref = [dim](const Inputs& in) { return torch::softmax(in[0], dim); };
    const Inputs inputs{torch::randn({3, 4, 5}, f64()).requires_grad_()};
    expect_matches(op, ref, inputs, 0.0);
    for (OpMode mode : kVariants) expect_finite_differences(op, inputs, mode);
  }
}

// --- gradients of gradients ---

// The gradient of a gradient through `op` in `mode`: with y = op(x * w) (w a scalar),
// L = sum(c * y * y) and gx = dL/dx kept as a graph (create_graph), the gradients of sum(gx * gx)
// with respect to x and w. The generator is seeded before the forward, for dropout's draw.
std::vector<torch::Tensor> second_order(const UnaryOp& op, const torch::Tensor& x0, OpMode mode) {
  const torch::Tensor x = x0.detach().clone().requires_grad_();
  const torch::Tensor w = torch::full({}, 1.5, f64()).requires_grad_();
  OpModeScope scope(mode);
  torch::manual_seed(3);
  const torch::Tensor y = op(x * w);
  const torch::Tensor c = torch::linspace(0.5, 1.5, y.numel(), f64()).view(y.sizes());
  const torch::Tensor gx = torch::autograd::grad({(c * y * y).sum()}, {x}, {},
                                                 /*retain_graph=*/true, /*create_graph=*/true)[0];
  return torch::autograd::grad({(gx * gx).sum()}, {x, w}, {}, /*retain_graph=*/false,
                               /*create_graph=*/false, /*allow_unused=*/true);
}

// `op` in every variant mode gives the gradients of a gradient that `ref` (torch's op) gives in
// double: the variants' backward builds a graph under create_graph, so second-order terms survive.
void expect_second_order_matches(const UnaryOp& op, const UnaryOp& ref, const torch::Tensor& x,
                                 const std::vector<OpMode>& modes) {
  const std::vector<torch::Tensor> want = second_order(ref, x, OpMode::kDefault);
  ASSERT_TRUE(want[0].defined() && want[1].defined());
  for (OpMode mode : modes) {
    SCOPED_TRACE(std::string(op_mode_name(mode)));
    const std::vector<torch::Tensor> got = second_order(op, x, mode);
    for (std::size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(got[i].defined()) << (i == 0 ? "x" : "w") << " has no second-order gradient";
      EXPECT_LE(max_diff(got[i], want[i]), 1e-10 * (1 + want[i].abs().max().item<double>()))
          << (i == 0 ? "x" : "w") << ": " << got[i].sum().item<double>() << " against torch's "
          << want[i].sum().item<double>();
    }
  }
}

const std::vector<OpMode> kVariantModes(std::begin(kVariants), std::end(kVariants));

TEST(OpsTest, GradientOfAGradientIsTorchs) {
  torch::manual_seed(31);
  const torch::Tensor x = away_from_zero(torch::randn({2, 3, 6, 5}, f64()));
  {
    SCOPED_TRACE("relu");
    expect_second_order_matches([](const torch::Tensor& t) { return ops::relu(t); },
                                [](const torch::Tensor& t) { return torch::relu(t); }, x,
                                kVariantModes);
  }
  {
    SCOPED_TRACE("dropout");
    const double p = 0.3;
    // compact draws torch's mask; regenerate its own, which `noise` replays (the same seed).
    expect_second_order_matches([p](const torch::Tensor& t) { return ops::dropout(t, p, true); },
                                [p](const torch::Tensor& t) { return torch::dropout(t, p, true); },
                                x, {OpMode::kCompact, OpMode::kRecompute});
    torch::Tensor noise;
    {
      OpModeScope scope(OpMode::kRegenerate);
      torch::NoGradGuard no_grad;
      torch::manual_seed(3);
      noise = ops::dropout(torch::ones_like(x), p, true);
    }
    expect_second_order_matches([p](const torch::Tensor& t) { return ops::dropout(t, p, true); },
                                [noise](const torch::Tensor& t) { return t * noise; }, x,
                                {OpMode::kRegenerate});
  }
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE("max_pool2d, kernel " + std::to_string(c.kernel[0]));
    expect_second_order_matches([&c](const torch::Tensor& t) { return max_pool_op(c)({t}); },
                                [&c](const torch::Tensor& t) { return max_pool_reference(c)({t}); },
                                x, kVariantModes);
  }
  {
    SCOPED_TRACE("gelu, softmax");
    expect_second_order_matches(
        [](const torch::Tensor& t) { return ops::softmax(ops::gelu(t), 1); },
        [](const torch::Tensor& t) { return torch::softmax(torch::gelu(t), 1); }, x, kVariantModes);
  }
}

// The output-keeping BatchNorms cannot give a gradient of their gradient: each refuses it with an
// error that names the op and the mode and says to run torch's op; in the default mode (torch's
// ops) it runs.
TEST(OpsTest, BatchNormVariantsRefuseAGradientOfAGradient) {
  torch::manual_seed(32);
  const BatchNormCase bn = batch_norm_case({2, 3, 4, 4});
  const torch::Tensor conv_w = torch::randn({3, 3, 3, 3}, f64()).requires_grad_();
  const ops::Conv2dArgs conv{conv_w, {}, {1, 1}, {1, 1}, {1, 1}, 1};
  const std::vector<std::pair<std::string, UnaryOp>> cases = {
      {"batch_norm",
       [&](const torch::Tensor& t) {
         return ops::batch_norm(t, bn.weight, bn.bias, {}, {}, true, 0.1, 1e-5);
       }},
      {"batch_norm_relu",
       [&](const torch::Tensor& t) {
         return ops::batch_norm_relu(t, bn.weight, bn.bias, {}, {}, true, 0.1, 1e-5);
       }},
      {"batch_norm_relu_conv2d",
       [&](const torch::Tensor& t) {
         return ops::batch_norm_relu_conv2d(t, bn.weight, bn.bias, {}, {}, true, 0.1, 1e-5, conv_w,
                                            {}, {1, 1}, {1, 1}, {1, 1}, 1);
       }},
      {"batch_norm_relu_conv2d_batch_norm",
       [&](const torch::Tensor& t) {
         return ops::batch_norm_relu_conv2d_batch_norm(t, {bn.weight, bn.bias, {}, {}}, conv,
                                                       {bn.weight, bn.bias, {}, {}}, true);
       }},
  };
  for (const auto& [name, op] : cases) {
    SCOPED_TRACE(name);
    EXPECT_NO_THROW(second_order(op, bn.x, OpMode::kDefault));
    for (OpMode mode : kVariants) {
      try {
        second_order(op, bn.x, mode);
        ADD_FAILURE() << op_mode_name(mode) << ": no error";
      } catch (const c10::Error& e) {
        const std::string message = e.msg();
        EXPECT_NE(message.find("monet::ops::" + name + " in mode " +
                               std::string(op_mode_name(mode)) + " has no double backward"),
                  std::string::npos)
            << message;
        EXPECT_NE(message.find("Run this op in OpMode::kDefault"), std::string::npos) << message;
      }
    }
  }
}

// --- autocast ---

// How far each gradient is from the reference's: the norm of the difference over the reference's.
std::vector<double> distances(const std::vector<torch::Tensor>& got,
                              const std::vector<torch::Tensor>& ref) {
  std::vector<double> out;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const torch::Tensor r = ref[i].to(torch::kDouble);
    out.push_back(
        ((got[i].to(torch::kDouble) - r).norm() / r.norm().clamp_min(1e-30)).item<double>());
  }
  return out;
}

// Half the gap between 1 and the next number of `dtype`: the largest relative error of one
// rounding to it.
double unit_roundoff(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16:
      return std::ldexp(1.0, -8);
    case torch::kHalf:
      return std::ldexp(1.0, -11);
    case torch::kFloat:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

// Under autocast (bfloat16 on the CPU), `op` in each of `modes` runs as `ref`, torch's ops, run
// under it: the same output dtype and values, each gradient in its input's dtype, and gradients
// no further from the fp64 ops' (without autocast) than twice torch's autocast gradients are, plus
// one rounding of the output's dtype and 1e-6. That allows the output-keeping BatchNorm, which
// recovers its input from its output rounded to bfloat16, to round once more; the exact variants
// give torch's numbers.
void expect_follows_autocast(const Op& op, const Op& ref, const Inputs& inputs,
                             const std::vector<OpMode>& modes) {
  kernels::AutocastState bf16;
  bf16.cpu = true;
  bf16.cpu_dtype = torch::kBFloat16;
  Inputs exact;
  for (const torch::Tensor& t : inputs) {
    exact.push_back(t.detach().to(torch::kDouble).requires_grad_(t.requires_grad()));
  }
  torch::manual_seed(7);
  const kernels::AutocastScope on(bf16);
  const torch::Tensor probe = ref(inputs);
  const torch::Tensor grad_y = torch::randn_like(probe, torch::kFloat);
  torch::manual_seed(1);
  const Outcome want = run(ref, inputs, grad_y.to(probe.scalar_type()), OpMode::kDefault);
  Outcome fp64;
  {
    const kernels::AutocastScope off{kernels::AutocastState()};
    torch::manual_seed(1);
    fp64 = run(ref, exact, grad_y.to(torch::kDouble), OpMode::kDefault);
  }
  const std::vector<double> torch_distance = distances(want.grads, fp64.grads);
  for (OpMode mode : modes) {
    SCOPED_TRACE(std::string(op_mode_name(mode)));
    torch::manual_seed(1);
    const Outcome got = run(op, inputs, grad_y.to(want.y.scalar_type()), mode);
    EXPECT_NE(got.node, want.node) << "no variant ran";
    ASSERT_EQ(got.y.scalar_type(), want.y.scalar_type());
    EXPECT_LE(max_diff(got.y.to(torch::kDouble), want.y.to(torch::kDouble)), 1e-6);
    ASSERT_EQ(got.grads.size(), want.grads.size());
    const std::vector<double> distance = distances(got.grads, fp64.grads);
    for (std::size_t i = 0; i < got.grads.size(); ++i) {
      ASSERT_TRUE(got.grads[i].defined()) << "input " << i;
      EXPECT_EQ(got.grads[i].scalar_type(), inputs[i].scalar_type()) << "input " << i;
      EXPECT_LE(distance[i], 2 * torch_distance[i] + unit_roundoff(want.y.scalar_type()) + 1e-6)
          << "input " << i << ": torch's autocast gradient is " << torch_distance[i]
          << " from fp64's";
    }
  }
}

// Every op under autocast, on an input in float32 (a model's first layer) and in bfloat16 (the
// output of a convolution under autocast), with float32 parameters. Before, the fused ops ran
// their convolution in float32 on a float32 input (torch's runs it in bfloat16), and threw on a
// bfloat16 one: "Input type (CPUBFloat16Type) and weight type (CPUFloatType) should be the same".
TEST(OpsTest, EveryOpFollowsAutocast) {
  torch::manual_seed(21);
  const auto f32 = torch::dtype(torch::kFloat);
  const torch::Tensor strong_w = torch::randn({6}, f32).add(1.5);
  const torch::Tensor b = torch::randn({6}, f32).requires_grad_();
  const torch::Tensor conv_w = torch::randn({5, 6, 3, 3}, f32).requires_grad_();
  const torch::Tensor conv_b = torch::randn({5}, f32).requires_grad_();
  const torch::Tensor strong_w2 = torch::randn({5}, f32).add(1.5);
  const torch::Tensor b2 = torch::randn({5}, f32).requires_grad_();
  // Running statistics, fresh for each call, in the dtype of the BatchNorm's weight `like`.
  const auto zeros = [](std::int64_t c, const torch::Tensor& like) {
    return torch::zeros({c}, like.scalar_type());
  };
  const auto ones = [](std::int64_t c, const torch::Tensor& like) {
    return torch::ones({c}, like.scalar_type());
  };
  const std::vector<OpMode> variants(std::begin(kVariants), std::end(kVariants));
  // With a channel of each BatchNorm at zero weight too (a zero-initialized residual BatchNorm),
  // which keeps its input slice in fp32 beside a low-precision output.
  for (bool weak : {false, true})
    for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (weak ? ", a weight at zero" : ""));
      const torch::Tensor w = strong_w.clone();
      const torch::Tensor w2 = strong_w2.clone();
      if (weak) {
        w[1] = 0.0;
        w2[0] = 0.0;
      }
      w.requires_grad_();
      w2.requires_grad_();
      const torch::Tensor x =
          torch::randn({4, 6, 8, 8}, f32).mul(2).add(0.5).to(dtype).requires_grad_();
      {
        SCOPED_TRACE("relu");
        expect_follows_autocast([](const Inputs& in) { return ops::relu(in[0]); },
                                [](const Inputs& in) { return torch::relu(in[0]); }, {x}, variants);
      }
      {
        SCOPED_TRACE("dropout");  // regenerate draws differently from torch by design
        expect_follows_autocast([](const Inputs& in) { return ops::dropout(in[0], 0.3, true); },
                                [](const Inputs& in) { return torch::dropout(in[0], 0.3, true); },
                                {x}, {OpMode::kCompact, OpMode::kRecompute});
      }
      {
        SCOPED_TRACE("max_pool2d");
        expect_follows_autocast(
            [](const Inputs& in) {
              return ops::max_pool2d(in[0], {2, 2});
            },
            [](const Inputs& in) {
              return torch::max_pool2d(in[0], {2, 2});
            },
            {x}, variants);
      }
      {
        SCOPED_TRACE("gelu and softmax");
        expect_follows_autocast(
            [](const Inputs& in) { return ops::softmax(ops::gelu(in[0]), 1); },
            [](const Inputs& in) { return torch::softmax(torch::gelu(in[0]), 1); }, {x}, variants);
      }
      for (bool fused : {false, true}) {
        SCOPED_TRACE(fused ? "batch_norm_relu" : "batch_norm");
        expect_follows_autocast(
            [&](const Inputs& in) {
              auto f = fused ? ops::batch_norm_relu : ops::batch_norm;
              return f(in[0], in[1], in[2], zeros(6, in[1]), ones(6, in[1]), true, 0.1, 1e-5);
            },
            [&](const Inputs& in) {
              torch::Tensor y = torch::batch_norm(in[0], in[1], in[2], zeros(6, in[1]),
                                                  ones(6, in[1]), true, 0.1, 1e-5, false);
              return fused ? torch::relu(y) : y;
            },
            {x, w, b}, variants);
      }
      const auto bn_relu_conv = [&](const Inputs& in) {
        const torch::Tensor y = torch::batch_norm(in[0], in[1], in[2], zeros(6, in[1]),
                                                  ones(6, in[1]), true, 0.1, 1e-5, false);
        return torch::conv2d(torch::relu(y), in[3], in[4], 1, 1);
      };
      {
        SCOPED_TRACE("batch_norm_relu_conv2d");
        expect_follows_autocast(
            [&](const Inputs& in) {
              return ops::batch_norm_relu_conv2d(in[0], in[1], in[2], zeros(6, in[1]),
                                                 ones(6, in[1]), true, 0.1, 1e-5, in[3], in[4],
                                                 {1, 1}, {1, 1}, {1, 1}, 1);
            },
            bn_relu_conv, {x, w, b, conv_w, conv_b}, variants);
      }
      {
        SCOPED_TRACE("batch_norm_relu_conv2d_batch_norm");
        expect_follows_autocast(
            [&](const Inputs& in) {
              return ops::batch_norm_relu_conv2d_batch_norm(
                  in[0], {in[1], in[2], zeros(6, in[1]), ones(6, in[1]), 0.1, 1e-5},
                  {in[3], in[4], {1, 1}, {1, 1}, {1, 1}, 1},
                  {in[5], in[6], zeros(5, in[5]), ones(5, in[5]), 0.1, 1e-5}, true);
            },
            [&](const Inputs& in) {
              return torch::batch_norm(bn_relu_conv(in), in[5], in[6], zeros(5, in[5]),
                                       ones(5, in[5]), true, 0.1, 1e-5, false);
            },
            {x, w, b, conv_w, conv_b, w2, b2}, variants);
      }
    }
}

}  // namespace
}  // namespace monet
