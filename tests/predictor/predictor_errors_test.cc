// Bad input is refused with a message that says what was wrong and what to do.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "monet/errors.h"
#include "predictor/predictor.h"

namespace monet {
namespace {

Predictor two_stages() {
  PredictorOptions options;
  options.dim_names = {"batch", "seq"};
  return Predictor({{"embed", {"default"}}, {"block", {"default", "relu_mask"}}}, options);
}

VariantCosts costs(std::int64_t bytes, double seconds) {
  VariantCosts v;
  v.out_bytes = v.saved_bytes = v.fwd_peak = v.bwd_peak = bytes;
  v.fwd_time = v.bwd_time = seconds;
  return v;
}

// Runs `f`, expects E, and returns its message.
template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

TEST(PredictorErrors, NegativeMeasurementIsRefused) {
  Predictor p = two_stages();
  VariantCosts v = costs(1024, 1e-3);
  v.saved_bytes = -5;
  const std::string m = message_of<std::invalid_argument>([&] { p.observe({8, 64}, 1, 0, v); });
  EXPECT_NE(m.find("saved_bytes = -5"), std::string::npos) << m;
  EXPECT_NE(m.find("'block'"), std::string::npos) << m;
  EXPECT_NE(m.find(">= 0"), std::string::npos) << m;
  EXPECT_EQ(p.profiled_shapes(), 0);  // nothing was folded in
}

TEST(PredictorErrors, NanMeasurementIsRefused) {
  Predictor p = two_stages();
  VariantCosts v = costs(1024, std::nan(""));
  const std::string m = message_of<std::invalid_argument>([&] { p.observe({8, 64}, 0, 0, v); });
  EXPECT_NE(m.find("fwd_time = nan"), std::string::npos) << m;
  EXPECT_NE(m.find("finite"), std::string::npos) << m;
}

TEST(PredictorErrors, InfiniteTimeIsRefused) {
  Predictor p = two_stages();
  VariantCosts v = costs(1024, 1e-3);
  v.bwd_time = std::numeric_limits<double>::infinity();
  EXPECT_THROW(p.observe({8, 64}, 0, 0, v), std::invalid_argument);
}

// Stage and variant names the planner would refuse in the predicted chain are refused at once.
TEST(PredictorErrors, EmptyOrRepeatedNamesAreRefused) {
  const auto message = [](std::vector<StageLayout> layout) {
    return message_of<std::invalid_argument>([&] { Predictor p(std::move(layout)); });
  };
  EXPECT_NE(message({{"a"}, {"a"}}).find("stage 1 repeats the name 'a'"), std::string::npos);
  EXPECT_NE(message({{"a"}, {""}}).find("stage 1 has no name"), std::string::npos);
  EXPECT_NE(message({{"a", {"default", ""}}}).find("has a variant without a name"),
            std::string::npos);
}

// A time the planners could not sum (about 32 years and more) is no measurement either: its
// running squares would overflow, and the state saved with them would not load again.
TEST(PredictorErrors, ATimeNoStageTakesIsRefused) {
  Predictor p = two_stages();
  VariantCosts v = costs(1024, 1e-3);
  v.fwd_time = 1e160;
  const std::string m = message_of<std::invalid_argument>([&] { p.observe({8, 64}, 0, 0, v); });
  EXPECT_NE(m.find("fwd_time = 1e+160 s is more than a stage can take"), std::string::npos) << m;
  v.fwd_time = kMaxChainSeconds;
  EXPECT_NO_THROW(p.observe({8, 64}, 0, 0, v));
}

TEST(PredictorErrors, ShapeWithOtherNumberOfDimsIsRefused) {
  Predictor p = two_stages();
  p.observe({8, 64}, 0, 0, costs(1024, 1e-3));
  const std::string m = message_of<std::invalid_argument>([&] {
    p.observe({8, 64, 64}, 0, 0, costs(1, 1e-3));
  });
  EXPECT_NE(m.find("[8, 64, 64] has 3 dims"), std::string::npos) << m;
  EXPECT_NE(m.find("have 2 (batch x seq)"), std::string::npos) << m;
  EXPECT_THROW(p.predict({8}), std::invalid_argument);
  EXPECT_THROW(p.confidence({8, 1, 1}), std::invalid_argument);
}

TEST(PredictorErrors, StageIndexOutOfRangeIsRefused) {
  Predictor p = two_stages();
  const std::string m = message_of<std::invalid_argument>([&] {
    p.observe({8, 64}, 2, 0, costs(1, 1e-3));
  });
  EXPECT_NE(m.find("stage index 2 is out of range"), std::string::npos) << m;
  EXPECT_NE(m.find("2 stages (0 to 1)"), std::string::npos) << m;
  EXPECT_THROW(p.observe({8, 64}, -1, 0, costs(1, 1e-3)), std::invalid_argument);
}

TEST(PredictorErrors, VariantIndexOutOfRangeIsRefused) {
  Predictor p = two_stages();
  const std::string m = message_of<std::invalid_argument>([&] {
    p.observe({8, 64}, 0, 1, costs(1, 1e-3));
  });
  EXPECT_NE(m.find("variant index 1 of stage 'embed'"), std::string::npos) << m;
}

TEST(PredictorErrors, NonPositiveDimIsRefused) {
  Predictor p = two_stages();
  const std::string m = message_of<std::invalid_argument>([&] {
    p.observe({8, 0}, 0, 0, costs(1, 1e-3));
  });
  EXPECT_NE(m.find("seq = 0"), std::string::npos) << m;
}

TEST(PredictorErrors, TooManyDimsAreRefused) {
  Predictor p = two_stages();
  EXPECT_THROW(p.observe({1, 2, 3, 4, 5}, 0, 0, costs(1, 1e-3)), std::invalid_argument);
}

TEST(PredictorErrors, ChainWithUnknownVariantChangesNothing) {
  Predictor p = two_stages();
  Chain c;
  c.stages = {Stage{"embed", {costs(1024, 1e-3)}}, Stage{"block", {costs(1024, 1e-3)}}};
  c.stages[1].variants[0].name = "fused";
  const std::string m = message_of<std::invalid_argument>([&] { p.observe({8, 64}, c); });
  EXPECT_NE(m.find("no variant 'fused'"), std::string::npos) << m;
  EXPECT_EQ(p.profiled_shapes(), 0);
  c.stages.pop_back();
  EXPECT_THROW(p.observe({8, 64}, c), std::invalid_argument);
}

// Stages are matched by position and name: another model's chain of as many stages would be
// learnt as this one's.
TEST(PredictorErrors, ChainWithOtherStagesChangesNothing) {
  Predictor p = two_stages();
  Chain c;
  c.stages = {Stage{"conv1", {costs(1024, 1e-3)}}, Stage{"conv2", {costs(1024, 1e-3)}}};
  const std::string m = message_of<std::invalid_argument>([&] { p.observe({8, 64}, c); });
  EXPECT_NE(m.find("stage 0 of the measured chain is 'conv1' but the layout's stage 0 is 'embed'; "
                   "measure the stages of the chain the predictor was made for, in its order"),
            std::string::npos)
      << m;
  EXPECT_EQ(p.profiled_shapes(), 0);
  c.stages[0].name = "embed";
  EXPECT_THROW(p.observe({8, 64}, c), std::invalid_argument);  // the second stage still differs
  EXPECT_EQ(p.profiled_shapes(), 0);
}

// One measurement of a variant per step: listed twice, it would count twice.
TEST(PredictorErrors, ChainListingAVariantTwiceChangesNothing) {
  Predictor p = two_stages();
  Chain c;
  c.stages = {Stage{"embed", {costs(1024, 1e-3)}},
              Stage{"block", {costs(1024, 1e-3), costs(2048, 1e-3)}}};
  const std::string m = message_of<std::invalid_argument>([&] { p.observe({8, 64}, c); });
  EXPECT_NE(m.find("stage 'block' (index 1) of the measured chain lists variant 'default' twice; "
                   "give each variant's measurement once"),
            std::string::npos)
      << m;
  EXPECT_EQ(p.profiled_shapes(), 0);
  c.stages[1].variants[1].name = "relu_mask";
  p.observe({8, 64}, c);
  EXPECT_EQ(p.profiled_shapes(), 1);
}

// A chain that lists no variant in any stage measures nothing: its shape must not count as
// profiled (it would widen the profiled range and never be asked for again).
TEST(PredictorErrors, ChainMeasuringNothingChangesNothing) {
  Predictor p = two_stages();
  Chain c;
  c.stages = {Stage{"embed", {}}, Stage{"block", {}}};
  const std::string m = message_of<std::invalid_argument>([&] { p.observe({8, 64}, c); });
  EXPECT_NE(m.find("the measured chain at shape [8, 64] has no variant in any stage"),
            std::string::npos)
      << m;
  EXPECT_EQ(p.profiled_shapes(), 0);
  EXPECT_FALSE(p.is_profiled({8, 64}));
  c.stages[1].variants = {costs(1024, 1e-3)};  // one stage measured is a measurement
  p.observe({8, 64}, c);
  EXPECT_EQ(p.profiled_shapes(), 1);
}

TEST(PredictorErrors, BadLayoutAndOptionsAreRefused) {
  using Layout = std::vector<StageLayout>;
  EXPECT_THROW(Predictor(Layout{}), std::invalid_argument);
  EXPECT_THROW(Predictor(Layout{StageLayout{"a", {}}}), std::invalid_argument);
  EXPECT_THROW(Predictor(Layout{StageLayout{"a", {"x", "x"}}}), std::invalid_argument);
  PredictorOptions o;
  o.max_terms = 9;
  EXPECT_THROW(Predictor(Layout{StageLayout{"a"}}, o), ConfigError);
  o = {};
  o.bytes_tolerance = std::nan("");
  EXPECT_THROW(Predictor(Layout{StageLayout{"a"}}, o), ConfigError);
  o = {};
  o.extrapolation_limit = 0.5;
  EXPECT_THROW(Predictor(Layout{StageLayout{"a"}}, o), ConfigError);
  o = {};
  o.time_share_slack = -0.01;
  EXPECT_THROW(Predictor(Layout{StageLayout{"a"}}, o), ConfigError);
}

TEST(PredictorErrors, NegativeFixedBytesAreRefused) {
  Predictor p = two_stages();
  EXPECT_THROW(p.set_fixed_bytes(-1), std::invalid_argument);
}

}  // namespace
}  // namespace monet
