// Forward + backward time (BM_Variant) and forward time (BM_VariantForward) of each operator
// variant against the plain torch op (mode 0), on an
// activation of 8 x 64 x 32 x 32 fp32 (8 MiB) or MONET_BENCH_SHAPE (NxCxHxW, e.g. 8x16x24x24, a
// block of the CPU CNN), on the CPU or on MONET_BENCH_DEVICE (e.g. cuda:0, in a build against a
// CUDA LibTorch). docs/kernels.md has the figures and the machine.
//   build/kernels/kernels_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "monet/allocator.h"
#include "monet/op_mode.h"
#include "monet/ops.h"

namespace {

torch::Device bench_device() {
  const char* name = std::getenv("MONET_BENCH_DEVICE");
  return torch::Device(name != nullptr ? name : "cpu");
}

// The activation's sizes: MONET_BENCH_SHAPE as NxCxHxW, else 8x64x32x32.
const std::vector<std::int64_t>& bench_shape() {
  static const std::vector<std::int64_t> shape = [] {
    const char* text = std::getenv("MONET_BENCH_SHAPE");
    if (text == nullptr) return std::vector<std::int64_t>{8, 64, 32, 32};
    std::vector<std::int64_t> sizes;
    std::istringstream in(text);
    std::string part;
    while (std::getline(in, part, 'x')) {
      const long long v = std::atoll(part.c_str());
      if (v <= 0) break;
      sizes.push_back(v);
    }
    if (sizes.size() != 4) {
      throw std::invalid_argument("MONET_BENCH_SHAPE='" + std::string(text) +
                                  "': give four positive sizes as NxCxHxW, e.g. 8x16x24x24");
    }
    return sizes;
  }();
  return shape;
}

std::int64_t bench_channels() { return bench_shape()[1]; }

using UnaryOp = std::function<torch::Tensor(const torch::Tensor&)>;

struct Case {
  const char* name;
  UnaryOp op;
};

const std::vector<Case>& cases() {
  // Before the first tensor: LibTorch's CUDA allocator cannot be swapped once it has served one.
  // Tensors then come from monet's pool, as in training under monet: through the system
  // allocator, page faults of freed and re-grown heap would be much of a small op's time.
  static const bool installed = [] {
    monet::install();
    return true;
  }();
  (void)installed;
  static const auto* weight =
      new torch::Tensor(torch::rand({bench_channels()}, bench_device()).add(0.5).requires_grad_());
  static const auto* bias =
      new torch::Tensor(torch::randn({bench_channels()}, bench_device()).requires_grad_());
  // A basic block's two convolutions, C -> C channels, 3x3.
  static const auto* conv1 =
      new torch::Tensor(torch::randn({bench_channels(), bench_channels(), 3, 3}, bench_device())
                            .mul(0.05)
                            .requires_grad_());
  static const auto* conv2 = new torch::Tensor(conv1->detach().clone().requires_grad_());
  static const std::vector<Case> all = {
      {"relu", [](const torch::Tensor& x) { return monet::ops::relu(x); }},
      {"dropout", [](const torch::Tensor& x) { return monet::ops::dropout(x, 0.1, true); }},
      {"batch_norm",
       [](const torch::Tensor& x) {
         return monet::ops::batch_norm(x, *weight, *bias, {}, {}, true, 0.1, 1e-5);
       }},
      {"batch_norm_relu",
       [](const torch::Tensor& x) {
         return monet::ops::batch_norm_relu(x, *weight, *bias, {}, {}, true, 0.1, 1e-5);
       }},
      {"batch_norm_relu_conv2d",
       [](const torch::Tensor& x) {
         // A basic block's second convolution.
         return monet::ops::batch_norm_relu_conv2d(x, *weight, *bias, {}, {}, true, 0.1, 1e-5,
                                                   *conv2, {}, {1, 1}, {1, 1}, {1, 1}, 1);
       }},
      {"basic_block",
       [](const torch::Tensor& x) {
         // A ResNet basic block as the CNN workload builds it: conv, the fused
         // BatchNorm-ReLU-conv-BatchNorm in the mode, the shortcut's add and torch's ReLU.
         const torch::Tensor a = torch::conv2d(x, *conv1, {}, 1, 1);
         const torch::Tensor d = monet::ops::batch_norm_relu_conv2d_batch_norm(
             a, {*weight, *bias, {}, {}}, {*conv2, {}, {1, 1}, {1, 1}, {1, 1}, 1},
             {*weight, *bias, {}, {}}, true);
         return torch::relu(d + x);  // torch's: the block's output is held anyway
       }},
      {"max_pool2d",
       [](const torch::Tensor& x) {
         return monet::ops::max_pool2d(x, {2, 2});
       }},
      {"gelu", [](const torch::Tensor& x) { return monet::ops::gelu(x); }},
      {"softmax", [](const torch::Tensor& x) { return monet::ops::softmax(x, 1); }},
  };
  return all;
}

// Forward and backward (BM_Variant), or the forward alone with grad, so that each mode keeps what
// it keeps (BM_VariantForward: what a variant adds to the forward, which a checkpointed stage pays
// twice).
void run_variant(benchmark::State& state, bool backward) {
  const Case& c = cases()[static_cast<std::size_t>(state.range(0))];
  const auto mode = static_cast<monet::OpMode>(state.range(1));
  state.SetLabel(std::string(c.name) + "/" + std::string(monet::op_mode_name(mode)));
  const torch::Tensor x = torch::randn(bench_shape(), bench_device()).requires_grad_();
  const bool cuda = bench_device().is_cuda();
  for (auto _ : state) {
    torch::Tensor y;
    {
      monet::OpModeScope scope(mode);
      y = c.op(x);
    }
    if (backward) {
      y.backward(torch::ones_like(y));
      benchmark::DoNotOptimize(x.grad().data_ptr());
      x.mutable_grad() = torch::Tensor();
    } else {
      benchmark::DoNotOptimize(y.data_ptr());
    }
    if (cuda) torch::cuda::synchronize();
  }
}

void BM_Variant(benchmark::State& state) { run_variant(state, /*backward=*/true); }
void BM_VariantForward(benchmark::State& state) { run_variant(state, /*backward=*/false); }

void AllCases(benchmark::internal::Benchmark* b) {
  for (int op = 0; op < static_cast<int>(cases().size()); ++op) {
    for (int mode = 0; mode < monet::kOpModes; ++mode) b->Args({op, mode});
  }
}
BENCHMARK(BM_Variant)->Apply(AllCases)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_VariantForward)->Apply(AllCases)->Unit(benchmark::kMillisecond);

}  // namespace
