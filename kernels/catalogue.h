// What each operator variant keeps for backward, per element, for the planner, the predictor and
// the docs (docs/kernels.md prints this table). Plain C++: no LibTorch here.
//
// Per element of the op's input, in fp32 (4-byte) tensors: a variant keeps its input or not, its
// output or not, and `extra_bytes` of its own (masks, codes). What that costs in a network depends
// on its neighbours: a kept output that the next op keeps anyway is free. `kept_bytes` is the cost
// when nothing else holds the input or the output, the case the tests measure
// (tests/kernels/kept_bytes_test.cc); `reference_bytes` is the same for the torch op (pair).
#pragma once

#include <string_view>
#include <vector>

#include "monet/op_mode.h"

namespace monet::kernels {

struct VariantEntry {
  std::string_view op;  // "relu", "dropout", "batch_norm", "batch_norm_relu",
                        // "batch_norm_relu_conv2d", "batch_norm_relu_conv2d_batch_norm",
                        // "max_pool2d", "gelu", "softmax"
  OpMode mode;
  bool keeps_input;        // the op's input tensor, for backward
  bool keeps_output;       // the op's output tensor (for the fused ops: the BatchNorm's)
  double extra_bytes;      // other bytes kept per input element
  double kept_bytes;       // bytes kept per input element when no one else holds in or out
  double reference_bytes;  // the same for torch's op (for the fused ops: torch's ops together)
  bool exact;              // forward and gradients equal to torch's (to rounding, see note)
  std::string_view cuda;   // "kernel" (monet's CUDA kernels), "aten" (ATen ops), "none"
  std::string_view note;
};

// Every (op, mode) pair, default modes included, in a fixed order. kRecompute has entries only
// where it differs from kCompact.
const std::vector<VariantEntry>& variant_catalogue();

// The entry of `op` in `mode` (kRecompute: kCompact's where it has none of its own), or nullptr.
const VariantEntry* find_variant(std::string_view op, OpMode mode);

}  // namespace monet::kernels
