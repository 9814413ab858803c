// Running a monet::ops function or its torch reference once, forward and backward, for the
// kernel tests on CPU (ops_test.cc) and CUDA (ops_cuda_test.cc).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "monet/op_mode.h"

namespace monet::op_check {

using Inputs = std::vector<torch::Tensor>;
using Op = std::function<torch::Tensor(const Inputs&)>;

constexpr OpMode kVariants[] = {OpMode::kCompact, OpMode::kRegenerate};

struct Outcome {
  torch::Tensor y;
  std::vector<torch::Tensor> grads;  // one per input that requires grad
  std::string node;                  // the output's autograd node
};

// Runs `op` in `mode` on fresh copies of `inputs` and backpropagates `grad_y`.
inline Outcome run(const Op& op, const Inputs& inputs, const torch::Tensor& grad_y, OpMode mode) {
  Inputs leaves, wrt;
  for (const torch::Tensor& t : inputs) {
    leaves.push_back(t.defined() ? t.detach().clone().requires_grad_(t.requires_grad()) : t);
    if (t.defined() && t.requires_grad()) wrt.push_back(leaves.back());
  }
  Outcome r;
  {
    OpModeScope scope(mode);
    r.y = op(leaves);
  }
  r.node = r.y.grad_fn() ? r.y.grad_fn()->name() : "";
  r.grads = torch::autograd::grad({r.y}, wrt, {grad_y}, /*retain_graph=*/false,
                                  /*create_graph=*/false, /*allow_unused=*/true);
  r.y = r.y.detach();
  return r;
}

inline double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

}  // namespace monet::op_check
