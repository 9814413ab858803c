// Dropout that keeps a 1-bit mask (compact) or only its RNG key (regenerate) for backward.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>
#include <utility>

#include "kernels/bit_pack.h"
#include "kernels/device.h"
#include "kernels/variant_util.h"
#include "monet/ops.h"

namespace monet::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x * noise, noise = mask / (1 - p), rounded as torch rounds it (kernels::scale_by_mask): on the
// CPU as its dropout's forward and backward, on CUDA as its dropout's backward. One pass, no
// tensor of the noise.
at::Tensor apply_mask(const at::Tensor& x, const at::Tensor& mask, double p) {
  return kernels::scale_by_mask(x, mask, 1 - p);
}

// The backward's masking of the gradient g. Under create_graph (grad mode on in a backward) the
// result must carry a graph for the gradient of this gradient: ATen operations, rounded as torch's
// dropout backward rounds (on the CPU its Mul node: g times the noise, the noise's 1 divided by
// 1 - p in g's dtype; elsewhere native_dropout_backward's g times 0 or 1, then times 1 / (1 - p)).
at::Tensor mask_gradient(const at::Tensor& g, const at::Tensor& mask, double p) {
  if (!at::GradMode::is_enabled()) return apply_mask(g, mask, p);
  if (g.is_cpu()) return g * kernels::mask_to_values(mask, g).div_(1 - p);
  return kernels::scale_by_mask_aten(g, mask, 1 - p);
}

// torch's own dropout of x and its keep mask, packed to bits. On the CPU torch draws Bernoulli(1 -
// p) noise from the default generator and multiplies x by it over 1 - p: the same here. On CUDA
// torch's dropout is its fused kernel (native_dropout), which draws, scales and returns a byte
// mask in one pass: that kernel runs here, and its mask is packed. Either way the output, and
// what the generator has drawn, are those of torch::dropout.
std::pair<at::Tensor, at::Tensor> torch_dropout(const at::Tensor& x, double p) {
  if (x.is_cuda()) {
    auto [out, keep] = at::native_dropout(x, p, /*train=*/true);
    return {out, kernels::pack_nonzero(keep)};
  }
  at::Tensor noise = at::empty_like(x, at::MemoryFormat::Contiguous).bernoulli_(1 - p);
  at::Tensor mask = kernels::pack_nonzero(noise);
  noise = at::Tensor();  // freed before the output is made
  return {apply_mask(x, mask, p), mask};
}

// A seed from the default CPU generator: restoring its state replays the same seed, hence the
// same mask. One generator on every device, so that torch::manual_seed alone fixes the mask.
std::uint64_t draw_seed() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get<at::CPUGeneratorImpl>()->random64();
}

struct CompactDropout : torch::autograd::Function<CompactDropout> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p) {
    auto [out, mask] = torch_dropout(x, p);
    // Saved tensors, unlike saved_data, are released when this node's backward has run.
    ctx->save_for_backward({mask});
    ctx->saved_data["p"] = p;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor mask = ctx->get_saved_variables()[0];
    return {mask_gradient(grads[0], mask, ctx->saved_data["p"].toDouble()), at::Tensor()};
  }
};

struct RegeneratingDropout : torch::autograd::Function<RegeneratingDropout> {
  // The key (seed, offset) is drawn by the caller so that a no-grad call draws alike.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p, std::int64_t seed,
                            std::int64_t offset) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["offset"] = offset;
    const at::Tensor mask =
        kernels::dropout_keep_mask(static_cast<std::uint64_t>(seed),
                                   static_cast<std::uint64_t>(offset), x.numel(), p, x.options());
    return apply_mask(x, mask, p);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const double p = ctx->saved_data["p"].toDouble();
    const at::Tensor& g = grads[0];
    const at::Tensor mask = kernels::dropout_keep_mask(
        static_cast<std::uint64_t>(ctx->saved_data["seed"].toInt()),
        static_cast<std::uint64_t>(ctx->saved_data["offset"].toInt()), g.numel(), p, g.options());
    return {mask_gradient(g, mask, p), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  count_variant_op_call();
  const OpMode mode = op_mode();
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  // Nothing drawn and nothing kept in these cases, in torch's op as in any variant.
  // Nor on a device where no mask can be kept (kernels::masks_run_on).
  if (mode == OpMode::kDefault || !training || p == 0 || p == 1 || x.numel() == 0 ||
      !kernels::masks_run_on(x)) {
    return at::dropout(x, p, training);
  }
  const bool keep = at::GradMode::is_enabled() && x.requires_grad();
  if (mode != OpMode::kRegenerate) {  // compact, recompute
    if (keep) return CompactDropout::apply(x, p);
    return torch_dropout(x, p).first;
  }
  const auto seed = static_cast<std::int64_t>(draw_seed());
  const std::int64_t offset = 0;  // one stream per call: the whole seed is this call's
  if (keep) return RegeneratingDropout::apply(x, p, seed, offset);
  const at::Tensor mask = kernels::dropout_keep_mask(static_cast<std::uint64_t>(seed), offset,
                                                     x.numel(), p, x.options());
  return apply_mask(x, mask, p);
}

}  // namespace monet::ops
