// BatchNorm (and BatchNorm + ReLU) that keeps its output for backward, not its input, and
// recovers the normalized input from it: x_hat = (y - bias) / weight.
#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/autocast.h"
#include "kernels/variant_util.h"
#include "kernels/weak_channels.h"
#include "monet/ops.h"

namespace monet::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Sizes that broadcast a per-channel vector against x: [1, C, 1, ...].
std::vector<std::int64_t> channel_view(const at::Tensor& x) {
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(x.dim()), 1);
  sizes[1] = x.size(1);
  return sizes;
}

// A training BatchNorm's output y and the batch's mean and invstd, with the backend that ran it
// (BatchNormBackend's index: 0 ATen's native kernel, 1 cuDNN's), whose backward kernel the
// backward runs, and that kernel's reserve (0 bytes but where cuDNN asks for some).
struct TrainedBatchNorm {
  at::Tensor y, mean, invstd, reserve;
  std::int64_t backend = 0;
};

// What an output-keeping BatchNorm keeps: its output y (before any ReLU), the per-channel batch
// mean and invstd, the backend's reserve, and the input slices of the channels whose weight is
// too small to invert (`weak`, their indices; undefined when there are none).
struct KeptBatchNorm : TrainedBatchNorm {
  at::Tensor weak, weak_input;
};

// Runs the kernel torch's batch_norm runs, updating the running statistics: cuDNN's on CUDA where
// cuDNN takes the input (torch's op, the default mode, runs it there), ATen's native one
// otherwise. Both save the batch's mean and invstd, which the backward kernels below take.
TrainedBatchNorm batch_norm_training(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                                     const c10::optional<at::Tensor>& bias,
                                     const c10::optional<at::Tensor>& running_mean,
                                     const c10::optional<at::Tensor>& running_var, double momentum,
                                     double eps) {
  auto [y, mean, invstd, reserve, backend] =
      at::_batch_norm_impl_index(x, weight, bias, running_mean, running_var, /*training=*/true,
                                 momentum, eps, at::globalContext().userEnabledCuDNN());
  return {std::move(y), std::move(mean), std::move(invstd), std::move(reserve), backend};
}

// The backward kernel of the backend that ran a training BatchNorm's forward (`backend`, with its
// `reserve`), on input z with per-channel save_mean m, save_invstd s and weight a (below). In
// training every backend takes m and s as given, so both run the substitution below alike.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_kernel(
    std::int64_t backend, const at::Tensor& reserve, const at::Tensor& g, const at::Tensor& z,
    const at::Tensor& a, const at::Tensor& m, const at::Tensor& s, double eps,
    std::array<bool, 3> wanted) {
  return at::_batch_norm_impl_index_backward(
      backend, z, g, a, /*running_mean=*/c10::nullopt, /*running_var=*/c10::nullopt,
      /*save_mean=*/m, /*save_var_transform=*/s, /*train=*/true, eps, wanted,
      reserve.defined() ? reserve : at::empty({0}, z.options().dtype(at::kByte)));
}

// Runs the BatchNorm, updating the running statistics as torch's does.
KeptBatchNorm forward_keeping_output(const at::Tensor& x, const at::Tensor& weight,
                                     const at::Tensor& bias,
                                     const c10::optional<at::Tensor>& running_mean,
                                     const c10::optional<at::Tensor>& running_var, double momentum,
                                     double eps) {
  KeptBatchNorm kept{
      {batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps)}, {}, {}};
  // Channels too close to zero weight keep (only) their slice of the input.
  if (weight.defined()) {
    at::Tensor weak = kernels::weak_channels(weight, bias);
    if (weak.defined()) {
      kept.weak = weak;
      kept.weak_input = x.index_select(1, weak);
    }
  }
  return kept;
}

