#include "planner/chain_model.h"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "model_chains.h"

namespace monet {
namespace {

Chain two_stages() {
  Chain chain;
  chain.fixed_bytes = 10;
  VariantCosts a;
  a.out_bytes = 4;
  a.saved_bytes = 6;
  VariantCosts b = a;
  b.out_bytes = 8;
  b.saved_bytes = 3;
  VariantCosts lean = b;
  lean.name = "lean";
  lean.saved_bytes = 1;
  chain.stages = {Stage{"a", {a}}, Stage{"b", {b, lean}}};
  return chain;
}

std::string error_of(const Chain& chain) {
  try {
    validate_chain(chain, "c.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ValidateChain, AcceptsAGoodChain) { EXPECT_EQ(error_of(two_stages()), ""); }

TEST(ValidateChain, NamesStageVariantAndField) {
  Chain chain = two_stages();
  chain.stages[1].variants[1].bwd_peak = -3;
  EXPECT_EQ(error_of(chain),
            "c.json: stages[1] \"b\": variants[1] \"lean\": \"bwd_peak\" must be a non-negative "
            "number of bytes, got -3");
  chain = two_stages();
  chain.stages[0].variants[0].fwd_time = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(error_of(chain).find("\"fwd_time\" must be a non-negative, finite number of seconds"),
            std::string::npos);
}

TEST(ValidateChain, RejectsEmptyAndRepeatedThings) {
  Chain chain = two_stages();
  chain.stages.clear();
  EXPECT_NE(error_of(chain).find("\"stages\" is empty"), std::string::npos);
  chain = two_stages();
  chain.stages[1].variants.clear();
  EXPECT_NE(error_of(chain).find("stages[1] \"b\": \"variants\" is empty"), std::string::npos);
  chain = two_stages();
  chain.stages[1].name = "a";
  EXPECT_NE(error_of(chain).find("repeats an earlier stage's name"), std::string::npos);
  chain = two_stages();
  chain.stages[1].variants[1].name = "default";
  EXPECT_NE(error_of(chain).find("repeats an earlier variant's name"), std::string::npos);
  chain = two_stages();
  chain.fixed_bytes = -1;
  EXPECT_NE(error_of(chain).find("fixed_bytes"), std::string::npos);
  chain = two_stages();
  chain.stages[1].grad_bytes = -8;
  EXPECT_NE(error_of(chain).find("stages[1] \"b\": \"grad_bytes\" must be a non-negative number "
                                 "of bytes, got -8"),
            std::string::npos);
}

TEST(ValidateChain, RefusesByteCountsAbovePebibyte) {
  Chain chain = two_stages();
  chain.stages[1].variants[0].saved_bytes = kMaxChainBytes;
  chain.fixed_bytes = kMaxChainBytes;
  chain.stages[0].grad_bytes = kMaxChainBytes;
  EXPECT_EQ(error_of(chain), "");
  chain.stages[1].variants[1].out_bytes = kMaxChainBytes + 1;
  EXPECT_EQ(error_of(chain),
            "c.json: stages[1] \"b\": variants[1] \"lean\": \"out_bytes\" is 1125899906842625 "
            "bytes, more than the 1 PiB (2^50 bytes) a chain's numbers may be");
  chain = two_stages();
  chain.fixed_bytes = kMaxChainBytes + 1;
  EXPECT_NE(error_of(chain).find("c.json: \"fixed_bytes\" is 1125899906842625 bytes"),
            std::string::npos);
  chain = two_stages();
  chain.stages[0].grad_bytes = kMaxChainBytes + 1;
  EXPECT_NE(error_of(chain).find("stages[0] \"a\": \"grad_bytes\" is 1125899906842625 bytes"),
            std::string::npos);
}

// Each number within 1 PiB, but 2,047 stages of them: the least-peak search's sums reached its
// mark of what no plan reaches, no boundary found a way to the end, and planning never ended.
TEST(ValidateChain, RefusesBytesThatSumPastWhatThePlannersCount) {
  Chain chain = testing::chain_summing_past_the_limit();
  // 3 PiB a stage: the 86th passes 256 PiB.
  EXPECT_EQ(error_of(chain),
            "c.json: stages[85] \"s85\": the chain's bytes pass 256 PiB (2^58 bytes) in all by "
            "this stage (fixed_bytes, and each stage's grad_bytes and largest out_bytes, "
            "saved_bytes, fwd_peak and bwd_peak); no device holds that, and the planners cannot "
            "sum it: give the numbers in bytes");
  // Exactly 256 PiB is allowed; one byte more is not. Only a stage's largest variant counts.
  chain.stages.resize(64);
  for (Stage& stage : chain.stages) {
    stage.grad_bytes = 0;
    VariantCosts& v = stage.variants[0];
    v.fwd_peak = v.bwd_peak = kMaxChainBytes;
    VariantCosts lean = v;
    lean.name = "lean";
    lean.saved_bytes = 0;
    stage.variants.push_back(lean);
  }
  EXPECT_EQ(error_of(chain), "");
  EXPECT_EQ(kMaxChainTotalBytes, 64 * 4 * kMaxChainBytes);
  chain.fixed_bytes = 1;
  EXPECT_NE(error_of(chain).find("stages[63] \"s63\": the chain's bytes pass 256 PiB"),
            std::string::npos);
}

TEST(ValidateChain, RefusesTimesAboveAThousandMillionSeconds) {
  Chain chain = two_stages();
  chain.stages[1].variants[1].bwd_time = kMaxChainSeconds;
  EXPECT_EQ(error_of(chain), "");
  chain.stages[1].variants[1].bwd_time = std::numeric_limits<double>::max();
  EXPECT_EQ(error_of(chain),
            "c.json: stages[1] \"b\": variants[1] \"lean\": \"bwd_time\" is "
            "1.7976931348623157e+308 seconds, more than the 1e9 seconds (about 32 years) a chain's "
            "times may be");
}

TEST(ValidateChain, VariantsMayDisagreeOnOutputSize) {
  Chain chain = two_stages();
  chain.stages[1].variants[1].out_bytes = 9;
  EXPECT_EQ(error_of(chain), "");
}

TEST(Plans, NoVariantIsTakenFasterThanTheFirst) {
  Chain chain = two_stages();
  chain.stages[1].variants[0].fwd_time = 2.0;
  chain.stages[1].variants[0].bwd_time = 3.0;
  chain.stages[1].variants[1].fwd_time = 1.5;  // timed faster than the default: noise
  chain.stages[1].variants[1].bwd_time = 4.0;  // slower: kept
  no_variant_faster_than_the_first(&chain);
  EXPECT_EQ(chain.stages[1].variants[1].fwd_time, 2.0);
  EXPECT_EQ(chain.stages[1].variants[1].bwd_time, 4.0);
  EXPECT_EQ(chain.stages[1].variants[0].fwd_time, 2.0);
  EXPECT_EQ(chain.stages[0].variants.size(), 1u);
}

TEST(Plans, UniformAndRetained) {
  const Chain chain = two_stages();
  Plan keep = uniform_plan(chain, false);
  ASSERT_EQ(keep.stages.size(), 2u);
  EXPECT_EQ(retained_bytes(chain, keep, 0), 0 + 6);  // no input counted, its saved bytes
  EXPECT_EQ(retained_bytes(chain, keep, 1), 4 + 3);
  Plan all = uniform_plan(chain, true);
  EXPECT_EQ(retained_bytes(chain, all, 0), 0);  // starts the segment: keeps the input only
  EXPECT_EQ(retained_bytes(chain, all, 1), 0);  // inside the segment: nothing
  Plan mixed = keep;
  mixed.stages[1] = StagePlan{true, 1};
  EXPECT_EQ(retained_bytes(chain, mixed, 1), 4);
  EXPECT_EQ(checkpointed_stages(mixed), 1);
  EXPECT_EQ(non_default_variants(mixed), 1);
}

TEST(Plans, ShapeIsChecked) {
  const Chain chain = two_stages();
  Plan plan = uniform_plan(chain, false);
  EXPECT_NO_THROW(check_plan_shape(chain, plan));
  plan.stages[0].variant = 1;
  EXPECT_THROW(check_plan_shape(chain, plan), std::invalid_argument);
  plan.stages.pop_back();
  EXPECT_THROW(check_plan_shape(chain, plan), std::invalid_argument);
}

}  // namespace
}  // namespace monet
