// What a step must put back when its batch runs out of memory, so that running the batch again
// gives what one successful run would have: the RNG state, the module buffers (BatchNorm's
// running statistics) and the parameters' gradients.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "runtime/rng_state.h"
#include "runtime/stage.h"

namespace monet {

class StepRollback {
 public:
  // Gradients that are undefined or all zero (what zero_grad() leaves) are recorded without a
  // copy; only gradients that hold values (accumulation over several batches) are copied.
  explicit StepRollback(const std::vector<RuntimeStage>& stages);
  void restore() const;

 private:
  enum class GradState { kUndefined, kZero, kCopied };
  struct Param {
    at::Tensor param;
    GradState state;
    at::Tensor copy;
  };
  RngState rng_;
  BufferSnapshot buffers_;
  std::vector<Param> params_;
};

}  // namespace monet
