// Dropout that keeps a 1-bit mask (compact) or only its RNG key (regenerate) for backward.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

#include "kernels/bit_pack.h"
#include "kernels/variant_util.h"
#include "monet/ops.h"

namespace monet::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x * noise, noise = mask / (1 - p), rounded as torch's CPU dropout rounds it (noise.div_(1 - p);
// input * noise), so that the results match it bit for bit; one pass, no tensor of the noise.
at::Tensor apply_mask(const at::Tensor& x, const at::Tensor& mask, double p) {
  return kernels::scale_by_mask(x, mask, 1 - p);
}

// torch's draw: Bernoulli(1 - p) noise from the default generator, packed to bits.
at::Tensor draw_torch_mask(const at::Tensor& x, double p) {
  at::Tensor noise = at::empty_like(x, at::MemoryFormat::Contiguous).bernoulli_(1 - p);
  return kernels::pack_nonzero(noise);
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
    at::Tensor mask = draw_torch_mask(x, p);
    // Saved tensors, unlike saved_data, are released when this node's backward has run.
    ctx->save_for_backward({mask});
    ctx->saved_data["p"] = p;
    return apply_mask(x, mask, p);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor mask = ctx->get_saved_variables()[0];
    return {apply_mask(grads[0], mask, ctx->saved_data["p"].toDouble()), at::Tensor()};
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
    return {apply_mask(g, mask, p), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  count_variant_op_call();
  const OpMode mode = op_mode();
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  // Nothing drawn and nothing kept in these cases, in torch's op as in any variant.
  if (mode == OpMode::kDefault || !training || p == 0 || p == 1 || x.numel() == 0) {
    return at::dropout(x, p, training);
  }
  const bool keep = at::GradMode::is_enabled() && x.requires_grad();
  if (mode == OpMode::kCompact) {
    if (keep) return CompactDropout::apply(x, p);
    return apply_mask(x, draw_torch_mask(x, p), p);
  }
  const auto seed = static_cast<std::int64_t>(draw_seed());
  const std::int64_t offset = 0;  // one stream per call: the whole seed is this call's
  if (keep) return RegeneratingDropout::apply(x, p, seed, offset);
  const at::Tensor mask = kernels::dropout_keep_mask(static_cast<std::uint64_t>(seed), offset,
                                                     x.numel(), p, x.options());
  return apply_mask(x, mask, p);
}

}  // namespace monet::ops
