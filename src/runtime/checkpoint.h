// Checkpointed execution: LibTorch has no checkpoint in C++, so here is one. A segment of
// consecutive stages runs forward without building a graph and keeps only its input; backward
// puts the RNG state its forward saw back, recomputes the segment with grad enabled (each stage
// in its planned operator mode, BatchNorm's running statistics restored after, so they are
// updated once per step) and back-propagates through it, so parameters receive the gradients
// they would without checkpointing.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "monet/op_mode.h"
#include "runtime/stage.h"

namespace monet {

// Runs stages[first..last] on `input`, stage k in modes[k - first], as one checkpointed segment.
// `anchor` is any tensor that requires grad: it makes the output require grad even when the input
// does not (the first stages of a network), so that backward reaches the segment's parameters.
// The stages are copied (their functions hold shared modules), so the graph may outlive them.
at::Tensor run_checkpointed(const std::vector<RuntimeStage>& stages, int first, int last,
                            const std::vector<OpMode>& modes, const at::Tensor& input,
                            const at::Tensor& anchor);

}  // namespace monet
