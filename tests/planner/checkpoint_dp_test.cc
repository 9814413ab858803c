#include "planner/checkpoint_dp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "exact_search.h"
#include "model_chains.h"
#include "planner/chain_model.h"
#include "planner/simulate.h"
#include "random_chains.h"

namespace monet {
namespace {

// The least peak over every checkpoint-only plan, by trying them all: per stage kept,
// checkpointed, or checkpointed starting a new segment.
std::int64_t least_peak(const Chain& chain) {
  const int stages = static_cast<int>(chain.stages.size());
  std::int64_t least = std::numeric_limits<std::int64_t>::max();
  Plan plan = uniform_plan(chain, false);
  std::vector<int> digit(stages, 0);
  while (true) {
    for (int i = 0; i < stages; ++i) plan.stages[i] = StagePlan{digit[i] >= 1, 0, digit[i] == 2};
    least = std::min(least, simulate(chain, plan).peak_bytes);
    int k = 0;
    while (k < stages && ++digit[k] == (k == 0 ? 2 : 3)) digit[k++] = 0;
    if (k == stages) break;
  }
  return least;
}

// dp against every checkpoint plan (2 * 3^(L-1) of them), through simulate() only: the same
// fastest time, the same feasibility, and the exact least feasible budget.
TEST(CheckpointDp, ExactlyOptimalAmongCheckpointPlans) {
  std::mt19937_64 rng(11);
  int cases = 0, infeasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 1 + trial % 10;
    options.max_variants = 2;  // ignored by dp, which runs default variants
    const Chain chain = testing::random_chain(rng, options);
    const std::int64_t least = least_peak(chain);
    const std::int64_t most = simulate(chain, uniform_plan(chain, false)).peak_bytes;
    // Mostly budgets in the interesting range, some just below the least feasible one.
    const std::int64_t budget = trial % 10 == 0
                                    ? least - 1 - trial % 3
                                    : testing::random_budget(rng, least, std::max(least, most));
    const StrategyOutcome dp = plan_dp(chain, budget);
    const testing::Optimum truth = testing::brute_force_optimum(chain, budget, true);
    const BlockCosts costs(chain, true);
    CheckpointDp engine(costs, DpChoices::defaults(costs.stages()), dp_options(costs.stages()));
    engine.solve(budget);
    ASSERT_TRUE(engine.exact()) << "trial " << trial << ": a front was discretized";
    ASSERT_EQ(dp.min_feasible_bytes, least) << "trial " << trial;
    ASSERT_EQ(dp.feasible, truth.feasible) << "trial " << trial;
    const Simulation sim = simulate(chain, dp.plan);
    EXPECT_EQ(non_default_variants(dp.plan), 0);
    if (!truth.feasible) {
      EXPECT_EQ(sim.peak_bytes, least) << "the infeasible answer is the least-peak plan";
      ++infeasible;
      continue;
    }
    ASSERT_LE(sim.peak_bytes, budget) << "trial " << trial;
    ASSERT_NEAR(sim.time, truth.time, 1e-9 * truth.time) << "trial " << trial;
    ++cases;
  }
  EXPECT_GT(cases, 300);
  EXPECT_GT(infeasible, 20);
}

// The same where stages create gradients in backward (Stage::grad_bytes), which make the late
// stages' recomputation dearer than the early ones'.
TEST(CheckpointDp, ExactlyOptimalWithGradientsMadeInBackward) {
  std::mt19937_64 rng(16);
  int cases = 0;
  for (int trial = 0; trial < 200; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 1 + trial % 9;
    options.max_grad_bytes = 300;
    const Chain chain = testing::random_chain(rng, options);
    const std::int64_t least = least_peak(chain);
    const std::int64_t most = simulate(chain, uniform_plan(chain, false)).peak_bytes;
    const std::int64_t budget =
        trial % 10 == 0 ? least - 1 : testing::random_budget(rng, least, std::max(least, most));
    const StrategyOutcome dp = plan_dp(chain, budget);
    const testing::Optimum truth = testing::brute_force_optimum(chain, budget, true);
    ASSERT_EQ(dp.min_feasible_bytes, least) << "trial " << trial;
    ASSERT_EQ(dp.feasible, truth.feasible) << "trial " << trial;
    if (!truth.feasible) continue;
    const Simulation sim = simulate(chain, dp.plan);
    ASSERT_LE(sim.peak_bytes, budget) << "trial " << trial;
    ASSERT_NEAR(sim.time, truth.time, 1e-9 * truth.time) << "trial " << trial;
    ++cases;
  }
  EXPECT_GT(cases, 150);
}

TEST(CheckpointDp, BudgetAtTheLeastFeasibleFits) {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 200; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 1 + trial % 40;
    const Chain chain = testing::random_chain(rng, options);
    const BlockCosts costs(chain, true);
    CheckpointDp dp(costs, DpChoices::defaults(costs.stages()));
    const std::int64_t least = dp.min_feasible_bytes();
    const DpSolution at = dp.solve(least);
    ASSERT_TRUE(at.feasible);
    EXPECT_EQ(simulate(chain, at.plan).peak_bytes, at.peak_bytes);
    EXPECT_LE(at.peak_bytes, least);
    EXPECT_FALSE(dp.solve(least - 1).feasible);
  }
}

