// monet-bench's cell as its JSON writes it.
#include <gtest/gtest.h>

#include "bench/cell.h"

namespace monet::bench {
namespace {

// A monet cell at one budget whose runs ran 2 s of plans for 1 s of keeping every stage, against
// a baseline of 4 s.
Cell ran_cell() {
  Cell c;
  c.model = "resnet";
  c.strategy = "monet";
  c.budget_percent = 33;
  c.budget_bytes = 1 << 20;
  c.planned_seconds = 2.0;
  c.unconstrained_seconds = 1.0;
  c.seconds = 6.0;
  c.baseline_seconds = 4.0;
  c.overhead = 0.5;
  return c;
}

TEST(BenchCell, AFeasibleCellHasItsPlannedOverheadAndStageShare) {
  const nlohmann::ordered_json j = to_json(ran_cell());
  EXPECT_DOUBLE_EQ(j["planned_overhead"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["stage_share"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["overhead"].get<double>(), 0.5);
}

// A cell that ran in earlier rounds and then found no plan that fits: its budget has no figure,
// as the table and the charts show it, though the seconds of the rounds that ran stand.
TEST(BenchCell, ACellNoPlanFittedInALaterRoundHasNoOverheadOfAnyKind) {
  Cell c = ran_cell();
  c.feasible = false;
  c.overhead = std::nan("");
  c.least_budget_bytes = 2 << 20;
  c.error = "no plan fits";
  const nlohmann::ordered_json j = to_json(c);
  EXPECT_FALSE(j["feasible"].get<bool>());
  EXPECT_TRUE(j["overhead"].is_null());
  EXPECT_TRUE(j["planned_overhead"].is_null());
  EXPECT_TRUE(j["stage_share"].is_null());
  EXPECT_EQ(j["least_budget_bytes"].get<std::int64_t>(), 2 << 20);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 6.0);
}

TEST(BenchCell, TheBaselineHasNoBudgetNoMarginAndNoAllocatorWork) {
  Cell c;
  c.strategy = "none";
  const nlohmann::ordered_json j = to_json(c);
  EXPECT_DOUBLE_EQ(j["planned_overhead"].get<double>(), 0.0);
  EXPECT_TRUE(j["margin"].is_null());
  EXPECT_TRUE(j["allocator"].is_null());
  EXPECT_TRUE(j["peak_over_budget"].is_null());
}

}  // namespace
}  // namespace monet::bench
