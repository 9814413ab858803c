// Running a monet::ops function or its torch reference once, forward and backward, for the
// kernel tests on CPU (ops_test.cc) and CUDA (ops_cuda_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "monet/allocator.h"
#include "monet/op_mode.h"
#include "monet/ops.h"
#include "runtime/autograd_release.h"

namespace monet::op_check {

using Inputs = std::vector<torch::Tensor>;
using Op = std::function<torch::Tensor(const Inputs&)>;

constexpr OpMode kVariants[] = {OpMode::kCompact, OpMode::kRecompute, OpMode::kRegenerate};

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

// The bytes of tensors in use in monet's pool of `device` (kCpu or a CUDA index).
inline std::int64_t in_use(int device = kCpu) {
  return static_cast<std::int64_t>(memory_stats(device).requested_bytes);
}

using UnaryOp = std::function<torch::Tensor(const torch::Tensor&)>;

// What an op's autograd node keeps for backward, through monet's pool of `leaf`'s device.
struct Kept {
  std::int64_t bytes;          // held by the node with neither input nor output held
  std::int64_t beyond_output;  // held beyond the output while the output is held
};

// Runs `op` in `mode` on a fresh copy of `leaf`, then drops the input and the output and holds
// only the node: what stays in use is what the op keeps. Expects the node to free it all.
inline Kept kept_by(const UnaryOp& op, const torch::Tensor& leaf, OpMode mode) {
  const int device = leaf.is_cuda() ? leaf.get_device() : kCpu;
  const std::int64_t before = in_use(device);
  std::shared_ptr<torch::autograd::Node> node;
  Kept kept{};
  {
    torch::Tensor y;
    {
      OpModeScope scope(mode);
      // x * 1 is a fresh tensor that only this op's node may hold (MulBackward keeps a scalar).
      y = op(leaf * 1.0);
    }
    node = y.grad_fn();
    kept.beyond_output = in_use(device) - before - static_cast<std::int64_t>(y.nbytes());
  }
  kept.bytes = in_use(device) - before;
  node.reset();
  EXPECT_EQ(in_use(device), before) << "the node freed all it kept";
  // A step's graph holds every node until the step's backward is over: a node must release
  // what it kept when its own backward has run, as torch's nodes release their saved tensors,
  // not only when it is destroyed.
  {
    torch::Tensor y;
    {
      OpModeScope scope(mode);
      y = op(leaf * 1.0);
    }
    node = y.grad_fn();
    torch::autograd::grad({y}, {leaf}, {torch::ones_like(y)});
  }
  await_autograd_release(leaf.device());  // the gradient is freed on autograd's CUDA thread
  EXPECT_EQ(in_use(device), before) << "the node released what it kept when its backward ran";
  node.reset();
  return kept;
}

// A max pooling's window, and the windows both devices' tests run.
struct PoolCase {
  std::vector<std::int64_t> kernel, stride, padding, dilation;
  bool ceil_mode;
};

inline const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},  // the common one
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},  // overlapping, padded (ResNet's stem)
      {{2, 3}, {1, 2}, {0, 1}, {2, 1}, false},  // rectangular, dilated
      {{4, 4}, {3, 3}, {2, 2}, {1, 1}, true},   // 16 positions, ceil mode
  };
  return cases;
}

// monet's max_pool2d with `c`'s window, and torch's.
inline Op max_pool_op(const PoolCase& c) {
  return [c](const Inputs& in) {
    return ops::max_pool2d(in[0], c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
  };
}
inline Op max_pool_reference(const PoolCase& c) {
  return [c](const Inputs& in) {
    return torch::max_pool2d(in[0], c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
  };
}

}  // namespace monet::op_check
