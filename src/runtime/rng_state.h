// The random number generators' state, captured and restored, so that a checkpointed stage
// recomputes with the same dropout masks its forward drew, and a retried batch draws what its
// first attempt drew.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace monet {

class RngState {
 public:
  // The default CPU generator's state and, in a CUDA build of LibTorch, every initialised CUDA
  // device's default generator.
  static RngState capture();
  // Puts the generators back as they were at capture().
  void restore() const;

 private:
  at::Tensor cpu_;
  std::vector<at::Tensor> cuda_;  // per device; empty without CUDA
};

// Captures the generators, sets them to `state`, and restores what they were on destruction:
// a recomputation draws its forward's numbers without disturbing the draws of what follows it.
class ForkedRng {
 public:
  explicit ForkedRng(const RngState& state) : saved_(RngState::capture()) { state.restore(); }
  ~ForkedRng() { saved_.restore(); }
  ForkedRng(const ForkedRng&) = delete;
  ForkedRng& operator=(const ForkedRng&) = delete;

 private:
  RngState saved_;
};

}  // namespace monet
