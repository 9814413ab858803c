// monet::ops on CUDA tensors: every variant against torch's own CUDA op in fp32, regenerated
// dropout against the CPU's draw, and the bytes the variants keep measured through monet's CUDA
// pool. Every test skips where LibTorch has no CUDA or no GPU is present (Debian's LibTorch is
// CPU only: these run on the GPU machine, docs/gpu.md).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "monet/allocator.h"
#include "monet/op_mode.h"
#include "monet/ops.h"
#include "op_check.h"

namespace monet {
namespace {

using namespace op_check;  // the helpers both devices' op tests share

// fp32 agreement: |a - b| within `relative` of b's largest magnitude (at least 1).
void expect_close(const torch::Tensor& got, const torch::Tensor& want, double relative,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = std::max(1.0, want.abs().max().item<double>());
  EXPECT_LE(max_diff(got, want), relative * scale) << what;
}

class OpsCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device, or LibTorch without CUDA";
    }
    install();  // before this process's first CUDA tensor, where no test made one yet
    torch::manual_seed(3);
  }

  torch::TensorOptions f32() const { return torch::dtype(torch::kFloat).device(torch::kCUDA, 0); }

  // Every variant mode of `op` against `reference` on the same CUDA inputs: the output and every
  // input's gradient to `relative`, and a variant's own autograd node in each mode.
  static void expect_matches(const Op& op, const Op& reference, const Inputs& inputs,
                             double relative) {
    const torch::Tensor grad_y = torch::randn_like(reference(inputs));
    const Outcome want = run(reference, inputs, grad_y, OpMode::kDefault);
    for (OpMode mode : kVariants) {
      const std::string name(op_mode_name(mode));
      const Outcome got = run(op, inputs, grad_y, mode);
      EXPECT_NE(got.node, want.node) << name << ": no variant ran";
      EXPECT_TRUE(got.y.is_cuda()) << name;
      expect_close(got.y, want.y, relative, name + " output");
      ASSERT_EQ(got.grads.size(), want.grads.size()) << name;
      for (std::size_t i = 0; i < got.grads.size(); ++i) {
        ASSERT_TRUE(got.grads[i].defined()) << name << " input " << i;
        expect_close(got.grads[i], want.grads[i], relative, name + " input " + std::to_string(i));
      }
    }
  }
};

TEST_F(OpsCudaTest, ReluIsTorchsBitForBit) {
  const Op op = [](const Inputs& in) { return ops::relu(in[0]); };
  const Op ref = [](const Inputs& in) { return torch::relu(in[0]); };
  // A length that is no multiple of the 32-bit mask words, and a transposed (strided) input.
  const torch::Tensor x = torch::randn({(1 << 20) + 7}, f32()).requires_grad_();
  const torch::Tensor strided = torch::randn({96, 130}, f32()).t().requires_grad_();
  for (const torch::Tensor& input : {x, strided}) {
    const torch::Tensor g = torch::randn(input.sizes(), f32());
    const Outcome want = run(ref, {input}, g, OpMode::kDefault);
    for (OpMode mode : kVariants) {
      const Outcome got = run(op, {input}, g, mode);
      EXPECT_TRUE(torch::equal(got.y, want.y)) << op_mode_name(mode);
      EXPECT_TRUE(torch::equal(got.grads[0], want.grads[0])) << op_mode_name(mode);
    }
  }
}

