// GELU and softmax as autograd Functions. They keep what torch's ops keep (GELU its input,
// softmax its output): neither has an exact smaller form (docs/kernels.md). They are variant-aware
// so that a stage made of them reports its modes to the runtime and runs the same in all of them.
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "kernels/variant_util.h"
#include "monet/ops.h"

namespace monet::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct InputKeepingGelu : torch::autograd::Function<InputKeepingGelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const std::string& approximate) {
    ctx->save_for_backward({x});
    ctx->saved_data["approximate"] = approximate;
    return at::gelu(x, approximate);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    return {at::gelu_backward(grads[0], x, approximate), at::Tensor()};
  }
};

struct OutputKeepingSoftmax : torch::autograd::Function<OutputKeepingSoftmax> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t dim) {
    at::Tensor y = at::softmax(x, dim);
    ctx->save_for_backward({y});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(x.scalar_type());
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor y = ctx->get_saved_variables()[0];
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {at::_softmax_backward_data(grads[0], y, ctx->saved_data["dim"].toInt(), dtype),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
  if (!kernels::run_variant(x)) return at::gelu(x, approximate);
  return InputKeepingGelu::apply(x, std::string(approximate));
}

at::Tensor softmax(const at::Tensor& x, std::int64_t dim) {
  if (!kernels::run_variant(x)) return at::softmax(x, dim);
  return OutputKeepingSoftmax::apply(x, at::maybe_wrap_dim(dim, x.dim()));
}

}  // namespace monet::ops
