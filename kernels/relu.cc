// ReLU that keeps a 1-bit mask for backward instead of its output.
#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/bit_pack.h"
#include "kernels/device.h"
#include "kernels/variant_util.h"
#include "monet/ops.h"

namespace monet::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CompactRelu : torch::autograd::Function<CompactRelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    at::Tensor y;
    at::Tensor mask;
    if (!kernels::cuda_kernels_take(x)) {
      // torch's own kernel, so that y is bit for bit torch's; the mask is read off y.
      y = at::relu(x);
      mask = kernels::pack_relu_mask(y);
    } else {
#ifdef MONET_CUDA_KERNELS
      const at::Tensor c = x.contiguous();
      c10::cuda::CUDAGuard guard(c.device());
      y = at::empty_like(c);
      mask = kernels::empty_mask(c.numel(), c.options());
      cuda::launch_relu_pack(c.data_ptr<float>(), y.data_ptr<float>(),
                             reinterpret_cast<std::uint32_t*>(mask.data_ptr<std::int32_t>()),
                             c.numel(), kernels::stream_of(c));
#endif
    }
    // Saved tensors, unlike saved_data, are released when this node's backward has run.
    ctx->save_for_backward({mask});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor mask = ctx->get_saved_variables()[0];
    // torch's threshold_backward gives grad where !(y <= 0), else exactly 0: the same selection.
    // Under create_graph (grad mode on here) the selection must carry a graph for the gradient
    // of this gradient: ATen's where, the same values.
    if (at::GradMode::is_enabled()) return {kernels::select_by_mask_aten(grads[0], mask)};
    return {kernels::select_by_mask(grads[0], mask)};
  }
};

}  // namespace

at::Tensor relu(const at::Tensor& x) {
  if (!kernels::run_variant(x) || !kernels::masks_run_on(x)) return at::relu(x);
  return CompactRelu::apply(x);
}

}  // namespace monet::ops