// The gradients of the BatchNorm's input, weight and bias from `g`, the gradient of its output
// y, by the backward kernel of the backend that ran its forward (`kept.backend`: cuDNN's or ATen's
// native one), which computes, from an input z and per-channel save_mean m, save_invstd s and
// weight a:
//   x_hat = (z - m) s, grad_x = a s (g - mean(g) - x_hat mean(g x_hat)),
//   grad_weight = sum(g x_hat), grad_bias = sum(g).
// The BatchNorm saw x_hat = (y - bias) / weight and needs grad_x = weight invstd (...): so z = y,
// m = bias, s = 1 / weight and a = weight^2 invstd, which recovers x_hat inside the kernel's own
// pass, with no tensor of it. Where some channels' weights are too small to invert (`kept.weak`,
// their indices, undefined when there are none), x_hat is built instead, from y and those
// channels' kept input slices (`kept.weak_input`), and handed over with m = 0, s = 1 and
// a = weight invstd. `eps` is the forward's (unused in training; cuDNN checks it).
variable_list backward_from_output(const at::Tensor& g, const KeptBatchNorm& kept,
                                   const at::Tensor& weight, const at::Tensor& bias, double eps) {
  const at::Tensor& y = kept.y;
  const at::Tensor& invstd = kept.invstd;
  // No element (no channel, or an empty batch): every gradient is a sum over nothing. ATen's
  // backward kernels index the first channel, which a BatchNorm of none does not have.
  if (y.numel() == 0) {
    return {at::zeros_like(y), weight.defined() ? at::zeros_like(weight) : at::Tensor(),
            bias.defined() ? at::zeros_like(bias) : at::Tensor()};
  }
  const std::array<bool, 3> wanted{true, weight.defined(), bias.defined()};
  at::Tensor grad_x, grad_weight, grad_bias;
  if (!kept.weak.defined()) {
    const at::Tensor shift = bias.defined() ? bias : at::zeros_like(invstd);
    const at::Tensor inverse = weight.defined() ? weight.reciprocal() : at::ones_like(invstd);
    const at::Tensor scale = weight.defined() ? invstd * weight * weight : invstd;
    std::tie(grad_x, grad_weight, grad_bias) = batch_norm_backward_kernel(
        kept.backend, kept.reserve, g, y, scale, shift, inverse, eps, wanted);
  } else {
    // Weak channels exist only where there is a weight.
    const at::Tensor& weak = kept.weak;
    const std::vector<std::int64_t> view = channel_view(y);
    const at::Tensor inverse = weight.reciprocal();
    at::Tensor x_hat = bias.defined()
                           ? at::addcmul((-bias * inverse).view(view), y, inverse.view(view))
                           : y * inverse.view(view);
    std::vector<std::int64_t> weak_view = view;
    weak_view[1] = weak.numel();
    x_hat = x_hat.index_copy(1, weak,
                             (kept.weak_input - kept.mean.index_select(0, weak).view(weak_view)) *
                                 invstd.index_select(0, weak).view(weak_view));
    // A bfloat16 or half y under autocast, with fp32 weights: x_hat came out in fp32. The
    // backward kernels take one dtype for input and gradient, so it then runs in fp32 on ATen's
    // native kernel (cuDNN's reserve was made for y's dtype) and grad_x goes back to y's.
    const bool promoted = x_hat.scalar_type() != y.scalar_type();
    std::tie(grad_x, grad_weight, grad_bias) = batch_norm_backward_kernel(
        promoted ? /*native*/ 0 : kept.backend, promoted ? at::Tensor() : kept.reserve,
        promoted ? g.to(x_hat.scalar_type()) : g, x_hat, invstd * weight, at::zeros_like(invstd),
        at::ones_like(invstd), eps, wanted);
    if (promoted) grad_x = grad_x.to(y.scalar_type());
  }
  return {grad_x, weight.defined() ? grad_weight : at::Tensor(),
          bias.defined() ? grad_bias : at::Tensor()};
}

// An output-keeping BatchNorm's kept tensors in save_for_backward's order, from `first` on:
// y, mean, invstd, weak, weak_input, reserve; its backend and eps go to saved_data.
constexpr std::size_t kKeptTensors = 6;

void save_kept(const KeptBatchNorm& kept, double eps, AutogradContext* ctx, variable_list* saved) {
  saved->insert(saved->end(),
                {kept.y, kept.mean, kept.invstd, kept.weak, kept.weak_input, kept.reserve});
  ctx->saved_data["backend"] = kept.backend;
  ctx->saved_data["eps"] = eps;
}

KeptBatchNorm load_kept(const variable_list& saved, std::size_t first, AutogradContext* ctx,
                        double* eps) {
  KeptBatchNorm kept;
  kept.y = saved[first];
  kept.mean = saved[first + 1];
  kept.invstd = saved[first + 2];
  kept.weak = saved[first + 3];
  kept.weak_input = saved[first + 4];
  kept.reserve = saved[first + 5];
  kept.backend = ctx->saved_data["backend"].toInt();
  *eps = ctx->saved_data["eps"].toDouble();
  return kept;
}

