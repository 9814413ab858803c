// BatchNorm (and BatchNorm + ReLU) that keeps its output for backward, not its input, and
// recovers the normalized input from it: x_hat = (y - bias) / weight.
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <tuple>
#include <vector>

#include "kernels/variant_util.h"
#include "monet/ops.h"

namespace monet::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = x_hat * w + b is rounded once: recovering x_hat costs an absolute error of about
// eps * (2 |x_hat| + |b / w|). Channels whose |w| is under this share of max(1, |b|) keep their
// input slice instead (a ResNet's zero-initialized last BatchNorm is such a case).
constexpr double kInvertibleWeight = 1e-2;

// Sizes that broadcast a per-channel vector against x: [1, C, 1, ...].
std::vector<std::int64_t> channel_view(const at::Tensor& x) {
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(x.dim()), 1);
  sizes[1] = x.size(1);
  return sizes;
}

// Every dim of x but the channel dim: the reductions of BatchNorm.
std::vector<std::int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

struct OutputKeepingBatchNorm : torch::autograd::Function<OutputKeepingBatchNorm> {
  // LibTorch 1.13's Function takes no undefined tensors: absent ones come as nullopt.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const c10::optional<at::Tensor>& weight_arg,
                            const c10::optional<at::Tensor>& bias_arg,
                            const c10::optional<at::Tensor>& running_mean,
                            const c10::optional<at::Tensor>& running_var, double momentum,
                            double eps, bool fuse_relu) {
    const at::Tensor weight = weight_arg.value_or(at::Tensor());
    const at::Tensor bias = bias_arg.value_or(at::Tensor());
    // torch's CPU batch_norm runs native_batch_norm; it also updates the running statistics.
    auto [y, mean, invstd] = at::native_batch_norm(x, weight, bias, running_mean, running_var,
                                                   /*training=*/true, momentum, eps);
    // Channels too close to zero weight keep (only) their slice of the input.
    at::Tensor weak, weak_input;
    if (weight.defined()) {
      at::Tensor floor = bias.defined() ? bias.abs().clamp_min(1.0) : at::ones_like(weight);
      weak = (weight.abs() < floor * kInvertibleWeight).nonzero().reshape({-1});
      if (weak.numel() > 0) {
        weak_input = x.index_select(1, weak);
      } else {
        weak = at::Tensor();
      }
    }
    at::Tensor out = fuse_relu ? at::relu(y) : y;
    // Unfused, y is this node's output: save_for_backward holds it without a reference cycle.
    // Fused, the output after the ReLU is not kept, only y before it.
    ctx->save_for_backward({fuse_relu ? at::Tensor() : y, weight, bias, mean, invstd});
    if (fuse_relu) ctx->saved_data["pre_relu"] = y;
    if (weak.defined()) {
      ctx->saved_data["weak"] = weak;
      ctx->saved_data["weak_input"] = weak_input;
    }
    ctx->saved_data["fuse_relu"] = fuse_relu;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const bool fuse_relu = ctx->saved_data["fuse_relu"].toBool();
    const at::Tensor y = fuse_relu ? ctx->saved_data["pre_relu"].toTensor() : saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& bias = saved[2];
    const at::Tensor& mean = saved[3];
    const at::Tensor& invstd = saved[4];
    const std::vector<std::int64_t> view = channel_view(y);
    const std::vector<std::int64_t> dims = reduced_dims(y);

    at::Tensor g = grads[0];
    // The ReLU's backward as torch computes it: grad where its output is > 0, else 0.
    if (fuse_relu) g = at::threshold_backward(g, y, 0);

    at::Tensor x_hat = y;
    if (bias.defined()) x_hat = x_hat - bias.view(view);
    if (weight.defined()) x_hat = x_hat / weight.view(view);
    if (ctx->saved_data.count("weak")) {
      const at::Tensor weak = ctx->saved_data["weak"].toTensor();
      const at::Tensor weak_input = ctx->saved_data["weak_input"].toTensor();
      std::vector<std::int64_t> weak_view = view;
      weak_view[1] = weak.numel();
      x_hat = x_hat.index_copy(1, weak,
                               (weak_input - mean.index_select(0, weak).view(weak_view)) *
                                   invstd.index_select(0, weak).view(weak_view));
    }

    const double count = static_cast<double>(y.numel() / y.size(1));
    const at::Tensor sum_g = g.sum(dims);
    const at::Tensor sum_g_x_hat = (g * x_hat).sum(dims);
    const at::Tensor scale = weight.defined() ? invstd * weight : invstd;
    at::Tensor grad_x =
        (g - (sum_g / count).view(view) - x_hat * (sum_g_x_hat / count).view(view)) *
        scale.view(view);
    return {grad_x,
            weight.defined() ? sum_g_x_hat : at::Tensor(),
            bias.defined() ? sum_g : at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

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

at::Tensor batch_norm_variant(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                              const at::Tensor& running_mean, const at::Tensor& running_var,
                              bool training, double momentum, double eps, bool fuse_relu) {
  count_variant_op_call();
  if (op_mode() == OpMode::kDefault || !training || !needs_grad(x, weight, bias)) {
    at::Tensor y =
        plain_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
    return fuse_relu ? at::relu(y) : y;
  }
  TORCH_CHECK(x.dim() >= 2, "monet::ops::batch_norm: expected an input of 2 or more dims, got ",
              x.dim());
  auto optional = [](const at::Tensor& t) {
    return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
  };
  return OutputKeepingBatchNorm::apply(x, optional(weight), optional(bias), optional(running_mean),
                                       optional(running_var), momentum, eps, fuse_relu);
}

}  // namespace

at::Tensor batch_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
                      double momentum, double eps) {
  return batch_norm_variant(x, weight, bias, running_mean, running_var, training, momentum, eps,
                            /*fuse_relu=*/false);
}

at::Tensor batch_norm_relu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var,
                           bool training, double momentum, double eps) {
  return batch_norm_variant(x, weight, bias, running_mean, running_var, training, momentum, eps,
                            /*fuse_relu=*/true);
}

}  // namespace monet::ops
