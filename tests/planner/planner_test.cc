#include "monet/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "planner/chain_model.h"
#include "planner/simulate.h"
#include "random_chains.h"

namespace monet {
namespace {

Chain sample_chain() {
  std::mt19937_64 rng(31);
  testing::RandomChainOptions options;
  options.stages = 10;
  options.max_variants = 3;
  return testing::random_chain(rng, options);
}

TEST(Strategy, NamesRoundTrip) {
  ASSERT_EQ(all_strategies().size(), 6u);
  for (Strategy s : all_strategies()) EXPECT_EQ(parse_strategy(strategy_name(s)), s);
  EXPECT_EQ(strategy_name(Strategy::kMonet), "monet");
}

TEST(Strategy, UnknownNameSaysWhatIsAccepted) {
  try {
    parse_strategy("rotor");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MONET_PLANNER='rotor'"), std::string::npos) << what;
    EXPECT_NE(what.find("none, all, sqrt, greedy, dp, monet"), std::string::npos) << what;
  }
  EXPECT_THROW(parse_strategy("Monet"), ConfigError);  // names are lower case
  EXPECT_THROW(parse_strategy(""), ConfigError);
}

TEST(Strategy, FromEnvironment) {
  ::unsetenv("MONET_PLANNER");
  EXPECT_EQ(strategy_from_env(), Strategy::kMonet);
  ::setenv("MONET_PLANNER", "dp", 1);
  EXPECT_EQ(strategy_from_env(), Strategy::kDp);
  ::setenv("MONET_PLANNER", "fastest", 1);
  EXPECT_THROW(strategy_from_env(), ConfigError);
  ::unsetenv("MONET_PLANNER");
}

TEST(Planner, ResultAgreesWithSimulate) {
  const Chain chain = sample_chain();
  const std::int64_t none_peak = simulate(chain, uniform_plan(chain, false)).peak_bytes;
  for (Strategy s : all_strategies()) {
    const PlanResult r = Planner(s).try_plan(chain, none_peak);
    const Simulation sim = simulate(chain, r.plan);
    EXPECT_EQ(r.strategy, s);
    EXPECT_EQ(r.budget_bytes, none_peak);
    EXPECT_EQ(r.peak_bytes, sim.peak_bytes) << strategy_name(s);
    EXPECT_DOUBLE_EQ(r.time, sim.time) << strategy_name(s);
    EXPECT_DOUBLE_EQ(r.unconstrained_time, simulate(chain, uniform_plan(chain, false)).time)
        << strategy_name(s);
    EXPECT_EQ(r.feasible, r.peak_bytes <= none_peak) << strategy_name(s);
    EXPECT_GE(r.plan_us, 0.0);
    EXPECT_LE(r.min_feasible_bytes, r.feasible ? none_peak : r.min_feasible_bytes);
  }
  // With room for everything, monet and dp keep everything and recompute nothing.
  const PlanResult monet = Planner(Strategy::kMonet).try_plan(chain, none_peak);
  EXPECT_TRUE(monet.feasible);
  EXPECT_EQ(checkpointed_stages(monet.plan), 0);
}

TEST(Planner, InfeasibleBudgetGivesTheLeastThatFits) {
  const Chain chain = sample_chain();
  for (Strategy s : all_strategies()) {
    const Planner planner(s);
    const PlanResult probe = planner.try_plan(chain, chain.fixed_bytes);
    ASSERT_FALSE(probe.feasible) << strategy_name(s);
    try {
      planner.plan(chain, chain.fixed_bytes);
      FAIL() << "no error for " << strategy_name(s);
    } catch (const InfeasibleBudgetError& e) {
      EXPECT_EQ(e.budget_bytes, chain.fixed_bytes);
      EXPECT_EQ(e.min_feasible_bytes, probe.min_feasible_bytes);
      const std::string what = e.what();
      EXPECT_NE(what.find(std::to_string(probe.min_feasible_bytes) + " bytes"), std::string::npos)
          << what;
      EXPECT_NE(what.find("MONET_BUDGET"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string(strategy_name(s))), std::string::npos) << what;
    }
    // The least feasible budget is enough.
    const PlanResult at = planner.plan(chain, probe.min_feasible_bytes);
    EXPECT_TRUE(at.feasible) << strategy_name(s);
    EXPECT_LE(at.peak_bytes, probe.min_feasible_bytes) << strategy_name(s);
  }
}

// No plan fits below 0 bytes: a negative budget is one that is too small, down to INT64_MIN, from
// which subtracting the chain's fixed bytes would overflow.
TEST(Planner, ANegativeBudgetIsTooSmall) {
  const Chain chain = sample_chain();
  ASSERT_GT(chain.fixed_bytes, 0);
  for (Strategy s : all_strategies()) {
    const Planner planner(s);
    const std::int64_t least = planner.try_plan(chain, chain.fixed_bytes).min_feasible_bytes;
    for (std::int64_t budget : {std::int64_t{-1}, std::numeric_limits<std::int64_t>::min()}) {
      const PlanResult r = planner.try_plan(chain, budget);
      EXPECT_FALSE(r.feasible) << strategy_name(s);
      EXPECT_EQ(r.budget_bytes, budget) << strategy_name(s);
      EXPECT_EQ(r.min_feasible_bytes, least) << strategy_name(s);
      try {
        planner.plan(chain, budget);
        FAIL() << "no error for " << strategy_name(s);
      } catch (const InfeasibleBudgetError& e) {
        EXPECT_EQ(e.budget_bytes, budget);
        EXPECT_EQ(e.min_feasible_bytes, least);
      }
    }
  }
}

TEST(Planner, InfeasibleErrorIsAConfigError) {
  const Chain chain = sample_chain();
  EXPECT_THROW(Planner(Strategy::kDp).plan(chain, 1), ConfigError);
}

TEST(Planner, RejectsABadChain) {
  Chain chain = sample_chain();
  chain.stages[3].variants[0].saved_bytes = -1;
  try {
    Planner().try_plan(chain, 1 << 20);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stages[3]"), std::string::npos) << what;
    EXPECT_NE(what.find("saved_bytes"), std::string::npos) << what;
  }
}

// Numbers at the largest a chain may hold still plan, and the least budget that fits is found.
TEST(Planner, ChainsOfTheLargestNumbersPlan) {
  Chain chain = sample_chain();
  chain.fixed_bytes = kMaxChainBytes;
  for (Stage& stage : chain.stages) {
    stage.grad_bytes = kMaxChainBytes;
    for (VariantCosts& v : stage.variants) {
      v.out_bytes = v.saved_bytes = v.fwd_peak = v.bwd_peak = kMaxChainBytes;
    }
  }
  for (Strategy s : all_strategies()) {
    const Planner planner(s);
    const PlanResult probe = planner.try_plan(chain, chain.fixed_bytes);
    ASSERT_FALSE(probe.feasible) << strategy_name(s);
    EXPECT_GT(probe.min_feasible_bytes, 2 * kMaxChainBytes) << strategy_name(s);
    EXPECT_TRUE(planner.try_plan(chain, probe.min_feasible_bytes).feasible) << strategy_name(s);
  }
}

}  // namespace
}  // namespace monet