// Saves what refuse_double_backward names: the op the caller called and the mode it ran in.
void save_op(AutogradContext* ctx, const std::string& op) {
  ctx->saved_data["op"] = op;
  ctx->saved_data["mode"] = std::string(op_mode_name(op_mode()));
}

// These backwards hand torch's kernels substituted inputs (x_hat recovered from the kept output),
// which their derivatives do not know of: under create_graph (grad mode on in a backward) a
// gradient of their gradient would be wrong, or fail deep in ATen. They refuse it instead.
void refuse_double_backward(AutogradContext* ctx) {
  TORCH_CHECK(!at::GradMode::is_enabled(), "monet::ops::", ctx->saved_data["op"].toStringRef(),
              " in mode ", ctx->saved_data["mode"].toStringRef(),
              " has no double backward (create_graph=true, for a gradient of a gradient): it "
              "recovers its input from the output it keeps, which its second derivative cannot "
              "use. Run this op in OpMode::kDefault (torch's own ops) where a gradient of a "
              "gradient is needed.");
}

struct OutputKeepingBatchNorm : torch::autograd::Function<OutputKeepingBatchNorm> {
  // LibTorch 1.13's Function takes no undefined tensors: absent ones come as nullopt.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const c10::optional<at::Tensor>& weight_arg,
                            const c10::optional<at::Tensor>& bias_arg,
                            const c10::optional<at::Tensor>& running_mean,
                            const c10::optional<at::Tensor>& running_var, double momentum,
                            double eps, bool fuse_relu, const std::string& op) {
    const at::Tensor weight = weight_arg.value_or(at::Tensor());
    const at::Tensor bias = bias_arg.value_or(at::Tensor());
    KeptBatchNorm kept =
        forward_keeping_output(x, weight, bias, running_mean, running_var, momentum, eps);
    at::Tensor out = fuse_relu ? at::relu(kept.y) : kept.y;
    // Unfused, y is this node's output, which save_for_backward holds without a reference cycle;
    // fused, y is the output before the ReLU. Saved tensors, unlike saved_data, are released
    // when this node's backward has run.
    variable_list saved{weight, bias};
    save_kept(kept, eps, ctx, &saved);
    ctx->save_for_backward(saved);
    ctx->saved_data["fuse_relu"] = fuse_relu;
    save_op(ctx, op);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward(ctx);
    const variable_list saved = ctx->get_saved_variables();
    double eps = 0;
    const KeptBatchNorm kept = load_kept(saved, 2, ctx, &eps);
    at::Tensor g = grads[0];
    // The ReLU's backward as torch computes it: grad where its output is not <= 0, else 0.
    if (ctx->saved_data["fuse_relu"].toBool()) g = at::threshold_backward(g, kept.y, 0);
    variable_list out = backward_from_output(g, kept, saved[0], saved[1], eps);
    out.resize(9);  // nothing for the running statistics, momentum, eps, fuse_relu and op
    return out;
  }
};

// The convolution's arguments besides its weight and bias, as both fused ops keep them.
struct ConvShape {
  bool has_bias = false;
  std::vector<std::int64_t> stride, padding, dilation;
  std::int64_t groups = 1;
  // Under autocast, the input is cast to the weight's dtype (autocast's, see autocast_conv), as
  // torch's conv2d casts it.
  bool autocast = false;

  void save(AutogradContext* ctx) const {
    ctx->saved_data["conv_bias"] = has_bias;
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["dilation"] = dilation;
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["autocast"] = autocast;
  }
  static ConvShape load(AutogradContext* ctx) {
    return {ctx->saved_data["conv_bias"].toBool(),    ctx->saved_data["stride"].toIntVector(),
            ctx->saved_data["padding"].toIntVector(), ctx->saved_data["dilation"].toIntVector(),
            ctx->saved_data["groups"].toInt(),        ctx->saved_data["autocast"].toBool()};
  }
  // The convolution's input as it runs: relu(y), cast where autocast casts it.
  at::Tensor input(const at::Tensor& relu_y, const at::Tensor& weight) const {
    return autocast ? relu_y.to(weight.scalar_type()) : relu_y;
  }
  at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias) const {
    return at::convolution(input, weight, bias, stride, padding, dilation, /*transposed=*/false,
                           /*output_padding=*/{0, 0}, groups);
  }
};

