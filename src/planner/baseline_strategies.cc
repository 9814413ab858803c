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
  std::vector<std::int64_t> size(stages);
  for (int k = 0; k < stages; ++k) size[k] = retained_bytes(chain, plan, k);
  std::vector<int> order(stages);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return size[x] > size[y]; });

  // The block form gives simulate()'s peak exactly for default variants (block_costs.h), at a
  // fraction of the cost: greedy takes a peak per stage it checkpoints. Its plans hold kept stages
  // and one-stage segments only, so each stage is one of two blocks, made once.
  const BlockCosts costs(chain, /*default_only=*/true);
  std::vector<BlockCosts::Block> kept(stages), alone(stages);
  for (int i = 1; i <= stages; ++i) {
    kept[i - 1] = costs.kept(i, 0);
    SegmentScan scan(costs, i);
    scan.extend(0);
    alone[i - 1] = BlockCosts::Block{scan.local(), scan.retained(), scan.time()};
  }
  std::vector<char> checkpointed(stages, 0);
  const auto peak_of = [&](const std::vector<char>& ckpt) {
    std::int64_t retained = 0;
    std::int64_t peak = 0;
    for (int k = 0; k < stages; ++k) {
      const BlockCosts::Block& block = ckpt[k] ? alone[k] : kept[k];
      peak = std::max(peak, retained + block.local);
      retained += block.retained;
    }
    return costs.fixed_bytes() + std::max(peak, retained + costs.turn());
  };
  std::int64_t peak = peak_of(checkpointed);
  std::int64_t least_peak = peak;
  std::size_t least_next = 0;  // the least peak's plan checkpoints order[0, least_next)
  std::size_t next = 0;
  while (peak > budget_bytes && next < order.size()) {
    checkpointed[order[next++]] = 1;
    peak = peak_of(checkpointed);
    if (peak < least_peak) {
      least_peak = peak;
      least_next = next;
    }
  }
  const bool fits = peak <= budget_bytes;
  if (fits) {
    // The least feasible budget is the lowest peak anywhere along the order, so finish it.
    std::vector<char> rest = checkpointed;
    for (std::size_t k = next; k < order.size(); ++k) {
      rest[order[k]] = 1;
      least_peak = std::min(least_peak, peak_of(rest));
    }
  }
  for (std::size_t k = 0; k < (fits ? next : least_next); ++k) checkpoint_alone(&plan, order[k]);
  return StrategyOutcome{std::move(plan), fits, least_peak};
}

}  // namespace monet
