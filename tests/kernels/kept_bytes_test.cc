// The bytes each variant keeps for backward, measured through monet's CPU allocator against the
// plain torch op's, and against the catalogue (kernels/catalogue.h). A forward runs on a fresh
// non-leaf input; then the input and the output are dropped, and only the autograd node is held:
// what stays allocated is what the op keeps for backward. Printed with MONET_TEST_VERBOSE.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>

#include "allocator/device_pools.h"
#include "kernels/catalogue.h"
#include "monet/allocator.h"
#include "monet/op_mode.h"
#include "monet/ops.h"
#include "op_check.h"

namespace monet {
namespace {

using op_check::in_use;
using op_check::Kept;
using op_check::kept_by;
using op_check::UnaryOp;

class KeptBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    install();
    // LibTorch seeds its generator at random in every process: the draws below would differ
    // from run to run.
    torch::manual_seed(3);
  }

  // Measures `op` in every mode on `leaf`, checks each against the catalogue entry of `name`
  // (per input element, fp32, to within `slack` bytes for per-channel and rounding terms), and
  // returns the kept bytes per mode.
  std::vector<Kept> measure(const char* name, const UnaryOp& op, const torch::Tensor& leaf,
                            std::int64_t slack) {
    std::vector<Kept> out;
    const double n = static_cast<double>(leaf.numel());
    // Indices 0 to 3: default, compact, regenerate, recompute.
    for (OpMode mode :
         {OpMode::kDefault, OpMode::kCompact, OpMode::kRegenerate, OpMode::kRecompute}) {
      const Kept k = kept_by(op, leaf, mode);
      const kernels::VariantEntry* entry = kernels::find_variant(name, mode);
      EXPECT_NE(entry, nullptr);
      if (entry != nullptr) {
        EXPECT_NEAR(static_cast<double>(k.bytes), entry->kept_bytes * n, static_cast<double>(slack))
            << name << " " << op_mode_name(mode);
      }
      if (std::getenv("MONET_TEST_VERBOSE") != nullptr) {
        std::printf("%-16s %-10s kept %10lld B (%.4f B/elem)  beyond output %10lld B\n", name,
                    std::string(op_mode_name(mode)).c_str(), static_cast<long long>(k.bytes),
                    static_cast<double>(k.bytes) / n, static_cast<long long>(k.beyond_output));
      }
      out.push_back(k);
    }
    return out;
  }
};

torch::Tensor activations() { return torch::randn({8, 16, 32, 32}).requires_grad_(); }

TEST_F(KeptBytesTest, ReluCompactKeepsAThirtySecond) {
  const torch::Tensor x = activations();
  auto k = measure(
      "relu", [](const torch::Tensor& t) { return ops::relu(t); }, x, 64);
  EXPECT_EQ(k[0].bytes, static_cast<std::int64_t>(x.nbytes()));
  EXPECT_LE(k[1].bytes, k[0].bytes / 32 + 64);
  EXPECT_LE(k[2].bytes, k[0].bytes / 32 + 64);
}

TEST_F(KeptBytesTest, DropoutCompactKeepsAThirtySecondAndRegenerateNothing) {
  const torch::Tensor x = activations();
  auto k = measure(
      "dropout", [](const torch::Tensor& t) { return ops::dropout(t, 0.5, true); }, x, 64);
  EXPECT_EQ(k[0].bytes, static_cast<std::int64_t>(x.nbytes()));
  EXPECT_LE(k[1].bytes, k[0].bytes / 32 + 64);
  EXPECT_EQ(k[2].bytes, 0);
}

TEST_F(KeptBytesTest, BatchNormKeepsItsOutputNotItsInput) {
  const torch::Tensor x = activations();
  // Weights away from zero: a channel whose weight is too small to invert keeps its slice of the
  // input (32 KiB here), which these counts leave out.
  torch::Tensor w = torch::rand({16}).add(0.5).requires_grad_();
  torch::Tensor b = torch::randn({16}).requires_grad_();
  torch::Tensor mean = torch::zeros({16}), var = torch::ones({16});
  const std::int64_t stats = 2 * 16 * 4;
  auto k = measure(
      "batch_norm",
      [&](const torch::Tensor& t) { return ops::batch_norm(t, w, b, mean, var, true, 0.1, 1e-5); },
      x, stats);
  // The same bytes alone; but beyond an output that the next op keeps anyway, the default keeps
  // its whole input and the variants only their statistics.
  EXPECT_EQ(k[0].beyond_output, static_cast<std::int64_t>(x.nbytes()) + stats);
  EXPECT_EQ(k[1].beyond_output, stats);
  EXPECT_EQ(k[2].beyond_output, stats);
}