// A fused op's convolution weight and bias as its convolution takes them. Under autocast for x's
// device, torch's conv2d runs in autocast's dtype: the weight and bias are cast here, before the
// autograd Function, so that the cast is recorded and their gradients come back in their own
// dtype, and the input inside (ConvShape::autocast). Elsewhere they are as given.
struct AutocastConv {
  at::Tensor weight, bias;
  bool autocast = false;
};
AutocastConv autocast_conv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const compat::optional<at::ScalarType> lower = kernels::autocast_lower_precision(x);
  if (!lower) return {weight, bias, false};
  const c10::DeviceType device = x.device().type();
  return {kernels::autocast_cast(weight, *lower, device),
          kernels::autocast_cast(bias, *lower, device), true};
}

// What conv2d(relu(batch_norm(x))) keeps in both fused ops, in save_for_backward's order from 0:
// the BatchNorm's weight and bias, the convolution's weight, then the BatchNorm's kept tensors
// (save_kept's, from y, its output before the ReLU).
constexpr std::size_t kConvWeight = 2, kKeptFirst = 3;
constexpr std::size_t kBatchNormReLUConvSaved = kKeptFirst + kKeptTensors;

// The forward both fused ops begin with: the output-keeping BatchNorm, then the convolution of
// relu(y). `saved` gets what they keep for the backward, kBatchNormReLUConvSaved tensors in the
// order above, and `ctx` its backend and eps; returns the convolution's output.
at::Tensor batch_norm_relu_conv_forward(const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& bias,
                                        const c10::optional<at::Tensor>& running_mean,
                                        const c10::optional<at::Tensor>& running_var,
                                        double momentum, double eps, const at::Tensor& conv_weight,
                                        const c10::optional<at::Tensor>& conv_bias,
                                        const ConvShape& shape, AutogradContext* ctx,
                                        variable_list* saved) {
  KeptBatchNorm kept =
      forward_keeping_output(x, weight, bias, running_mean, running_var, momentum, eps);
  at::Tensor out =
      shape.convolution(shape.input(at::relu(kept.y), conv_weight), conv_weight, conv_bias);
  *saved = {weight, bias, conv_weight};
  save_kept(kept, eps, ctx, saved);
  return out;
}

// The gradients of conv2d(relu(batch_norm(x))) from `grad_out`, the gradient of the convolution's
// output: torch's own convolution backward on `input` (relu(y), recomputed), the ReLU's, and the
// output-keeping BatchNorm's. `grad_out` and `input` are released once the convolution's backward
// has run. `input` is as the convolution took it (ConvShape::input). Returns the gradients of
// {x, weight, bias, conv weight, conv bias}.
std::array<at::Tensor, 5> batch_norm_relu_conv_backward(at::Tensor grad_out, at::Tensor input,
                                                        const variable_list& saved,
                                                        const ConvShape& shape,
                                                        AutogradContext* ctx) {
  const at::Tensor& conv_weight = saved[kConvWeight];
  double eps = 0;
  const KeptBatchNorm kept = load_kept(saved, kKeptFirst, ctx, &eps);
  const std::vector<std::int64_t> bias_sizes{conv_weight.size(0)};
  at::Tensor grad_input, grad_conv_weight, grad_conv_bias;
  std::tie(grad_input, grad_conv_weight, grad_conv_bias) = at::convolution_backward(
      grad_out, input, conv_weight,
      shape.has_bias ? at::OptionalIntArrayRef(bias_sizes) : c10::nullopt, shape.stride,
      shape.padding, shape.dilation, /*transposed=*/false, /*output_padding=*/{0, 0}, shape.groups,
      {true, conv_weight.requires_grad(), shape.has_bias});
  grad_out = at::Tensor();
  input = at::Tensor();
  // Under autocast, the cast's backward: the gradient back in y's dtype.
  if (grad_input.scalar_type() != kept.y.scalar_type()) grad_input = grad_input.to(kept.y.dtype());
  const at::Tensor g = at::threshold_backward(grad_input, kept.y, 0);
  grad_input = at::Tensor();
  const variable_list bn = backward_from_output(g, kept, saved[0], saved[1], eps);
  return {bn[0], bn[1], bn[2], grad_conv_weight, grad_conv_bias};
}

