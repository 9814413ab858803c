// The random number generators' state, captured and restored, so that a checkpointed stage
// recomputes with the same dropout masks its forward drew, and a retried batch draws what its
// first attempt drew.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>

#include <utility>
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
  // The CPU generator's state as values, not as the tensor Generator::get_state() makes: that
  // tensor (5,056 bytes) would come from the CPU pool, once per checkpointed segment from its
  // forward to its backward, where the memory model counts nothing.
  at::mt19937 cpu_engine_;
  decltype(std::declval<at::CPUGeneratorImpl&>().next_float_normal_sample()) cpu_next_float_;
  decltype(std::declval<at::CPUGeneratorImpl&>().next_double_normal_sample()) cpu_next_double_;
  std::vector<at::Tensor> cuda_;  // per device (16 bytes of host memory each); empty without CUDA
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