// Long chains have large fronts, which the DP discretizes (DpOptions::max_front). Against the
// whole fronts: the same feasibility, every plan within the budget, and at most 2% of the
// iteration's time slower (random chains, the hardest case: no two stages alike).
TEST(CheckpointDp, DiscretizedFrontsStayCloseToExact) {
  std::mt19937_64 rng(15);
  int discretized = 0;
  double worst = 0.0;
  for (int trial = 0; trial < 24; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 40 + 5 * trial;
    const Chain chain = testing::random_chain(rng, options);
    const BlockCosts costs(chain, true);
    CheckpointDp fast(costs, DpChoices::defaults(costs.stages()), dp_options(costs.stages()));
    CheckpointDp whole(costs, DpChoices::defaults(costs.stages()), DpOptions{0});
    const Simulation none = simulate(chain, uniform_plan(chain, false));
    const std::int64_t budget =
        testing::random_budget(rng, whole.min_feasible_bytes(), none.peak_bytes);
    const DpSolution a = fast.solve(budget), b = whole.solve(budget);
    ASSERT_TRUE(whole.exact());
    ASSERT_EQ(a.feasible, b.feasible);
    ASSERT_LE(simulate(chain, a.plan).peak_bytes, budget);
    ASSERT_GE(a.time, b.time * (1 - 1e-12));
    const double gap = (a.time - b.time) / none.time;
    EXPECT_LE(gap, 0.02) << "trial " << trial;
    worst = std::max(worst, gap);
    discretized += fast.exact() ? 0 : 1;
  }
  std::printf("discretized fronts: %d of 24 chains, worst gap %.3f%% of the iteration\n",
              discretized, 100.0 * worst);
}

TEST(CheckpointDp, LargeBudgetKeepsEverything) {
  std::mt19937_64 rng(13);
  testing::RandomChainOptions options;
  options.stages = 30;
  const Chain chain = testing::random_chain(rng, options);
  const StrategyOutcome dp = plan_dp(chain, std::numeric_limits<std::int64_t>::max() / 8);
  ASSERT_TRUE(dp.feasible);
  EXPECT_EQ(checkpointed_stages(dp.plan), 0);
}

TEST(CheckpointDp, NoTwoSegmentsInARowMeansAdjacentCheckpointsMerge) {
  // Reconstructed plans are read back as maximal runs, so the DP must never have planned two
  // segments back to back: its own peak must be simulate()'s.
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 300; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 2 + trial % 30;
    const Chain chain = testing::random_chain(rng, options);
    const BlockCosts costs(chain, true);
    CheckpointDp dp(costs, DpChoices::defaults(costs.stages()));
    const std::int64_t most = simulate(chain, uniform_plan(chain, false)).peak_bytes;
    const std::int64_t budget = testing::random_budget(rng, dp.min_feasible_bytes(),
                                                       std::max(dp.min_feasible_bytes(), most));
    const DpSolution s = dp.solve(budget);
    ASSERT_TRUE(s.feasible);
    ASSERT_EQ(s.peak_bytes, simulate(chain, s.plan).peak_bytes);
    ASSERT_LE(s.peak_bytes, budget);
  }
}

// validate_chain refuses a chain whose bytes sum past what the DP counts; given one anyway, the DP
// says so rather than follow a plan that never reaches the chain's end.
TEST(CheckpointDp, BytesPastWhatItCountsAreAnErrorNotAnEndlessPlan) {
  const Chain chain = testing::chain_summing_past_the_limit();
  const BlockCosts costs(chain, true);
  EXPECT_THROW(CheckpointDp(costs, DpChoices::defaults(costs.stages())), std::logic_error);
}

}  // namespace
}  // namespace monet