// conv2d(relu(batch_norm(x))) keeping only the BatchNorm's output y before the ReLU: backward
// recomputes the convolution's input relu(y), then runs torch's own convolution backward, the
// ReLU's and the output-keeping BatchNorm's. torch's three ops keep x and relu(y).
struct BatchNormReLUConvolution : torch::autograd::Function<BatchNormReLUConvolution> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const c10::optional<at::Tensor>& weight_arg,
                            const c10::optional<at::Tensor>& bias_arg,
                            const c10::optional<at::Tensor>& running_mean,
                            const c10::optional<at::Tensor>& running_var, double momentum,
                            double eps, const at::Tensor& conv_weight,
                            const c10::optional<at::Tensor>& conv_bias,
                            std::vector<std::int64_t> stride, std::vector<std::int64_t> padding,
                            std::vector<std::int64_t> dilation, std::int64_t groups, bool autocast,
                            const std::string& op) {
    const at::Tensor weight = weight_arg.value_or(at::Tensor());
    const at::Tensor bias = bias_arg.value_or(at::Tensor());
    const ConvShape shape{conv_bias.has_value(),
                          std::move(stride),
                          std::move(padding),
                          std::move(dilation),
                          groups,
                          autocast};
    variable_list saved;
    at::Tensor out =
        batch_norm_relu_conv_forward(x, weight, bias, running_mean, running_var, momentum, eps,
                                     conv_weight, conv_bias, shape, ctx, &saved);
    // Saved tensors, unlike saved_data, are released when this node's backward has run.
    ctx->save_for_backward(saved);
    shape.save(ctx);
    save_op(ctx, op);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward(ctx);
    const variable_list saved = ctx->get_saved_variables();
    // The convolution's input, recomputed.
    const ConvShape shape = ConvShape::load(ctx);
    const std::array<at::Tensor, 5> g = batch_norm_relu_conv_backward(
        grads[0], shape.input(at::relu(saved[kKeptFirst]), saved[kConvWeight]), saved, shape, ctx);
    variable_list out = {g[0], g[1], g[2]};
    out.resize(15);  // none for the statistics, momentum, eps, convolution's shape, autocast, op
    out[7] = g[3];
    out[8] = g[4];
    return out;
  }
};