TEST_F(OpsCudaTest, CompactDropoutIsTorchsCudaDropoutBitForBit) {
  const double p = 0.3;
  const torch::Tensor x = torch::randn({4, 250'001}, f32());
  const torch::Tensor input = (x + 0.1 * x.sign()).requires_grad_();  // no zeros
  const torch::Tensor g = torch::randn(input.sizes(), f32());
  const Op op = [p](const Inputs& in) { return ops::dropout(in[0], p, true); };
  const Op ref = [p](const Inputs& in) { return torch::dropout(in[0], p, true); };
  torch::manual_seed(21);
  const Outcome want = run(ref, {input}, g, OpMode::kDefault);
  const torch::Tensor after_torch = torch::rand({8}, f32());
  torch::manual_seed(21);
  const Outcome got = run(op, {input}, g, OpMode::kCompact);
  EXPECT_NE(got.node, want.node);
  // torch's fused kernel draws the mask and scales; monet packs the mask and scales the gradient
  // as torch's backward does: the same bits both ways, and the generator left where torch's is.
  EXPECT_TRUE(torch::equal(got.y.view(torch::kInt), want.y.view(torch::kInt)));
  EXPECT_TRUE(torch::equal(got.grads[0].view(torch::kInt), want.grads[0].view(torch::kInt)));
  EXPECT_TRUE(torch::equal(torch::rand({8}, f32()), after_torch)) << "the generator moved alike";
  EXPECT_NEAR((got.y != 0).to(torch::kDouble).mean().item<double>(), 1 - p, 0.005);
}

TEST_F(OpsCudaTest, RegeneratingDropoutDrawsTheCpusMask) {
  const double p = 0.25;
  const torch::Tensor cpu = torch::randn({3, 100'003});
  const torch::Tensor x_cpu = (cpu + 0.1 * cpu.sign()).requires_grad_();
  const torch::Tensor x = x_cpu.detach().to(torch::kCUDA).requires_grad_();
  const torch::Tensor g = torch::randn(x.sizes(), f32());
  const Op op = [p](const Inputs& in) { return ops::dropout(in[0], p, true); };
  torch::manual_seed(17);
  const Outcome on_cpu = run(op, {x_cpu}, g.cpu(), OpMode::kRegenerate);
  torch::manual_seed(17);
  const Outcome got = run(op, {x}, g, OpMode::kRegenerate);
  // The same counter-based hash of the same seed on both devices: the same elements kept.
  EXPECT_TRUE(torch::equal((got.y != 0).cpu(), on_cpu.y != 0));
  expect_close(got.y.cpu(), on_cpu.y, 1e-6, "output against the CPU's");
  // The scale rounded as torch's CUDA dropout backward rounds it: 1 / (1 - p) in double, to float.
  const torch::Tensor noise = (got.y != 0).to(torch::kFloat) * static_cast<float>(1.0 / (1 - p));
  EXPECT_TRUE(torch::equal(got.grads[0], g * noise)) << "backward redraws the forward's mask";
  // A checkpoint's rerun without grad, after the generator is restored, draws alike.
  torch::manual_seed(17);
  torch::Tensor again;
  {
    OpModeScope scope(OpMode::kRegenerate);
    torch::NoGradGuard no_grad;
    again = ops::dropout(x, p, true);
  }
  EXPECT_TRUE(torch::equal(again, got.y));
}

struct BatchNormCuda {
  torch::Tensor x, weight, bias, mean_mine, var_mine, mean_ref, var_ref;
};

BatchNormCuda batch_norm_case(const torch::TensorOptions& options, std::int64_t channels) {
  const torch::Tensor mean = torch::zeros({channels}, options);
  const torch::Tensor var = torch::ones({channels}, options);
  return {torch::randn({8, channels, 12, 10}, options).mul(2).add(0.5).requires_grad_(),
          torch::randn({channels}, options).add(1.5).requires_grad_(),
          torch::randn({channels}, options).requires_grad_(),
          mean.clone(),
          var.clone(),
          mean.clone(),
          var.clone()};
}

// ops::batch_norm (`fused`: batch_norm_relu) on `bn`'s own running statistics, and torch's op
// on the reference's.
Op batch_norm_op(BatchNormCuda& bn, bool fused) {
  return [&bn, fused](const Inputs& in) {
    auto f = fused ? ops::batch_norm_relu : ops::batch_norm;
    return f(in[0], in[1], in[2], bn.mean_mine, bn.var_mine, true, 0.1, 1e-5);
  };
}
Op batch_norm_reference(BatchNormCuda& bn, bool fused) {
  return [&bn, fused](const Inputs& in) {
    const torch::Tensor y =
        torch::batch_norm(in[0], in[1], in[2], bn.mean_ref, bn.var_ref, true, 0.1, 1e-5, false);
    return fused ? torch::relu(y) : y;
  };
}

TEST_F(OpsCudaTest, BatchNormAndBatchNormReluMatchTorchsCudaOps) {
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "batch_norm_relu" : "batch_norm");
    BatchNormCuda bn = batch_norm_case(f32(), 16);
    expect_matches(batch_norm_op(bn, fused), batch_norm_reference(bn, fused),
                   {bn.x, bn.weight, bn.bias}, 1e-4);
  }
}

// On a device the channels whose weights are too small to invert are found once per change of
// the weights (kernels/batch_norm.cc, WeakChannelCache), not at every call: a weight zeroed in
// place after a call, as an optimizer's step changes it, must be seen at the next call (with a
// stale answer its channel's gradients would be NaN), and one made large again likewise.
TEST_F(OpsCudaTest, BatchNormSeesWeightsChangedInPlaceBetweenCalls) {
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "batch_norm_relu" : "batch_norm");
    BatchNormCuda bn = batch_norm_case(f32(), 8);
    const Op op = batch_norm_op(bn, fused);
    const Op ref = batch_norm_reference(bn, fused);
    expect_matches(op, ref, {bn.x, bn.weight, bn.bias}, 1e-4);
    {
      torch::NoGradGuard no_grad;
      bn.weight[2].zero_();      // a zero-initialized residual BatchNorm's
      bn.weight[5].fill_(1e-4);  // too small to invert
    }
    expect_matches(op, ref, {bn.x, bn.weight, bn.bias}, 1e-4);
    {
      torch::NoGradGuard no_grad;
      bn.weight[2].fill_(1.5);
      bn.weight[5].fill_(-2.0);
    }
    expect_matches(op, ref, {bn.x, bn.weight, bn.bias}, 1e-4);
  }
}

