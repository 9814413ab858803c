// The state saves to JSON and loads back into a predictor that predicts the same; malformed
// states are refused with a ConfigError.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "monet/errors.h"
#include "predictor/predictor.h"
#include "synthetic_models.h"

namespace monet {
namespace {

Predictor trained() {
  PredictorOptions options;
  options.dim_names = {"batch", "seq"};
  Predictor p = Predictor::for_chain(testing::synthetic_transformer({8, 64}, 2), options);
  for (Shape s : {Shape{32, 512}, Shape{4, 32}, Shape{24, 64}}) {
    p.observe(s, testing::synthetic_transformer(s, 2));
    p.observe(s, testing::synthetic_transformer(s, 2));
  }
  p.set_fixed_bytes(12345);
  return p;
}

void expect_same(const Chain& a, const Chain& b) {
  ASSERT_EQ(a.stages.size(), b.stages.size());
  EXPECT_EQ(a.fixed_bytes, b.fixed_bytes);
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    EXPECT_EQ(a.stages[i].name, b.stages[i].name);
    const VariantCosts& x = a.stages[i].variants[0];
    const VariantCosts& y = b.stages[i].variants[0];
    EXPECT_EQ(x.out_bytes, y.out_bytes);
    EXPECT_EQ(x.saved_bytes, y.saved_bytes);
    EXPECT_EQ(x.fwd_peak, y.fwd_peak);
    EXPECT_EQ(x.bwd_peak, y.bwd_peak);
    EXPECT_DOUBLE_EQ(x.fwd_time, y.fwd_time);
    EXPECT_DOUBLE_EQ(x.bwd_time, y.bwd_time);
  }
}

TEST(PredictorJson, RoundTripPredictsTheSame) {
  const Predictor p = trained();
  const Predictor q = Predictor::from_json(p.to_json());
  EXPECT_EQ(q.profiled_shapes(), 3);
  EXPECT_EQ(q.num_dims(), 2);
  for (Shape s : {Shape{32, 512}, Shape{16, 100}, Shape{6, 48}}) {
    expect_same(p.predict(s), q.predict(s));
    EXPECT_EQ(p.confidence(s).confident, q.confidence(s).confident);
  }
  EXPECT_EQ(p.describe_law(0, 0, Quantity::kSavedBytes),
            q.describe_law(0, 0, Quantity::kSavedBytes));
}

TEST(PredictorJson, SaveAndLoadAFile) {
  const Predictor p = trained();
  const std::string path = ::testing::TempDir() + "/predictor_state.json";
  p.save(path);
  const Predictor q = Predictor::load(path);
  expect_same(p.predict({12, 200}), q.predict({12, 200}));
  q.check_layout(p.layout());
  std::remove(path.c_str());
}

TEST(PredictorJson, StateHoldsStatisticsAndReadableLaws) {
  const nlohmann::json j = trained().to_json();
  EXPECT_EQ(j.at("format"), "monet-predictor-state");
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("shapes").size(), 3u);
  const nlohmann::json& v = j.at("stages").at(0).at("variants").at(0);
  EXPECT_EQ(v.at("measurements").at(0).at("count"), 2);
  EXPECT_TRUE(v.at("measurements").at(0).at("out_bytes").contains("mean"));
  EXPECT_NE(v.at("laws").at("fwd_peak").at("law").get<std::string>().find("batch*seq^2"),
            std::string::npos);
}

TEST(PredictorJson, EmptyPredictorRoundTrips) {
  Predictor p(std::vector<StageLayout>{{"a"}, {"b", {"default", "inplace"}}});
  const Predictor q = Predictor::from_json(p.to_json());
  EXPECT_EQ(q.num_stages(), 2);
  EXPECT_EQ(q.profiled_shapes(), 0);
}

TEST(PredictorJson, MalformedStatesAreConfigErrors) {
  nlohmann::json j = trained().to_json();
  EXPECT_THROW(Predictor::from_json(nlohmann::json::object()), ConfigError);
  nlohmann::json bad = j;
  bad["version"] = 99;
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
  bad = j;
  bad["shapes"][0] = {1, 2, 3};
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
  bad = j;
  bad["stages"][0]["variants"][0]["measurements"][0]["shape"] = 7;
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
  bad = j;
  bad["stages"][0]["variants"][0]["measurements"][0]["out_bytes"]["mean"] = -1.0;
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
  bad = j;
  bad["stages"][0].erase("variants");
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
}

TEST(PredictorJson, MissingOrBrokenFileIsAConfigError) {
  EXPECT_THROW(Predictor::load("/nonexistent/monet/state.json"), ConfigError);
  const std::string path = ::testing::TempDir() + "/broken_state.json";
  std::ofstream(path) << "{ not json";
  try {
    Predictor::load(path);
    ADD_FAILURE() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(PredictorJson, LayoutOfAnotherModelIsAConfigError) {
  const Predictor p = trained();
  std::vector<StageLayout> other = p.layout();
  other[1].name = "something_else";
  EXPECT_THROW(p.check_layout(other), ConfigError);
  other.pop_back();
  EXPECT_THROW(p.check_layout(other), ConfigError);
}

}  // namespace
}  // namespace monet
