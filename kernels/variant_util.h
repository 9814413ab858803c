// What every variant-aware op does first: count the call and decide whether its variant runs.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>

#include "monet/op_mode.h"

namespace monet::kernels {

// Counts the call; true when the thread's mode is not the default and `x` will need a gradient,
// i.e. when a variant would keep less than the plain op.
inline bool run_variant(const at::Tensor& x) {
  count_variant_op_call();
  return op_mode() != OpMode::kDefault && at::GradMode::is_enabled() && x.requires_grad();
}

}  // namespace monet::kernels