TEST_F(OpsCudaTest, BatchNormRunningStatisticsMoveOnceACall) {
  BatchNormCuda bn = batch_norm_case(f32(), 8);
  {
    OpModeScope scope(OpMode::kCompact);
    ops::batch_norm(bn.x, bn.weight, bn.bias, bn.mean_mine, bn.var_mine, true, 0.1, 1e-5);
  }
  torch::batch_norm(bn.x, bn.weight, bn.bias, bn.mean_ref, bn.var_ref, true, 0.1, 1e-5, false);
  expect_close(bn.mean_mine, bn.mean_ref, 1e-6, "running mean");
  expect_close(bn.var_mine, bn.var_ref, 1e-6, "running variance");
  EXPECT_GT(bn.mean_mine.abs().max().item<double>(), 0.0);
}

TEST_F(OpsCudaTest, BatchNormReluConvMatchesTorchsCudaOps) {
  BatchNormCuda bn = batch_norm_case(f32(), 16);
  const torch::Tensor conv_weight = torch::randn({24, 16, 3, 3}, f32()).mul(0.1).requires_grad_();
  const Op op = [&](const Inputs& in) {
    return ops::batch_norm_relu_conv2d(in[0], in[1], in[2], bn.mean_mine, bn.var_mine, true, 0.1,
                                       1e-5, in[3], {}, {1, 1}, {1, 1}, {1, 1}, 1);
  };
  const Op ref = [&](const Inputs& in) {
    const torch::Tensor y =
        torch::batch_norm(in[0], in[1], in[2], bn.mean_ref, bn.var_ref, true, 0.1, 1e-5, false);
    return torch::conv2d(torch::relu(y), in[3], {}, 1, 1);
  };
  // The convolution's own kernels on both sides (TF32 or not alike); the BatchNorm's x_hat is
  // recovered from its fp32 output, which rounds once more.
  expect_matches(op, ref, {bn.x, bn.weight, bn.bias, conv_weight}, 1e-4);
}

TEST_F(OpsCudaTest, BatchNormReluConvBatchNormMatchesTorchsCudaOps) {
  BatchNormCuda bn = batch_norm_case(f32(), 16);
  BatchNormCuda bn2 = batch_norm_case(f32(), 24);
  const torch::Tensor conv_weight = torch::randn({24, 16, 3, 3}, f32()).mul(0.1).requires_grad_();
  const Op op = [&](const Inputs& in) {
    return ops::batch_norm_relu_conv2d_batch_norm(
        in[0], {in[1], in[2], bn.mean_mine, bn.var_mine, 0.1, 1e-5},
        {in[3], {}, {1, 1}, {1, 1}, {1, 1}, 1},
        {in[4], in[5], bn2.mean_mine, bn2.var_mine, 0.1, 1e-5}, true);
  };
  const Op ref = [&](const Inputs& in) {
    const torch::Tensor y =
        torch::batch_norm(in[0], in[1], in[2], bn.mean_ref, bn.var_ref, true, 0.1, 1e-5, false);
    const torch::Tensor c = torch::conv2d(torch::relu(y), in[3], {}, 1, 1);
    return torch::batch_norm(c, in[4], in[5], bn2.mean_ref, bn2.var_ref, true, 0.1, 1e-5, false);
  };
  // The recomputed convolution runs the forward's kernel again; the second BatchNorm's backward
  // is then torch's own on the same input.
  expect_matches(op, ref, {bn.x, bn.weight, bn.bias, conv_weight, bn2.weight, bn2.bias}, 1e-4);
}

