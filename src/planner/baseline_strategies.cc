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

// Checkpoints stage k as a segment of its own, as Mimose checkpoints modules one by one.
void checkpoint_alone(Plan* plan, int k) {
  plan->stages[static_cast<std::size_t>(k)] = StagePlan{true, 0, k > 0};
  if (static_cast<std::size_t>(k) + 1 < plan->stages.size()) {
    plan->stages[static_cast<std::size_t>(k) + 1].segment_start = true;
  }
}

// Every stage checkpointed, in adjacent segments of `length` stages.
Plan segments_of(const Chain& chain, int length) {
  Plan plan = uniform_plan(chain, true);
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    plan.stages[i].segment_start = i > 0 && i % static_cast<std::size_t>(length) == 0;
  }
  return plan;
}

}  // namespace

StrategyOutcome plan_none(const Chain& chain, std::int64_t budget_bytes) {
  return fixed_plan(chain, uniform_plan(chain, false), budget_bytes);
}

StrategyOutcome plan_all(const Chain& chain, std::int64_t budget_bytes) {
  return fixed_plan(chain, segments_of(chain, 1), budget_bytes);
}

StrategyOutcome plan_sqrt(const Chain& chain, std::int64_t budget_bytes) {
  const int stages = static_cast<int>(chain.stages.size());
  const int k = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(stages))));
  return fixed_plan(chain, segments_of(chain, k), budget_bytes);
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
    checkpoint_alone(&plan, order[next++]);
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
      checkpoint_alone(&rest, order[k]);
      least_peak = std::min(least_peak, costs.peak(rest));
    }
    return StrategyOutcome{std::move(plan), true, least_peak};
  }
  return StrategyOutcome{std::move(least_plan), false, least_peak};
}

}  // namespace monet
