// What a step must put back when its batch runs out of memory, so that running the batch again
// gives what one successful run would have: the RNG state, the module buffers (BatchNorm's
// running statistics) and the gradients of the parameters and of the other leaves the step's
// backward reaches (the loss's weights, the input).
#pragma once

#include <ATen/core/Tensor.h>

#include <unordered_set>
#include <vector>

#include "runtime/rng_state.h"
#include "runtime/stage.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace monet {

class StepRollback {
 public:
  // Gradients that are undefined or all zero (what zero_grad() leaves) are recorded without a
  // copy; only gradients that hold values (accumulation over several batches) and sparse ones
  // (an embedding's, a few rows) are copied.
  explicit StepRollback(const std::vector<RuntimeStage>& stages);
  void restore() const;

  // Records the gradients of the leaves that `loss` reaches other than through `output` (a
  // learnable weight of the loss, an input the loss reads), each the first time it is seen: the
  // step's backward adds to them too. Called by the loss stage each time it runs.
  void record_loss_leaves(const at::Tensor& loss, const at::Tensor& output);
  // Records the gradients of the leaves the step's backward reaches through the model's `input`:
  // the input itself where it needs a gradient, or the leaves of the graph it came from.
  void record_input_leaves(const at::Tensor& input);

 private:
  // Records the leaves reachable from `from`, not past `stop`, other than `skip`.
  void record_leaves_from(torch::autograd::Node* from, const torch::autograd::Node* stop,
                          const at::Tensor& skip);
  // Records `leaf`'s gradient, copied where it has one, unless it was recorded before.
  void record_leaf(const at::Tensor& leaf);
  enum class GradState { kUndefined, kZero, kCopied };
  struct Param {
    at::Tensor param;
    GradState state;
    at::Tensor copy;
  };
  RngState rng_;
  BufferSnapshot buffers_;
  std::vector<Param> params_;
  std::unordered_set<const void*> seen_;  // the TensorImpls in params_
};

}  // namespace monet