// batch_norm(conv2d(relu(batch_norm(x)))) keeping only the first BatchNorm's output y before the
// ReLU (and both BatchNorms' statistics): backward recomputes the convolution's input relu(y) and
// its output c, runs torch's own BatchNorm backward on c, then the backward of
// BatchNormReLUConvolution. torch's four ops keep x, relu(y) and c; the compact ops keep y and the
// second BatchNorm's output.
struct BatchNormReLUConvolutionBatchNorm
    : torch::autograd::Function<BatchNormReLUConvolutionBatchNorm> {
  static at::Tensor forward(
      AutogradContext* ctx, const at::Tensor& x, const c10::optional<at::Tensor>& weight_arg,
      const c10::optional<at::Tensor>& bias_arg, const c10::optional<at::Tensor>& running_mean,
      const c10::optional<at::Tensor>& running_var, double momentum, double eps,
      const at::Tensor& conv_weight, const c10::optional<at::Tensor>& conv_bias,
      std::vector<std::int64_t> stride, std::vector<std::int64_t> padding,
      std::vector<std::int64_t> dilation, std::int64_t groups,
      const c10::optional<at::Tensor>& weight2_arg, const c10::optional<at::Tensor>& bias2_arg,
      const c10::optional<at::Tensor>& running_mean2, const c10::optional<at::Tensor>& running_var2,
      double momentum2, double eps2, bool autocast) {
    const at::Tensor weight = weight_arg.value_or(at::Tensor());
    const at::Tensor bias = bias_arg.value_or(at::Tensor());
    const ConvShape shape{conv_bias.has_value(),
                          std::move(stride),
                          std::move(padding),
                          std::move(dilation),
                          groups,
                          autocast};
    variable_list saved;
    const at::Tensor c =
        batch_norm_relu_conv_forward(x, weight, bias, running_mean, running_var, momentum, eps,
                                     conv_weight, conv_bias, shape, ctx, &saved);
    TrainedBatchNorm bn2 = batch_norm_training(c, weight2_arg, bias2_arg, running_mean2,
                                               running_var2, momentum2, eps2);
    // Saved tensors, unlike saved_data, are released when this node's backward has run: those of
    // BatchNormReLUConvolution first (kBatchNormReLUConvSaved), then the second BatchNorm's.
    saved.insert(saved.end(),
                 {weight2_arg.value_or(at::Tensor()), bias2_arg.value_or(at::Tensor()), bn2.mean,
                  bn2.invstd, conv_bias.value_or(at::Tensor()), bn2.reserve});
    ctx->save_for_backward(saved);
    shape.save(ctx);
    ctx->saved_data["eps2"] = eps2;
    ctx->saved_data["backend2"] = bn2.backend;
    save_op(ctx, "batch_norm_relu_conv2d_batch_norm");
    return bn2.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward(ctx);
    const variable_list saved = ctx->get_saved_variables();
    constexpr std::size_t k = kBatchNormReLUConvSaved;
    const at::Tensor& weight2 = saved[k];
    const at::Tensor& bias2 = saved[k + 1];
    const ConvShape shape = ConvShape::load(ctx);
    // The convolution's input, recomputed.
    at::Tensor input = shape.input(at::relu(saved[kKeptFirst]), saved[kConvWeight]);
    at::Tensor grad_c, grad_weight2, grad_bias2;
    {
      // The convolution's output, recomputed: the second BatchNorm's input, whose backward is
      // that of the backend that ran its forward.
      const at::Tensor c = shape.convolution(input, saved[kConvWeight], saved[k + 4]);
      std::tie(grad_c, grad_weight2, grad_bias2) = batch_norm_backward_kernel(
          ctx->saved_data["backend2"].toInt(), saved[k + 5], grads[0], c, weight2, saved[k + 2],
          saved[k + 3], ctx->saved_data["eps2"].toDouble(),
          {true, weight2.defined(), bias2.defined()});
    }
    const std::array<at::Tensor, 5> g =
        batch_norm_relu_conv_backward(std::move(grad_c), std::move(input), saved, shape, ctx);
    variable_list out = {g[0], g[1], g[2]};
    out.resize(20);  // nothing for the statistics, momenta, eps, the convolution's shape, autocast
    out[7] = g[3];
    out[8] = g[4];
    out[13] = weight2.defined() ? grad_weight2 : at::Tensor();
    out[14] = bias2.defined() ? grad_bias2 : at::Tensor();
    return out;
  }
};

c10::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
}

bool needs_grad(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!at::GradMode::is_enabled()) return false;
  return x.requires_grad() || (weight.defined() && weight.requires_grad()) ||
         (bias.defined() && bias.requires_grad());
}

at::Tensor plain_batch_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& running_mean, const at::Tensor& running_var,
                            bool training, double momentum, double eps) {
  return at::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps,
                        at::globalContext().userEnabledCuDNN());
}

// `op`: the op the caller called, which an error names.
at::Tensor batch_norm_variant(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& running_mean, const at::Tensor& running_var,
                              bool training, double momentum, double eps, bool fuse_relu,
                              const char* op) {
  if (op_mode() == OpMode::kDefault || !training || !needs_grad(x, weight, bias)) {
    at::Tensor y =
        plain_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
    return fuse_relu ? at::relu(y) : y;
  }
  TORCH_CHECK(x.dim() >= 2, "monet::ops::batch_norm: expected an input of 2 or more dims, got ",
              x.dim());
  return OutputKeepingBatchNorm::apply(x, optional(weight), optional(bias), optional(running_mean),
                                       optional(running_var), momentum, eps, fuse_relu,
                                       std::string(op));
}

