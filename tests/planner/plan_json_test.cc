#include "planner/plan_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace monet {
namespace {

Chain chain_of_two() {
  Chain chain;
  VariantCosts lean;
  lean.name = "lean";
  chain.stages = {Stage{"a", {VariantCosts{}}}, Stage{"b", {VariantCosts{}, lean}}};
  return chain;
}

PlanResult sample_result() {
  PlanResult r;
  r.strategy = Strategy::kGreedy;
  r.budget_bytes = 1000;
  r.feasible = true;
  r.min_feasible_bytes = 900;
  r.peak_bytes = 950;
  r.time = 0.25;
  r.plan_us = 12.5;
  r.plan.stages = {StagePlan{false, 0}, StagePlan{true, 1}};
  return r;
}

TEST(PlanJson, TheFormatOfDesignMd) {
  const auto j = nlohmann::ordered_json::parse(plan_to_json(chain_of_two(), sample_result()));
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"strategy", "budget_bytes", "feasible", "min_feasible_bytes",
                                      "peak_bytes", "time", "plan_us", "stages"}));
  EXPECT_EQ(j["strategy"], "greedy");
  EXPECT_EQ(j["budget_bytes"], 1000);
  EXPECT_EQ(j["feasible"], true);
  EXPECT_EQ(j["min_feasible_bytes"], 900);
  EXPECT_EQ(j["peak_bytes"], 950);
  EXPECT_DOUBLE_EQ(j["time"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["plan_us"].get<double>(), 12.5);
  ASSERT_EQ(j["stages"].size(), 2u);
  EXPECT_EQ(j["stages"][1], nlohmann::ordered_json::parse(
                                R"({"name": "b", "checkpoint": true, "variant": "lean"})"));
}

TEST(PlanJson, MarksOnlyTheStagesThatSplitARunOfCheckpoints) {
  Chain chain = chain_of_two();
  chain.stages.push_back(chain.stages[1]);
  chain.stages.back().name = "c";
  PlanResult r = sample_result();
  r.plan.stages = {StagePlan{true, 0}, StagePlan{true, 1, true}, StagePlan{true, 0}};
  const auto j = nlohmann::ordered_json::parse(plan_to_json(chain, r));
  EXPECT_FALSE(j["stages"][0].contains("segment_start"));
  EXPECT_EQ(j["stages"][1], nlohmann::ordered_json::parse(
                                R"({"name": "b", "checkpoint": true, "segment_start": true,
                                    "variant": "lean"})"));
  EXPECT_FALSE(j["stages"][2].contains("segment_start"));
}

TEST(PlanJson, SeveralPlansAreAnArray) {
  const auto j =
      nlohmann::json::parse(plans_to_json(chain_of_two(), {sample_result(), sample_result()}));
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["stages"][0]["checkpoint"], false);
}

}  // namespace
}  // namespace monet
