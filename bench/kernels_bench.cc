// Forward + backward time of each operator variant against the plain torch op (mode 0), on an
// activation of 8 x 64 x 32 x 32 fp32 (8 MiB), on the CPU or on MONET_BENCH_DEVICE (e.g. cuda:0,
// in a build against a CUDA LibTorch). docs/kernels.md has the figures and the machine.
//   build/kernels/kernels_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "monet/op_mode.h"
#include "monet/ops.h"

namespace {

torch::Device bench_device() {
  const char* name = std::getenv("MONET_BENCH_DEVICE");
  return torch::Device(name != nullptr ? name : "cpu");
}

using UnaryOp = std::function<torch::Tensor(const torch::Tensor&)>;

struct Case {
  const char* name;
  UnaryOp op;
};

const std::vector<Case>& cases() {
  static const auto* weight =
      new torch::Tensor(torch::rand({64}, bench_device()).add(0.5).requires_grad_());
  static const auto* bias = new torch::Tensor(torch::randn({64}, bench_device()).requires_grad_());
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
         // A basic block's second convolution, 64 -> 64 channels, 3x3.
         static const auto* conv_weight = new torch::Tensor(
             torch::randn({64, 64, 3, 3}, bench_device()).mul(0.05).requires_grad_());
         return monet::ops::batch_norm_relu_conv2d(x, *weight, *bias, {}, {}, true, 0.1, 1e-5,
                                                   *conv_weight, {}, {1, 1}, {1, 1}, {1, 1}, 1);
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

void BM_Variant(benchmark::State& state) {
  const Case& c = cases()[static_cast<std::size_t>(state.range(0))];
  const auto mode = static_cast<monet::OpMode>(state.range(1));
  state.SetLabel(std::string(c.name) + "/" + std::string(monet::op_mode_name(mode)));
  const torch::Tensor x = torch::randn({8, 64, 32, 32}, bench_device()).requires_grad_();
  const bool cuda = bench_device().is_cuda();
  for (auto _ : state) {
    torch::Tensor y;
    {
      monet::OpModeScope scope(mode);
      y = c.op(x);
    }
    y.backward(torch::ones_like(y));
    benchmark::DoNotOptimize(x.grad().data_ptr());
    x.mutable_grad() = torch::Tensor();
    if (cuda) torch::cuda::synchronize();
  }
}

void AllCases(benchmark::internal::Benchmark* b) {
  for (int op = 0; op < static_cast<int>(cases().size()); ++op) {
    for (int mode = 0; mode < monet::kOpModes; ++mode) b->Args({op, mode});
  }
}
BENCHMARK(BM_Variant)->Apply(AllCases)->Unit(benchmark::kMillisecond);

}  // namespace
