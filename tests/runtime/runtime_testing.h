// What the runtime's tests share: small workloads, a plain (monet-free) training step to compare
// with, and gradient comparison. Every test ends with no budget on any pool (runtime_testing.cc).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/autocast.h"
#include "monet/allocator.h"
#include "monet/runtime.h"
#include "workloads/harness.h"
#include "workloads/workloads.h"

namespace monet::testing {

// For the CUDA cases, before the process's first CUDA op. cuDNN's deterministic algorithms: its
// default ones sum in an order that varies from run to run (on an H200, two plain steps of the
// small CNN gave gradients 3e-5 apart). And cuBLAS workspaces of 128 KiB: on Hopper, PyTorch
// gives cuBLAS and cuBLASLt 32 MiB each, memory held outside every plan that on these small
// models is more than the budgets under test.
inline void deterministic_small_cuda() {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", /*overwrite=*/0);
  setenv("CUBLASLT_WORKSPACE_SIZE", "128", /*overwrite=*/0);  // KiB
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
}

// A predictor state path in the test's temporary folder, with no state there and none of the
// retry margins a run saves beside it (the same path and ".margins"): what an earlier run of the
// test left would otherwise warm-start this one.
inline std::string fresh_state_path(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".margins");
  return path;
}

// The bytes of the file at `path`; empty where there is none.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Options for a job that keeps its predictor state at `path` under half the peak `w`'s largest
// batch reaches unconstrained: a budget every test workload fits with a plan, but not without.
inline Options half_peak_with_state(const workloads::Workload& w, const std::string& path) {
  Options o;
  o.budget_bytes = workloads::unconstrained_peak(w, 1).in_use_bytes / 2;
  o.predictor_state = path;
  return o;
}

// One step of `rt` on each of `batches`, with the workload's loss.
inline void train(Runtime& rt, const workloads::Workload& w,
                  const std::vector<workloads::Batch>& batches) {
  for (const workloads::Batch& b : batches) {
    rt.step(b.input, [&](const torch::Tensor& out) { return w.loss(out, b); });
  }
}

// A transformer small enough for tests, whose activations (attention) outweigh its parameters.
inline std::unique_ptr<workloads::Workload> small_transformer(std::int64_t max_seq = 128,
                                                              std::int64_t d_ff = 64) {
  workloads::TransformerConfig c;
  c.vocab = 64;
  c.d_model = 32;
  c.heads = 4;
  c.d_ff = d_ff;
  c.layers = 8;
  c.max_seq = max_seq;
  c.batch = 8;
  return workloads::make_transformer_workload(c);
}

// With more blocks per stage it is deeper: twenty are enough for a third of its peak to hold a plan
// (each block adds about four block inputs to the peak but one to the least plan; docs/runtime.md).
inline std::unique_ptr<workloads::Workload> small_resnet(int blocks_per_stage = 3) {
  workloads::ResNetConfig c;
  c.widths = {16, 32};
  c.blocks_per_stage = blocks_per_stage;
  c.batch = 8;
  c.sides = {64, 96, 128};
  return workloads::make_resnet_workload(c);
}

// A copy of every parameter's gradient, in the model's order.
inline std::vector<torch::Tensor> gradients_of(const torch::nn::Sequential& model) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

// The gradients of every parameter after one plain forward and backward (no monet), starting from
// torch::manual_seed(seed). With `forward_autocast`, the forward and the loss run under that
// autocast and the backward after it (AMP's usual loop); without, all under the caller's.
inline std::vector<torch::Tensor> plain_gradients(
    torch::nn::Sequential& model, const workloads::Workload& w, const workloads::Batch& b,
    std::uint64_t seed, const kernels::AutocastState* forward_autocast = nullptr) {
  model->zero_grad();
  torch::manual_seed(seed);
  torch::Tensor value;
  {
    std::optional<kernels::AutocastScope> scope;
    if (forward_autocast != nullptr) scope.emplace(*forward_autocast);
    value = w.loss(model->forward(b.input), b);
  }
  value.backward();
  return gradients_of(model);
}

// Per parameter, the norm of a - b over the norm of the reference b (the norm of a - b where b
// is 0), computed in fp64 (b may be fp64 gradients of the same step).
inline std::vector<double> relative_differences(const std::vector<torch::Tensor>& a,
                                                const std::vector<torch::Tensor>& b) {
  std::vector<double> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const torch::Tensor ref = b[i].to(torch::kDouble);
    const double norm = ref.norm().item<double>();
    const double diff = (a[i].to(torch::kDouble) - ref).norm().item<double>();
    out.push_back(norm == 0.0 ? diff : diff / norm);
  }
  return out;
}

// The largest of relative_differences(a, b).
inline double worst_relative_difference(const std::vector<torch::Tensor>& a,
                                        const std::vector<torch::Tensor>& b) {
  double worst = 0.0;
  for (double d : relative_differences(a, b)) worst = std::max(worst, d);
  return worst;
}

// The norm of a - b over the norm of b, all parameters as one vector, in fp64: how far one step's
// gradients are from another's as a whole, where a parameter whose gradient is nearly 0 (a
// convolution's bias before a BatchNorm) would make the per-parameter worst meaningless.
inline double whole_relative_difference(const std::vector<torch::Tensor>& a,
                                        const std::vector<torch::Tensor>& b) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const torch::Tensor ref = b[i].to(torch::kDouble);
    diff += (a[i].to(torch::kDouble) - ref).square().sum().item<double>();
    norm += ref.square().sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

// How far a step's predicted peak was from its measured one, relative to the measured: 0 for a
// step that measured its shape or ran without a budget (it predicted nothing).
inline double peak_prediction_error(const StepReport& r) {
  if (r.predicted_peak_bytes == 0) return 0.0;
  return std::abs(static_cast<double>(r.predicted_peak_bytes - r.measured_peak_bytes)) /
         static_cast<double>(r.measured_peak_bytes);
}

}  // namespace monet::testing