TEST_F(KeptBytesTest, BatchNormReluKeepsHalfOfTorchsPair) {
  const torch::Tensor x = activations();
  // Weights away from zero: a channel whose weight is too small to invert keeps its slice of the
  // input (32 KiB here), which these counts leave out.
  torch::Tensor w = torch::rand({16}).add(0.5).requires_grad_();
  torch::Tensor b = torch::randn({16}).requires_grad_();
  torch::Tensor mean = torch::zeros({16}), var = torch::ones({16});
  auto k = measure(
      "batch_norm_relu",
      [&](const torch::Tensor& t) {
        return ops::batch_norm_relu(t, w, b, mean, var, true, 0.1, 1e-5);
      },
      x, 2 * 16 * 4);
  EXPECT_LE(k[1].bytes, k[0].bytes / 2 + 2 * 16 * 4);
}

TEST_F(KeptBytesTest, BatchNormReluConvKeepsOneTensorNotTwo) {
  const torch::Tensor x = activations();
  torch::Tensor w = torch::rand({16}).add(0.5).requires_grad_();
  torch::Tensor b = torch::randn({16}).requires_grad_();
  torch::Tensor mean = torch::zeros({16}), var = torch::ones({16});
  // A basic block's second convolution; its weight is a leaf held here, not kept bytes.
  torch::Tensor conv_weight = torch::randn({16, 16, 3, 3}).mul(0.1).requires_grad_();
  auto k = measure(
      "batch_norm_relu_conv2d",
      [&](const torch::Tensor& t) {
        return ops::batch_norm_relu_conv2d(t, w, b, mean, var, true, 0.1, 1e-5, conv_weight, {},
                                           {1, 1}, {1, 1}, {1, 1}, 1);
      },
      x, 2 * 16 * 4);
  EXPECT_EQ(k[0].bytes, 2 * static_cast<std::int64_t>(x.nbytes()) + 2 * 16 * 4);
  EXPECT_LE(k[1].bytes, k[0].bytes / 2 + 2 * 16 * 4);
}

TEST_F(KeptBytesTest, BatchNormReluConvBatchNormRecomputingKeepsOneTensorNotThree) {
  const torch::Tensor x = activations();
  torch::Tensor w = torch::rand({16}).add(0.5).requires_grad_();
  torch::Tensor b = torch::randn({16}).requires_grad_();
  torch::Tensor w2 = torch::rand({16}).add(0.5).requires_grad_();
  torch::Tensor b2 = torch::randn({16}).requires_grad_();
  // A basic block's second convolution; its weight is a leaf held here, not kept bytes.
  torch::Tensor conv_weight = torch::randn({16, 16, 3, 3}).mul(0.1).requires_grad_();
  const std::int64_t stats = 2 * 2 * 16 * 4;
  auto k = measure(
      "batch_norm_relu_conv2d_batch_norm",
      [&](const torch::Tensor& t) {
        return ops::batch_norm_relu_conv2d_batch_norm(
            t, {w, b, torch::zeros({16}), torch::ones({16})},
            {conv_weight, {}, {1, 1}, {1, 1}, {1, 1}, 1},
            {w2, b2, torch::zeros({16}), torch::ones({16})}, true);
      },
      x, 2 * stats);  // torch's BatchNorms keep vectors of their own too
  const auto tensor = static_cast<std::int64_t>(x.nbytes());
  EXPECT_GE(k[0].bytes, 3 * tensor);
  EXPECT_LE(k[1].bytes, 2 * tensor + stats);
  EXPECT_LE(k[3].bytes, tensor + stats);
  EXPECT_LE(k[2].bytes, tensor + stats);
  // The compact op's output is the second BatchNorm's kept output: beyond it, one tensor.
  EXPECT_LE(k[1].beyond_output, tensor + stats);
}

TEST_F(KeptBytesTest, BatchNormWeakChannelsKeepTheirInputSlice) {
  const torch::Tensor x = activations();
  torch::Tensor w = torch::ones({16}).requires_grad_();
  {
    torch::NoGradGuard no_grad;
    w[3] = 0.0;
  }
  torch::Tensor b = torch::zeros({16}).requires_grad_();
  const Kept k = kept_by(
      [&](const torch::Tensor& t) { return ops::batch_norm(t, w, b, {}, {}, true, 0.1, 1e-5); }, x,
      OpMode::kCompact);
  const std::int64_t slice = static_cast<std::int64_t>(x.nbytes()) / 16;
  EXPECT_NEAR(static_cast<double>(k.beyond_output), static_cast<double>(slice), 2 * 16 * 4 + 8);
}

