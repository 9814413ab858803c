// monet's variant-aware operators: each runs the implementation the calling thread's OpMode
// (monet/op_mode.h) names. kDefault is the plain torch op, exactly: same result, same autograd
// node, same bytes kept for backward. kCompact, kRecompute and kRegenerate are custom autograd
// Functions that keep less for backward and compute the same forward and the same gradients (see
// docs/kernels.md for the bytes each keeps, measured). "Compact" below means kCompact and every
// mode after it: kRecompute differs from kCompact only in batch_norm_relu_conv2d_batch_norm, and
// kRegenerate only there and in dropout. A call that needs no gradient (grad mode
// off, or an input that does not require it) runs the plain op in every mode, except dropout,
// whose mode also decides how its mask is drawn, so that a checkpoint's recompute draws it alike.
//
// Every call counts once in monet::variant_op_calls(), in every mode.
//
// Tensors: any. relu, dropout and max_pool2d run their own kernels on CPU tensors of any floating
// dtype and on float32 CUDA tensors (where monet and LibTorch were both built with CUDA). On CUDA
// tensors of other dtypes (float16, bfloat16, float64) relu and dropout keep their masks through
// ATen operations and max_pool2d runs torch's op; on other devices all three run torch's op, in
// every mode.
//
// Under autocast each op runs in the dtype torch's runs in: the fused ops' convolution in
// autocast's dtype, their BatchNorms in their input's.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <vector>

namespace monet::ops {

// max(x, 0). Compact and regenerate keep a 1-bit mask of (y > 0) instead of y: 1/32 of the bytes
// of torch's relu, which keeps its output.
at::Tensor relu(const at::Tensor& x);

// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when `training`;
// returns x when not (p in [0, 1], as torch::dropout).
//  kDefault    torch::dropout: keeps its mask (fp32 noise on the CPU, 4 bytes an element; a
//              byte an element on CUDA).
//  kCompact    draws what torch::dropout draws, from the same generator (on CUDA through torch's
//              own fused kernel): the same output, bit for bit, for the same generator state.
//              Keeps the mask as 1 bit an element; the gradient is torch's, bit for bit.
//  kRegenerate draws a 64-bit seed from the default CPU generator (on every device) and the mask
//              from a counter-based hash of (seed, element index); keeps only the seed and
//              offset, and redraws the mask in backward. A rerun after restoring the generator's
//              state (torch::manual_seed, or get_state/set_state) draws the same mask.
at::Tensor dropout(const at::Tensor& x, double p, bool training);

// Batch normalization over dim 1 (NCHW for 2-d), as torch::batch_norm. weight, bias and the
// running statistics may be undefined tensors. With training = false it is the plain op in every
// mode. Compact and regenerate, training: keep the output y and the per-channel mean and invstd,
// not the input, and recover x_hat = (y - bias) / weight in backward (in-place activated
// BatchNorm, Rota Bulo et al. 2018). A channel whose weight is too small to invert exactly,
// |weight| < 1e-2 * max(1, |bias|), keeps its input slice instead (docs/kernels.md). Since y is
// kept, modifying it in place (`y += identity`) makes backward stop with torch's "modified by an
// inplace operation" error; write `y = y + identity`.
at::Tensor batch_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                      double momentum, double eps);

// relu(batch_norm(...)) in one op. Compact and regenerate, training: keep the BatchNorm output
// before the ReLU (from which both the ReLU mask and x_hat follow) and the per-channel statistics;
// neither the input nor the returned output. torch's pair keeps the input and the output.
at::Tensor batch_norm_relu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var,
                           bool training, double momentum, double eps);

// conv2d(relu(batch_norm(x))) in one op, for an NCHW input (the middle of a ResNet basic block,
// or of any conv-BN-ReLU-conv chain): the BatchNorm's arguments as batch_norm's, then the
// convolution's as torch::conv2d's (conv_bias may be undefined; stride, padding and dilation
// take 2 values). Compact and regenerate, training: keep only the BatchNorm output before the
// ReLU and the per-channel statistics (as batch_norm_relu), and recompute the convolution's input
// relu(y) in backward. torch's three ops keep the BatchNorm's input and the ReLU's output, which
// the convolution keeps too: twice the bytes. Gradients: the convolution's are torch's own
// convolution backward; the BatchNorm's as batch_norm's compact variant.
at::Tensor batch_norm_relu_conv2d(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, const at::Tensor& running_mean,
                                  const at::Tensor& running_var, bool training, double momentum,
                                  double eps, const at::Tensor& conv_weight,
                                  const at::Tensor& conv_bias, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation,
                                  std::int64_t groups);

// The arguments of one BatchNorm (as batch_norm's; training is the op's) and of one 2-d
// convolution (as torch::conv2d's; stride, padding and dilation take 2 values).
struct BatchNormArgs {
  at::Tensor weight, bias, running_mean, running_var;  // each may be undefined
  double momentum = 0.1;
  double eps = 1e-5;
};
struct Conv2dArgs {
  at::Tensor weight, bias;  // bias may be undefined
  std::vector<std::int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  std::int64_t groups = 1;
};

// batch_norm(conv2d(relu(batch_norm(x)))), in one op: a ResNet basic block between its first
// convolution and its residual add. The convolution must pad with zeros, alike on both sides.
//  kDefault    torch's four ops: they keep the first BatchNorm's input, the ReLU's output (which
//              the convolution keeps too) and the second BatchNorm's input: three tensors.
//  kCompact    batch_norm_relu_conv2d, then the output-keeping batch_norm: the first
//              BatchNorm's output before the ReLU and the second's output, two tensors.
//  kRecompute  keeps only the first BatchNorm's output before the ReLU and both BatchNorms'
//              per-channel statistics, one tensor, and recomputes the convolution in backward
//              (one more convolution forward). The second BatchNorm's gradients are torch's
//              own backward on the recomputed input; the first's as batch_norm's compact variant.
//  kRegenerate as kRecompute.
at::Tensor batch_norm_relu_conv2d_batch_norm(const at::Tensor& x, const BatchNormArgs& first,
                                             const Conv2dArgs& conv, const BatchNormArgs& second,
                                             bool training);

// 2-d max pooling, as torch::max_pool2d (an empty stride means the kernel size). Compact and
// regenerate keep a 4-bit code per output (the argmax's position in its window) and the input's
// sizes, instead of the input and 64-bit indices; windows of more than 16 positions run the plain
// op in every mode.
at::Tensor max_pool2d(const at::Tensor& x, at::IntArrayRef kernel_size, at::IntArrayRef stride = {},
                      at::IntArrayRef padding = 0, at::IntArrayRef dilation = 1,
                      bool ceil_mode = false);

// GELU, approximate "none" or "tanh", as torch::gelu. Every mode keeps the input, as torch's
// does: no exact smaller form of a GELU's input or output exists (docs/kernels.md says why).
at::Tensor gelu(const at::Tensor& x, c10::string_view approximate = "none");

// softmax along `dim`, as torch::softmax. Every mode keeps only the output, as torch's does.
at::Tensor softmax(const at::Tensor& x, std::int64_t dim);

}  // namespace monet::ops
