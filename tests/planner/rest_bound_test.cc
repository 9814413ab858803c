#include "planner/rest_bound.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "exact_search.h"
#include "planner/block_costs.h"
#include "planner/chain_model.h"
#include "planner/checkpoint_dp.h"
#include "planner/simulate.h"
#include "random_chains.h"

namespace monet {
namespace {

// The bound from the start of the chain is never above the true optimum over every plan (every
// checkpoint choice, every variant), and is infinite only where no plan fits.
TEST(RestBound, NeverAboveTheExhaustiveOptimum) {
  std::mt19937_64 rng(31);
  int bounded = 0;
  for (int trial = 0; trial < 300; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 1 + trial % 9;
    options.max_variants = 1 + trial % 3;
    const Chain chain = testing::random_chain(rng, options);
    const BlockCosts costs(chain, /*default_only=*/false);
    const std::int64_t keep_all = simulate(chain, uniform_plan(chain, false)).peak_bytes;
    const std::int64_t least = testing::exact_least_budget(chain, false);
    const std::int64_t budget = testing::random_budget(rng, least - least / 10, keep_all);
    const testing::Optimum truth = testing::block_search_optimum(chain, budget, false);
    const double bound =
        RestBound(costs).least_time(0, budget - costs.fixed_bytes() - costs.turn());
    if (!truth.feasible) continue;
    ASSERT_LE(bound, truth.time * (1 + 1e-12)) << "trial " << trial;
    bounded += bound > RestBound(costs).least_time(0, std::numeric_limits<std::int64_t>::max() / 4)
                   ? 1
                   : 0;
  }
  EXPECT_GT(bounded, 50) << "the budget should raise the bound above keeping everything";
}

// solve_faster_than() finds solve()'s plan when it beats the bound, and nothing when it does not:
// its pruning drops no state that leads to a faster plan.
TEST(RestBound, BoundedSearchAgreesWithTheDp) {
  std::mt19937_64 rng(32);
  int found = 0, none = 0;
  for (int trial = 0; trial < 400; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 1 + trial % 16;
    const Chain chain = testing::random_chain(rng, options);
    const BlockCosts costs(chain, /*default_only=*/true);
    CheckpointDp dp(costs, DpChoices::defaults(costs.stages()), DpOptions{0});
    const std::int64_t keep_all = simulate(chain, uniform_plan(chain, false)).peak_bytes;
    const std::int64_t budget = testing::random_budget(rng, dp.min_feasible_bytes(),
                                                       std::max(dp.min_feasible_bytes(), keep_all));
    const DpSolution best = dp.solve(budget);
    ASSERT_TRUE(best.feasible);
    // Bounds just above the optimum (found), at it and below it (none).
    for (double factor : {1.0 + 1e-6, 1.01, 1.0, 0.99}) {
      const std::optional<DpSolution> bounded = dp.solve_faster_than(budget, best.time * factor);
      ASSERT_TRUE(dp.exact());
      if (factor > 1.0) {
        ASSERT_TRUE(bounded.has_value()) << "trial " << trial << " factor " << factor;
        ASSERT_NEAR(bounded->time, best.time, 1e-9 * best.time);
        ASSERT_LE(simulate(chain, bounded->plan).peak_bytes, budget);
        ++found;
      } else {
        ASSERT_FALSE(bounded.has_value()) << "trial " << trial << " factor " << factor;
        ++none;
      }
    }
  }
  EXPECT_GT(found, 0);
  EXPECT_GT(none, 0);
}

}  // namespace
}  // namespace monet
