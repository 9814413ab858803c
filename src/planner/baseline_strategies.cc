#include "planner/baseline_strategies.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "planner/block_costs.h"
#include "planner/chain_model.h"
#include "planner/simulate.h"

namespace monet {
namespace {

// A strategy with one fixed plan fits exactly when that plan does.
StrategyOutcome fixed_plan(const Chain& chain, Plan plan, std::int64_t budget_bytes) {
  const std::int64_t peak = simulate(chain, plan).peak_bytes;
  return StrategyOutcome{std::move(plan), peak <= budget_bytes, peak};
}

}  // namespace

StrategyOutcome plan_none(const Chain& chain, std::int64_t budget_bytes) {
  return fixed_plan(chain, uniform_plan(chain, false), budget_bytes);
}

StrategyOutcome plan_all(const Chain& chain, std::int64_t budget_bytes) {
  return fixed_plan(chain, uniform_plan(chain, true), budget_bytes);
}

StrategyOutcome plan_sqrt(const Chain& chain, std::int64_t budget_bytes) {
  const int stages = static_cast<int>(chain.stages.size());
  const int k = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(stages))));
  Plan plan = uniform_plan(chain, true);
  // 1-based stages k, 2k, ... stay kept; with k = 1 (one stage) nothing is checkpointed.
  for (int i = k; i <= stages; i += k) plan.stages[i - 1].checkpoint = false;
  return fixed_plan(chain, std::move(plan), budget_bytes);
}

StrategyOutcome plan_greedy(const Chain& chain, std::int64_t budget_bytes) {
  const int stages = static_cast<int>(chain.stages.size());
  Plan plan = uniform_plan(chain, false);
  const Plan kept_plan = plan;
  std::vector<std::int64_t> size(stages);
  for (int k = 0; k < stages; ++k) size[k] = retained_bytes(chain, kept_plan, k);
  std::vector<int> order(stages);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return size[x] > size[y]; });

  // The block form gives simulate()'s peak exactly for default variants (block_costs.h), at a
  // fraction of the cost: greedy takes a peak per stage it checkpoints.
  const BlockCosts costs(chain, /*default_only=*/true);
  std::int64_t peak = costs.peak(plan);
  std::int64_t least_peak = peak;
  Plan least_plan = plan;
  std::size_t next = 0;
  while (peak > budget_bytes && next < order.size()) {
    plan.stages[order[next++]].checkpoint = true;
    peak = costs.peak(plan);
    if (peak < least_peak) {
      least_peak = peak;
      least_plan = plan;
    }
  }
  if (peak <= budget_bytes) {
    // The least feasible budget is the lowest peak anywhere along the order, so finish it.
    Plan rest = plan;
    for (std::size_t k = next; k < order.size(); ++k) {
      rest.stages[order[k]].checkpoint = true;
      least_peak = std::min(least_peak, costs.peak(rest));
    }
    return StrategyOutcome{std::move(plan), true, least_peak};
  }
  return StrategyOutcome{std::move(least_plan), false, least_peak};
}

}  // namespace monet
