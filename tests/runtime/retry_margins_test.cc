#include "runtime/retry_margins.h"

#include <gtest/gtest.h>

namespace monet {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

RetryMargins::Options options(std::int64_t budget = 1000 * kMiB, int relax_steps = 3) {
  RetryMargins::Options o;
  o.budget_bytes = budget;
  o.margin = 0.10;
  o.retry_step = 0.10;
  o.relax_steps = relax_steps;
  return o;
}

const ShapeKey kShort({8, 32});
const ShapeKey kLong({8, 512});

TEST(RetryMargins, PlansKeepTheMarginFreeBeforeAnyRetry) {
  const RetryMargins m(options());
  EXPECT_DOUBLE_EQ(m.share(kShort), 0.10);
  EXPECT_EQ(m.plan_budget(kShort), 900 * kMiB);
  EXPECT_EQ(m.unraised_plan_budget(), 900 * kMiB);
  EXPECT_DOUBLE_EQ(m.learned_extra(), 0.0);
}

TEST(RetryMargins, ASmallBudgetKeepsTwoMiBFree) {
  const RetryMargins m(options(10 * kMiB));
  // 10% of 10 MiB is 1 MiB, under the 2 MiB a reservation grows by.
  EXPECT_EQ(m.plan_budget(kShort), 8 * kMiB);
  EXPECT_EQ(m.budget_less(0.5), 5 * kMiB);
}

TEST(RetryMargins, ARetryRaisesItsShapeAndTheShapesPlannedAfterIt) {
  RetryMargins m(options());
  m.ran_out_of_memory(kLong, 900 * kMiB);  // its plan used all it was allowed
  EXPECT_DOUBLE_EQ(m.share(kLong), 0.20);
  EXPECT_EQ(m.plan_budget(kLong), 800 * kMiB);
  // Another shape starts from the learned share, unless asked for its own.
  EXPECT_DOUBLE_EQ(m.share(kShort), 0.20);
  EXPECT_DOUBLE_EQ(m.share(kShort, /*learned=*/false), 0.10);
  EXPECT_EQ(m.plan_budget(kShort, /*learned=*/false), 900 * kMiB);
  EXPECT_EQ(m.unraised_plan_budget(), 900 * kMiB);
}

TEST(RetryMargins, ARetryStartsFromWhatTheFailedPlanLeftFree) {
  RetryMargins m(options());
  // A plan made for 700 MiB left 30% free, 20 points above the margin: that was not enough.
  m.ran_out_of_memory(kLong, 700 * kMiB);
  EXPECT_NEAR(m.share(kLong), 0.40, 1e-12);
  EXPECT_NEAR(m.learned_extra(), 0.30, 1e-12);
  // Where the plan's budget is not known, one step above the shape's share.
  m.ran_out_of_memory(kShort, 0);
  EXPECT_NEAR(m.share(kShort, /*learned=*/false), 0.20, 1e-12);
}

TEST(RetryMargins, RetriesAddUpToNineTenthsAtMost) {
  RetryMargins m(options());
  for (int i = 0; i < 12; ++i) m.ran_out_of_memory(kLong, m.plan_budget(kLong));
  EXPECT_DOUBLE_EQ(m.share(kLong), RetryMargins::kMaxShare);
  EXPECT_EQ(m.plan_budget(kLong), 100 * kMiB);
}

TEST(RetryMargins, WhatRetriesAddedComesDownAfterStepsWithoutOne) {
  RetryMargins m(options(1000 * kMiB, /*relax_steps=*/3));
  m.ran_out_of_memory(kLong, 900 * kMiB);
  m.ran_out_of_memory(kLong, 800 * kMiB);  // twice: 30%
  EXPECT_NEAR(m.share(kLong), 0.30, 1e-12);
  EXPECT_FALSE(m.step_ran());
  EXPECT_FALSE(m.step_ran());
  EXPECT_TRUE(m.step_ran()) << "the third step in a row without a retry lowers the shares";
  EXPECT_NEAR(m.share(kLong), 0.20, 1e-12);
  EXPECT_NEAR(m.share(kShort), 0.20, 1e-12);
  // A retry starts the count again.
  EXPECT_FALSE(m.step_ran());
  m.ran_out_of_memory(kShort, 800 * kMiB);
  EXPECT_FALSE(m.step_ran());
  EXPECT_FALSE(m.step_ran());
  EXPECT_TRUE(m.step_ran());
  for (int i = 0; i < 6; ++i) m.step_ran();
  EXPECT_DOUBLE_EQ(m.share(kLong), 0.10);
  EXPECT_DOUBLE_EQ(m.share(kShort), 0.10);
  EXPECT_DOUBLE_EQ(m.learned_extra(), 0.0);
  // With nothing added, steps lower nothing.
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(m.step_ran());
}

TEST(RetryMargins, NoRelaxStepsKeepWhatRetriesAdded) {
  RetryMargins m(options(1000 * kMiB, /*relax_steps=*/0));
  m.ran_out_of_memory(kLong, 900 * kMiB);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(m.step_ran());
  EXPECT_DOUBLE_EQ(m.share(kLong), 0.20);
}

}  // namespace
}  // namespace monet