// conv2d(relu(batch_norm(x))): the plain ops, or the compact op where it keeps less. `op`: the op
// the caller called, which an error names.
at::Tensor bn_relu_conv2d(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& running_mean, const at::Tensor& running_var,
                          bool training, double momentum, double eps, const at::Tensor& conv_weight,
                          const at::Tensor& conv_bias, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation, std::int64_t groups,
                          const char* op) {
  const bool grad =
      at::GradMode::is_enabled() && (needs_grad(x, weight, bias) || conv_weight.requires_grad() ||
                                     (conv_bias.defined() && conv_bias.requires_grad()));
  if (op_mode() == OpMode::kDefault || !training || !grad) {
    const at::Tensor y =
        plain_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
    return at::conv2d(at::relu(y), conv_weight, conv_bias, stride, padding, dilation, groups);
  }
  const AutocastConv conv = autocast_conv(x, conv_weight, conv_bias);
  return BatchNormReLUConvolution::apply(
      x, optional(weight), optional(bias), optional(running_mean), optional(running_var), momentum,
      eps, conv.weight, optional(conv.bias), stride.vec(), padding.vec(), dilation.vec(), groups,
      conv.autocast, std::string(op));
}

void check_conv_args(const char* op, const at::Tensor& x, const at::Tensor& conv_weight,
                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  TORCH_CHECK(x.dim() == 4 && conv_weight.dim() == 4, "monet::ops::", op,
              ": expected a 4-d input and a 4-d convolution weight, got ", x.dim(), "-d and ",
              conv_weight.dim(), "-d");
  TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2, "monet::ops::", op,
              ": stride, padding and dilation take 2 values each (height, width)");
}

}  // namespace

at::Tensor batch_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                      double momentum, double eps) {
  count_variant_op_call();
  return batch_norm_variant(x, weight, bias, running_mean, running_var, training, momentum, eps,
                            /*fuse_relu=*/false, "batch_norm");
}

at::Tensor batch_norm_relu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var,
                           bool training, double momentum, double eps) {
  count_variant_op_call();
  return batch_norm_variant(x, weight, bias, running_mean, running_var, training, momentum, eps,
                            /*fuse_relu=*/true, "batch_norm_relu");
}

at::Tensor batch_norm_relu_conv2d(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, const at::Tensor& running_mean,
                                  const at::Tensor& running_var, bool training, double momentum,
                                  double eps, const at::Tensor& conv_weight,
                                  const at::Tensor& conv_bias, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation,
                                  std::int64_t groups) {
  count_variant_op_call();
  check_conv_args("batch_norm_relu_conv2d", x, conv_weight, stride, padding, dilation);
  return bn_relu_conv2d(x, weight, bias, running_mean, running_var, training, momentum, eps,
                        conv_weight, conv_bias, stride, padding, dilation, groups,
                        "batch_norm_relu_conv2d");
}

at::Tensor batch_norm_relu_conv2d_batch_norm(const at::Tensor& x, const BatchNormArgs& first,
                                             const Conv2dArgs& conv, const BatchNormArgs& second,
                                             bool training) {
  count_variant_op_call(/*recomputes=*/true);
  check_conv_args("batch_norm_relu_conv2d_batch_norm", x, conv.weight, conv.stride, conv.padding,
                  conv.dilation);
  const OpMode mode = op_mode();
  const bool grad = at::GradMode::is_enabled() &&
                    (needs_grad(x, first.weight, first.bias) || conv.weight.requires_grad() ||
                     (conv.bias.defined() && conv.bias.requires_grad()) ||
                     needs_grad(x, second.weight, second.bias));
  if (!recomputes(mode) || !training || !grad) {
    // The plain ops, or the compact pair; each decides for itself.
    const at::Tensor c =
        bn_relu_conv2d(x, first.weight, first.bias, first.running_mean, first.running_var, training,
                       first.momentum, first.eps, conv.weight, conv.bias, conv.stride, conv.padding,
                       conv.dilation, conv.groups, "batch_norm_relu_conv2d_batch_norm");
    return batch_norm_variant(c, second.weight, second.bias, second.running_mean,
                              second.running_var, training, second.momentum, second.eps,
                              /*fuse_relu=*/false, "batch_norm_relu_conv2d_batch_norm");
  }
  const AutocastConv cast = autocast_conv(x, conv.weight, conv.bias);
  return BatchNormReLUConvolutionBatchNorm::apply(
      x, optional(first.weight), optional(first.bias), optional(first.running_mean),
      optional(first.running_var), first.momentum, first.eps, cast.weight, optional(cast.bias),
      conv.stride, conv.padding, conv.dilation, conv.groups, optional(second.weight),
      optional(second.bias), optional(second.running_mean), optional(second.running_var),
      second.momentum, second.eps, cast.autocast);
}

}  // namespace monet::ops
