#include "random_chains.h"

#include <string>

namespace monet::testing {

Chain random_chain(std::mt19937_64& rng, const RandomChainOptions& options) {
  std::uniform_int_distribution<std::int64_t> out(10, 200), saved(0, 400), fwd_peak(0, 100),
      bwd_peak(0, 200);
  std::uniform_real_distribution<double> fwd_time(1.0, 10.0), bwd_ratio(1.0, 3.0),
      shrink(0.05, 0.9), peak_scale(0.3, 1.5), slower(1.0, 1.4), out_noise(0.95, 1.05);
  std::uniform_int_distribution<int> variants(options.min_variants, options.max_variants);
  Chain chain;
  chain.fixed_bytes = options.fixed_bytes;
  for (int i = 0; i < options.stages; ++i) {
    Stage stage;
    stage.name = "s" + std::to_string(i);
    VariantCosts base;
    base.name = "default";
    base.out_bytes = out(rng);
    base.saved_bytes = saved(rng);
    base.fwd_peak = fwd_peak(rng);
    base.bwd_peak = bwd_peak(rng);
    base.fwd_time = fwd_time(rng);
    base.bwd_time = base.fwd_time * bwd_ratio(rng);
    stage.variants.push_back(base);
    const int count = variants(rng);
    for (int v = 1; v < count; ++v) {
      VariantCosts c = base;
      c.name = "v" + std::to_string(v);
      c.saved_bytes =
          static_cast<std::int64_t>(static_cast<double>(base.saved_bytes) * shrink(rng));
      c.fwd_peak = static_cast<std::int64_t>(static_cast<double>(base.fwd_peak) * peak_scale(rng));
      c.bwd_peak = static_cast<std::int64_t>(static_cast<double>(base.bwd_peak) * peak_scale(rng));
      c.fwd_time = base.fwd_time * slower(rng);
      c.bwd_time = base.bwd_time * slower(rng);
      if (options.arbitrary_variants) {  // drawn afresh, after the draws above
        c.saved_bytes = saved(rng);
        c.fwd_peak = fwd_peak(rng);
        c.bwd_peak = bwd_peak(rng);
        c.fwd_time = fwd_time(rng);
        c.bwd_time = c.fwd_time * bwd_ratio(rng);
      }
      if (!options.same_out_bytes) {
        c.out_bytes =
            static_cast<std::int64_t>(static_cast<double>(base.out_bytes) * out_noise(rng));
      }
      stage.variants.push_back(c);
    }
    if (options.max_grad_bytes > 0) {
      stage.grad_bytes =
          std::uniform_int_distribution<std::int64_t>(0, options.max_grad_bytes)(rng);
    }
    chain.stages.push_back(std::move(stage));
  }
  return chain;
}

std::int64_t random_budget(std::mt19937_64& rng, std::int64_t low, std::int64_t high) {
  return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
}

}  // namespace monet::testing