// The bytes a backward allocates beyond what was held when it began: its transient peak.
std::int64_t backward_peak(const UnaryOp& op, const torch::Tensor& leaf,
                           const std::vector<torch::Tensor>& parameters, OpMode mode) {
  torch::Tensor y;
  {
    OpModeScope scope(mode);
    y = op(leaf * 1.0);
  }
  const torch::Tensor g = torch::randn_like(y);
  for (torch::Tensor t : parameters) t.mutable_grad() = torch::Tensor();
  const std::int64_t before = in_use();
  pools::cpu().reset_peaks();
  torch::autograd::grad({y}, parameters, {g});
  return static_cast<std::int64_t>(memory_stats(kCpu).peak_requested_bytes) - before;
}

TEST_F(KeptBytesTest, BatchNormVariantsBackwardAllocateNoMoreThanTorchs) {
  // x_hat is recovered inside torch's backward kernel (save_mean = bias, save_invstd = 1 /
  // weight), not as a tensor of its own: the variants' backward holds what torch's holds, the
  // gradients, and per-channel vectors.
  const torch::Tensor x = activations();
  torch::Tensor w = torch::rand({16}).add(0.5).requires_grad_();
  torch::Tensor b = torch::randn({16}).requires_grad_();
  torch::Tensor conv_weight = torch::randn({16, 16, 3, 3}).mul(0.1).requires_grad_();
  const std::int64_t vectors = 16 * 16 * 4;
  const UnaryOp ops_under_test[] = {
      [&](const torch::Tensor& t) { return ops::batch_norm(t, w, b, {}, {}, true, 0.1, 1e-5); },
      [&](const torch::Tensor& t) {
        return ops::batch_norm_relu(t, w, b, {}, {}, true, 0.1, 1e-5);
      },
      [&](const torch::Tensor& t) {
        return ops::batch_norm_relu_conv2d(t, w, b, {}, {}, true, 0.1, 1e-5, conv_weight, {},
                                           {1, 1}, {1, 1}, {1, 1}, 1);
      },
  };
  const char* names[] = {"batch_norm", "batch_norm_relu", "batch_norm_relu_conv2d"};
  for (std::size_t i = 0; i < 3; ++i) {
    std::vector<torch::Tensor> parameters{x, w, b};
    if (i == 2) parameters.push_back(conv_weight);
    const std::int64_t plain = backward_peak(ops_under_test[i], x, parameters, OpMode::kDefault);
    for (OpMode mode : {OpMode::kCompact, OpMode::kRegenerate}) {
      const std::int64_t variant = backward_peak(ops_under_test[i], x, parameters, mode);
      if (std::getenv("MONET_TEST_VERBOSE") != nullptr) {
        std::printf("%-24s %-10s backward peak %10lld B (torch's %lld B)\n", names[i],
                    std::string(op_mode_name(mode)).c_str(), static_cast<long long>(variant),
                    static_cast<long long>(plain));
      }
      // The fused convolution recomputes relu(y), one tensor, which torch's has kept instead.
      const std::int64_t recomputed = i == 2 ? static_cast<std::int64_t>(x.nbytes()) : 0;
      EXPECT_LE(variant, plain + recomputed + vectors) << names[i] << " " << op_mode_name(mode);
    }
  }
}

TEST_F(KeptBytesTest, MaxPoolKeepsHalfAByteAnOutput) {
  const torch::Tensor x = activations();
  auto k = measure(
      "max_pool2d",
      [](const torch::Tensor& t) {
        return ops::max_pool2d(t, {2, 2});
      },
      x, 64);
  const std::int64_t outputs = x.numel() / 4;
  EXPECT_EQ(k[0].bytes, static_cast<std::int64_t>(x.nbytes()) + 8 * outputs);
  EXPECT_LE(k[1].bytes, outputs / 2 + 64);
  EXPECT_LE(k[1].bytes * 40, k[0].bytes);
}

TEST_F(KeptBytesTest, GeluAndSoftmaxKeepWhatTorchKeeps) {
  const torch::Tensor x = activations();
  auto g = measure(
      "gelu", [](const torch::Tensor& t) { return ops::gelu(t); }, x, 0);
  auto s = measure(
      "softmax", [](const torch::Tensor& t) { return ops::softmax(t, 1); }, x, 0);
  for (int m = 1; m < 3; ++m) {
    EXPECT_EQ(g[m].bytes, g[0].bytes);
    EXPECT_EQ(s[m].bytes, s[0].bytes);
  }
}

}  // namespace
}  // namespace monet