TEST_F(OpsCudaTest, MaxPoolMatchesTorchsCudaOp) {
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE("kernel " + std::to_string(c.kernel[0]) + "x" + std::to_string(c.kernel[1]));
    const Op op = max_pool_op(c);
    const Op ref = max_pool_reference(c);
    // Overlapping windows add several gradients into one input element, in an order of their
    // own on each side: equal to fp32 rounding.
    expect_matches(op, ref, {torch::randn({4, 16, 33, 30}, f32()).requires_grad_()}, 1e-6);
    expect_matches(op, ref, {torch::randn({5, 19, 19}, f32()).requires_grad_()}, 1e-6);
  }
}

TEST_F(OpsCudaTest, GeluAndSoftmaxAreTorchs) {
  const torch::Tensor x = torch::randn({6, 40, 64}, f32()).requires_grad_();
  const Op gelu = [](const Inputs& in) { return ops::gelu(in[0], "tanh"); };
  const Op gelu_ref = [](const Inputs& in) { return torch::gelu(in[0], "tanh"); };
  expect_matches(gelu, gelu_ref, {x}, 0.0);
  const Op softmax = [](const Inputs& in) { return ops::softmax(in[0], -1); };
  const Op softmax_ref = [](const Inputs& in) { return torch::softmax(in[0], -1); };
  expect_matches(softmax, softmax_ref, {x}, 0.0);
}

