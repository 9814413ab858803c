#include "planner/block_costs.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "planner/simulate.h"
#include "random_chains.h"

namespace monet {
namespace {

Plan random_plan(std::mt19937_64& rng, const Chain& chain, bool default_only) {
  Plan plan;
  std::bernoulli_distribution checkpoint(0.5), split(0.3);
  for (const Stage& s : chain.stages) {
    const int variants = default_only ? 1 : static_cast<int>(s.variants.size());
    plan.stages.push_back(StagePlan{checkpoint(rng),
                                    std::uniform_int_distribution<int>(0, variants - 1)(rng),
                                    split(rng)});  // adjacent segments too
  }
  return plan;
}

// The identity of block_costs.h, on which the dynamic programs' exactness rests, on `trials`
// random chains and plans; with gradients made in backward (Stage::grad_bytes) when
// `max_grad_bytes` is above 0.
void expect_block_form_is_simulate(std::uint64_t seed, int trials, std::int64_t max_grad_bytes) {
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 1 + trial % 16;
    options.max_variants = 3;
    options.max_grad_bytes = trial % 3 == 0 ? max_grad_bytes / 10 : max_grad_bytes;
    const Chain chain = testing::random_chain(rng, options);
    const BlockCosts costs(chain, /*default_only=*/false);
    ASSERT_TRUE(costs.exact());
    const Plan plan = random_plan(rng, chain, false);
    const Simulation sim = simulate(chain, plan);
    ASSERT_EQ(costs.peak(plan), sim.peak_bytes) << "trial " << trial;
    ASSERT_NEAR(costs.time(plan), sim.time, 1e-9 * sim.time) << "trial " << trial;
  }
}

TEST(BlockCosts, PeakAndTimeEqualSimulate) { expect_block_form_is_simulate(1, 5000, 0); }

// Gradients made in backward count from each block's recomputation and backward on.
TEST(BlockCosts, PeakAndTimeEqualSimulateWithGradients) {
  expect_block_form_is_simulate(3, 3000, 400);
}

TEST(BlockCosts, LargestOutputNeverUnderestimates) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 2000; ++trial) {
    testing::RandomChainOptions options;
    options.stages = 1 + trial % 12;
    options.min_variants = 2;
    options.max_variants = 3;
    options.same_out_bytes = false;
    const Chain chain = testing::random_chain(rng, options);
    const BlockCosts all(chain, /*default_only=*/false);
    const BlockCosts defaults(chain, /*default_only=*/true);
    EXPECT_TRUE(defaults.exact());
    const Plan any = random_plan(rng, chain, false);
    ASSERT_GE(all.peak(any), simulate(chain, any).peak_bytes) << "trial " << trial;
    const Plan plain = random_plan(rng, chain, true);
    ASSERT_EQ(defaults.peak(plain), simulate(chain, plain).peak_bytes) << "trial " << trial;
  }
}

TEST(SegmentScan, LowerBoundGrowsAndBoundsLocal) {
  std::mt19937_64 rng(3);
  testing::RandomChainOptions options;
  options.stages = 20;
  const Chain chain = testing::random_chain(rng, options);
  const BlockCosts costs(chain, true);
  for (int a = 1; a <= costs.stages(); ++a) {
    SegmentScan scan(costs, a);
    std::int64_t previous = 0;
    for (int b = a; b <= costs.stages(); ++b) {
      scan.extend(0);
      EXPECT_GE(scan.local_lower_bound(), previous);
      EXPECT_LE(scan.local_lower_bound(), scan.local());
      EXPECT_EQ(scan.retained(), costs.out(a - 1));
      previous = scan.local_lower_bound();
    }
  }
}

}  // namespace
}  // namespace monet
