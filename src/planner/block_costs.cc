#include "planner/block_costs.h"

#include <algorithm>

#include "planner/chain_model.h"

namespace monet {

BlockCosts::BlockCosts(const Chain& chain, bool default_only)
    : stages_(static_cast<int>(chain.stages.size())),
      fixed_bytes_(chain.fixed_bytes),
      default_only_(default_only) {
  out_.assign(stages_ + 1, 0);
  grads_after_.assign(stages_ + 1, 0);
  for (int i = stages_ - 1; i >= 0; --i) {
    grads_after_[i] = grads_after_[i + 1] + chain.stages[i].grad_bytes;
  }
  first_.assign(stages_ + 2, 0);
  std::size_t total = 0;
  for (const Stage& stage : chain.stages) total += default_only ? 1 : stage.variants.size();
  for (std::vector<std::int64_t>* v : {&saved_, &fwd_peak_, &bwd_peak_}) v->reserve(total);
  for (std::vector<double>* v : {&fwd_time_, &bwd_time_}) v->reserve(total);
  for (int i = 1; i <= stages_; ++i) {
    const std::vector<VariantCosts>& variants = chain.stages[i - 1].variants;
    const int count = default_only ? 1 : static_cast<int>(variants.size());
    first_[i + 1] = first_[i] + count;
    std::int64_t out = variants[0].out_bytes;
    for (int v = 0; v < count; ++v) {
      const VariantCosts& c = variants[v];
      out = std::max(out, c.out_bytes);
      if (c.out_bytes != variants[0].out_bytes) exact_ = false;
      saved_.push_back(c.saved_bytes);
      fwd_peak_.push_back(c.fwd_peak);
      bwd_peak_.push_back(c.bwd_peak + grads_after_[i]);
      fwd_time_.push_back(c.fwd_time);
      bwd_time_.push_back(c.bwd_time);
    }
    out_[i] = out;
  }
}

std::int64_t BlockCosts::peak(const Plan& plan) const {
  std::int64_t retained = 0;
  std::int64_t peak = 0;
  for_each_block(plan, [&](int, int, bool, const Block& block) {
    peak = std::max(peak, retained + block.local);
    retained += block.retained;
  });
  peak = std::max(peak, retained + turn());
  return fixed_bytes_ + peak;
}

double BlockCosts::time(const Plan& plan) const {
  double time = 0.0;
  for (int i = 1; i <= stages_; ++i) {
    const StagePlan& stage = plan.stages[i - 1];
    time +=
        (stage.checkpoint ? 2.0 : 1.0) * fwd_time(i, stage.variant) + bwd_time(i, stage.variant);
  }
  return time;
}

}  // namespace monet