// On CUDA tensors of other dtypes than float32 (a half-precision model, autocast's float16
// activations, float64), relu and dropout keep their 1-bit masks through ATen operations
// (kernels/bit_pack.h, `*_aten`), with torch's outputs and gradients bit for bit; max_pool2d,
// whose codes' kernels take float32 only, runs torch's own op in every mode. Until 2026-11-27
// all three threw there in a non-default mode.
TEST_F(OpsCudaTest, OtherDtypesOnCuda) {
  for (torch::ScalarType dtype : {torch::kHalf, torch::kBFloat16, torch::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    const torch::Tensor x = torch::randn({2, 3, 8, 8}, torch::dtype(dtype).device(torch::kCUDA, 0));
    struct Row {
      const char* name;
      Op op, ref;
      std::vector<OpMode> modes;
      bool variant;  // a variant runs (else torch's op)
    };
    const Row rows[] = {
        {"relu",
         [](const Inputs& in) { return ops::relu(in[0]); },
         [](const Inputs& in) { return torch::relu(in[0]); },
         {OpMode::kCompact, OpMode::kRecompute, OpMode::kRegenerate},
         true},
        // Regenerating dropout draws its own mask, not torch's.
        {"dropout",
         [](const Inputs& in) { return ops::dropout(in[0], 0.5, true); },
         [](const Inputs& in) { return torch::dropout(in[0], 0.5, true); },
         {OpMode::kCompact, OpMode::kRecompute},
         true},
        {"max_pool2d",
         [](const Inputs& in) {
           return ops::max_pool2d(in[0], {2, 2});
         },
         [](const Inputs& in) {
           return torch::max_pool2d(in[0], {2, 2});
         },
         {OpMode::kCompact, OpMode::kRecompute, OpMode::kRegenerate},
         false},
    };
    for (const Row& row : rows) {
      SCOPED_TRACE(row.name);
      const Inputs inputs{x.clone().requires_grad_()};
      torch::manual_seed(3);
      const torch::Tensor probe = row.ref(inputs);
      const torch::Tensor grad_y = torch::randn_like(probe);
      torch::manual_seed(3);
      const Outcome want = run(row.ref, inputs, grad_y, OpMode::kDefault);
      for (OpMode mode : row.modes) {
        SCOPED_TRACE(std::string(op_mode_name(mode)));
        torch::manual_seed(3);
        const Outcome got = run(row.op, inputs, grad_y, mode);
        if (row.variant) {
          EXPECT_NE(got.node, want.node) << "no variant ran";
        } else {
          EXPECT_EQ(got.node, want.node);
        }
        EXPECT_TRUE(torch::equal(got.y, want.y));
        ASSERT_EQ(got.grads.size(), 1u);
        EXPECT_TRUE(torch::equal(got.grads[0], want.grads[0]));
      }
    }
  }
}

// A BatchNorm of float16 or bfloat16 activations with float32 weights (autocast's), one channel
// at weight zero (a zero-initialized residual BatchNorm, which keeps its input slice): backward
// runs in float32 on ATen's kernel there and gives torch's gradients, in the activations' dtype.
TEST_F(OpsCudaTest, BatchNormWithAWeightAtZeroTakesLowPrecisionActivations) {
  const auto f32_cuda = torch::dtype(torch::kFloat).device(torch::kCUDA, 0);
  for (torch::ScalarType dtype : {torch::kHalf, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const torch::Tensor x = torch::randn({4, 3, 8, 8}, f32_cuda).to(dtype).requires_grad_();
    const torch::Tensor w = torch::tensor({1.0f, 0.0f, 0.5f}, f32_cuda).requires_grad_();
    const torch::Tensor b = torch::tensor({0.1f, 0.2f, -0.3f}, f32_cuda).requires_grad_();
    const Op ref = [](const Inputs& in) {
      return torch::batch_norm(in[0], in[1], in[2], {}, {}, true, 0.1, 1e-5, false);
    };
    const Op op = [](const Inputs& in) {
      return ops::batch_norm(in[0], in[1], in[2], {}, {}, true, 0.1, 1e-5);
    };
    const torch::Tensor grad_y = torch::randn({4, 3, 8, 8}, f32_cuda).to(dtype);
    const Outcome want = run(ref, {x, w, b}, grad_y, OpMode::kDefault);
    for (OpMode mode : kVariants) {
      SCOPED_TRACE(std::string(op_mode_name(mode)));
      Outcome got;
      ASSERT_NO_THROW(got = run(op, {x, w, b}, grad_y, mode));
      EXPECT_NE(got.node, want.node) << "no variant ran";
      ASSERT_EQ(got.grads.size(), 3u);
      for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(got.grads[i].scalar_type(), want.grads[i].scalar_type()) << "input " << i;
        const double scale = want.grads[i].abs().max().item<double>() + 1.0;
        EXPECT_LE(max_diff(got.grads[i].to(torch::kDouble), want.grads[i].to(torch::kDouble)),
                  2e-2 * scale)
            << "input " << i;
      }
    }
  }
}

TEST_F(OpsCudaTest, VariantsKeepTheirCataloguedBytesOnCuda) {
  try {
    memory_stats(0);
  } catch (const std::out_of_range&) {
    GTEST_SKIP() << "monet's CUDA pool does not serve this LibTorch's CUDA tensors";
  }
  const torch::Tensor leaf = torch::randn({8, 16, 32, 32}, f32()).requires_grad_();
  const double n = static_cast<double>(leaf.numel());
  struct Row {
    const char* name;
    UnaryOp op;
    double torch_bytes, compact_bytes;  // per input element, fp32 (docs/kernels.md)
  };
  const Row rows[] = {
      {"relu", [](const torch::Tensor& x) { return ops::relu(x); }, 4, 0.125},
      {"dropout", [](const torch::Tensor& x) { return ops::dropout(x, 0.5, true); }, 4, 0.125},
      {"max_pool2d",
       [](const torch::Tensor& x) {
         return ops::max_pool2d(x, {2, 2});
       },
       6, 0.125},
  };
  for (const Row& row : rows) {
    // Allowance: the pool rounds each block to 512 bytes, and torch's dropout on CUDA keeps a
    // byte mask, not fp32 noise: at most what the catalogue says, and the variant far less.
    const double slack = 4096;
    const auto plain = static_cast<double>(kept_by(row.op, leaf, OpMode::kDefault).bytes);
    const auto compact = static_cast<double>(kept_by(row.op, leaf, OpMode::kCompact).bytes);
    EXPECT_LE(plain, row.torch_bytes * n + slack) << row.name;
    EXPECT_NEAR(compact, row.compact_bytes * n, slack) << row.name;
    EXPECT_LT(compact * 4, plain) << row.name;
  }
  const std::int64_t regenerate =
      kept_by([](const torch::Tensor& x) { return ops::dropout(x, 0.5, true); }, leaf,
              OpMode::kRegenerate)
          .bytes;
  EXPECT_LE(regenerate, 4096) << "regenerated dropout keeps only its key";
}

}  // namespace
}  // namespace monet
