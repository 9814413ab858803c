#include "planner/baseline_strategies.h"

#include <gtest/gtest.h>

#include <random>

#include "planner/chain_model.h"
#include "planner/checkpoint_dp.h"
#include "planner/simulate.h"
#include "random_chains.h"

namespace monet {
namespace {

Chain chain_of(int stages, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  testing::RandomChainOptions options;
  options.stages = stages;
  return testing::random_chain(rng, options);
}

TEST(Baselines, NoneKeepsAndAllCheckpointsEverything) {
  const Chain chain = chain_of(7, 41);
  const StrategyOutcome none = plan_none(chain, 1 << 30);
  EXPECT_TRUE(none.feasible);
  EXPECT_EQ(checkpointed_stages(none.plan), 0);
  EXPECT_EQ(none.min_feasible_bytes, simulate(chain, none.plan).peak_bytes);
  const StrategyOutcome all = plan_all(chain, 1);
  EXPECT_FALSE(all.feasible);
  EXPECT_EQ(checkpointed_stages(all.plan), 7);
}

TEST(Baselines, SqrtCutsTheChainIntoSegmentsOfK) {
  const StrategyOutcome nine = plan_sqrt(chain_of(9, 42), 1 << 30);  // k = 3
  for (int i = 0; i < 9; ++i) {
    EXPECT_TRUE(nine.plan.stages[i].checkpoint) << i;
    EXPECT_EQ(starts_segment(nine.plan, i), i % 3 == 0) << i;
  }
  const StrategyOutcome ten = plan_sqrt(chain_of(10, 43), 1 << 30);  // k = 4: 4 + 4 + 2
  for (int i = 0; i < 10; ++i) EXPECT_EQ(starts_segment(ten.plan, i), i % 4 == 0) << i;
  EXPECT_EQ(segment_last(ten.plan, 8), 9);
  // Each segment keeps only its input: the forward retains the segment inputs, nothing else.
  const Chain chain = chain_of(9, 45);
  std::int64_t inputs = 0;
  for (int i = 3; i < 9; i += 3) inputs += chain.stages[i - 1].variants[0].out_bytes;
  std::int64_t retained = 0;
  for (int i = 0; i < 9; ++i) retained += retained_bytes(chain, nine.plan, i);
  EXPECT_EQ(retained, inputs);
}

TEST(Baselines, AllMakesEveryStageASegment) {
  const Chain chain = chain_of(6, 46);
  const StrategyOutcome all = plan_all(chain, 1 << 30);
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(starts_segment(all.plan, i)) << i;
    EXPECT_EQ(segment_last(all.plan, i), i) << i;
  }
}

TEST(Baselines, GreedyCheckpointsStagesOneByOne) {
  for (int trial = 0; trial < 20; ++trial) {
    const Chain chain = chain_of(2 + trial, 300 + trial);
    const StrategyOutcome greedy = plan_greedy(chain, 0);
    for (int i = 0; i < static_cast<int>(chain.stages.size()); ++i) {
      if (greedy.plan.stages[i].checkpoint) {
        EXPECT_EQ(segment_last(greedy.plan, i), i) << i;
      }
    }
  }
}

TEST(Baselines, GreedyFitsFromItsLeastFeasibleBudget) {
  for (int trial = 0; trial < 100; ++trial) {
    const Chain chain = chain_of(2 + trial % 30, 100 + trial);
    const StrategyOutcome probe = plan_greedy(chain, 0);
    ASSERT_FALSE(probe.feasible);
    EXPECT_EQ(simulate(chain, probe.plan).peak_bytes, probe.min_feasible_bytes);
    const StrategyOutcome at = plan_greedy(chain, probe.min_feasible_bytes);
    ASSERT_TRUE(at.feasible) << "trial " << trial;
    EXPECT_LE(simulate(chain, at.plan).peak_bytes, probe.min_feasible_bytes);
    EXPECT_EQ(at.min_feasible_bytes, probe.min_feasible_bytes);
    // It is a checkpoint-only plan, so dp can only match or beat it.
    EXPECT_LE(plan_dp(chain, 0).min_feasible_bytes, probe.min_feasible_bytes);
  }
}

TEST(Baselines, GreedyStopsAsSoonAsItFits) {
  const Chain chain = chain_of(12, 45);
  const std::int64_t none_peak = simulate(chain, uniform_plan(chain, false)).peak_bytes;
  const StrategyOutcome roomy = plan_greedy(chain, none_peak);
  EXPECT_EQ(checkpointed_stages(roomy.plan), 0);
  const StrategyOutcome tight = plan_greedy(chain, none_peak - 1);
  EXPECT_GE(checkpointed_stages(tight.plan), 1);
}

}  // namespace
}  // namespace monet
