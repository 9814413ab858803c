#include "kernels/catalogue.h"

namespace monet::kernels {
namespace {

constexpr OpMode kD = OpMode::kDefault;
constexpr OpMode kC = OpMode::kCompact;
constexpr OpMode kR = OpMode::kRegenerate;
constexpr OpMode kM = OpMode::kRecompute;

// Per input element, fp32. Pooling outputs are per output element over the window's stride
// (k x k stride k: 1 / k^2 of the input), written here for the common 2x2 stride 2 pooling.
std::vector<VariantEntry> make_catalogue() {
  const double mask = 1.0 / 8.0;  // 1 bit
  return {
      {"relu", kD, false, true, 0, 4, 4, true, "aten", "torch::relu: keeps its output"},
      {"relu", kC, false, false, mask, mask, 4, true, "kernel", "1-bit mask of (y > 0)"},
      {"relu", kR, false, false, mask, mask, 4, true, "kernel", "as compact"},
      {"dropout", kD, false, false, 4, 4, 4, true, "aten", "torch::dropout: keeps fp32 noise"},
      {"dropout", kC, false, false, mask, mask, 4, true, "kernel",
       "torch's noise (same generator draw, same output), kept as a 1-bit mask"},
      {"dropout", kR, false, false, 0, 0, 4, true, "kernel",
       "keeps a seed and an offset (16 bytes a call); redraws the mask in backward; a different "
       "draw from torch's"},
      {"batch_norm", kD, true, false, 0, 4, 4, true, "aten",
       "torch::batch_norm: keeps its input and 2 floats a channel"},
      {"batch_norm", kC, false, true, 0, 4, 4, true, "aten",
       "keeps its output instead of its input; saves 4 B when the next op keeps that output "
       "(a convolution does); channels with |weight| < 1e-2 max(1, |bias|) keep their input"},
      {"batch_norm", kR, false, true, 0, 4, 4, true, "aten", "as compact"},
      {"batch_norm_relu", kD, true, true, 0, 8, 8, true, "aten",
       "torch's pair: BatchNorm keeps its input, ReLU its output"},
      {"batch_norm_relu", kC, false, false, 4, 4, 8, true, "aten",
       "keeps the BatchNorm output before the ReLU (not the returned output); exact gradients "
       "need x_hat where the ReLU is off, so 1 bit cannot replace it"},
      {"batch_norm_relu", kR, false, false, 4, 4, 8, true, "aten", "as compact"},
      {"batch_norm_relu_conv2d", kD, true, false, 4, 8, 8, true, "aten",
       "torch's three ops: BatchNorm keeps its input, the ReLU and the convolution the ReLU's "
       "output (one tensor)"},
      {"batch_norm_relu_conv2d", kC, false, false, 4, 4, 8, true, "aten",
       "keeps the BatchNorm output before the ReLU; backward recomputes the convolution's input "
       "relu(y) and runs torch's convolution backward"},
      {"batch_norm_relu_conv2d", kR, false, false, 4, 4, 8, true, "aten", "as compact"},
      {"batch_norm_relu_conv2d_batch_norm", kD, true, false, 8, 12, 12, true, "aten",
       "torch's four ops: the first BatchNorm's input, the ReLU's output (the convolution's "
       "input) and the convolution's output (the second BatchNorm's input)"},
      {"batch_norm_relu_conv2d_batch_norm", kC, false, true, 4, 8, 12, true, "aten",
       "batch_norm_relu_conv2d and the output-keeping batch_norm: the first BatchNorm's output "
       "before the ReLU, and the second's output"},
      {"batch_norm_relu_conv2d_batch_norm", kM, false, false, 4, 4, 12, true, "aten",
       "keeps the first BatchNorm's output before the ReLU; backward recomputes the convolution "
       "(one more forward of it) and runs torch's own BatchNorm and convolution backwards"},
      {"batch_norm_relu_conv2d_batch_norm", kR, false, false, 4, 4, 12, true, "aten",
       "as recompute"},
      {"max_pool2d", kD, true, false, 2, 6, 6, true, "aten",
       "torch: keeps its input and int64 indices (8 B an output; 2x2/2 pooling)"},
      {"max_pool2d", kC, false, false, 0.125, 0.125, 6, true, "kernel",
       "4-bit argmax code an output (0.5 B; 2x2/2 pooling); windows of at most 16 positions"},
      {"max_pool2d", kR, false, false, 0.125, 0.125, 6, true, "kernel", "as compact"},
      {"gelu", kD, true, false, 0, 4, 4, true, "aten", "torch::gelu: keeps its input"},
      {"gelu", kC, true, false, 0, 4, 4, true, "aten",
       "keeps its input, as torch: no exact smaller form exists; saves nothing"},
      {"gelu", kR, true, false, 0, 4, 4, true, "aten", "as compact; saves nothing"},
      {"softmax", kD, false, true, 0, 4, 4, true, "aten", "torch::softmax: keeps its output"},
      {"softmax", kC, false, true, 0, 4, 4, true, "aten",
       "keeps its output, as torch; saves nothing"},
      {"softmax", kR, false, true, 0, 4, 4, true, "aten", "as compact; saves nothing"},
  };
}

}  // namespace

const std::vector<VariantEntry>& variant_catalogue() {
  static const std::vector<VariantEntry> catalogue = make_catalogue();
  return catalogue;
}

const VariantEntry* find_variant(std::string_view op, OpMode mode) {
  for (const VariantEntry& entry : variant_catalogue()) {
    if (entry.op == op && entry.mode == mode) return &entry;
  }
  // Every op without an entry of its own for kRecompute runs it as kCompact.
  return mode == OpMode::kRecompute ? find_variant(op, OpMode::kCompact) : nullptr;
}

}  // namespace monet::kernels
