#include "runtime/retry_margins.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "monet/errors.h"

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

std::string temp_file(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::filesystem::remove(path);
  return path;
}

TEST(RetryMargins, ARestartedJobStartsFromWhatRetriesAdded) {
  const std::string path = temp_file("monet_retry_margins_saved.json");
  RetryMargins first(options());
  first.ran_out_of_memory(kLong, 900 * kMiB);
  first.ran_out_of_memory(kLong, 800 * kMiB);
  first.save(path);
  ASSERT_FALSE(std::filesystem::exists(path + ".tmp"));

  RetryMargins restarted(options());
  ASSERT_TRUE(restarted.load(path));
  EXPECT_DOUBLE_EQ(restarted.share(kLong), first.share(kLong));
  EXPECT_DOUBLE_EQ(restarted.share(kShort), first.share(kShort));
  EXPECT_DOUBLE_EQ(restarted.share(kShort, /*learned=*/false), 0.10);
  EXPECT_DOUBLE_EQ(restarted.learned_extra(), first.learned_extra());
  EXPECT_DOUBLE_EQ(restarted.new_shape_share(), 0.30);
  // It comes down as the first would have: after relax_steps steps from the restart.
  EXPECT_FALSE(restarted.step_ran());
  EXPECT_FALSE(restarted.step_ran());
  EXPECT_TRUE(restarted.step_ran());
}

TEST(RetryMargins, SharesOfAnotherBudgetOrMarginAreNotTaken) {
  const std::string path = temp_file("monet_retry_margins_other_budget.json");
  RetryMargins first(options(1000 * kMiB));
  first.ran_out_of_memory(kLong, 900 * kMiB);
  first.save(path);
  RetryMargins other_budget(options(2000 * kMiB));
  EXPECT_FALSE(other_budget.load(path));
  EXPECT_DOUBLE_EQ(other_budget.share(kLong), 0.10);
  RetryMargins::Options wider = options(1000 * kMiB);
  wider.margin = 0.15;
  RetryMargins other_margin(wider);
  EXPECT_FALSE(other_margin.load(path));
  EXPECT_DOUBLE_EQ(other_margin.share(kLong), 0.15);
  RetryMargins none(options());
  EXPECT_FALSE(none.load(temp_file("monet_retry_margins_missing.json")));
}

TEST(RetryMargins, AMalformedFileIsNamedWithWhatToDo) {
  const std::string path = temp_file("monet_retry_margins_malformed.json");
  const auto refused = [&](const std::string& text, const std::string& what) {
    std::ofstream(path) << text;
    RetryMargins m(options());
    try {
      m.load(path);
      ADD_FAILURE() << "loaded: " << text;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(path)) << text;
      EXPECT_THAT(e.what(), ::testing::HasSubstr(what)) << text;
      EXPECT_THAT(e.what(), ::testing::HasSubstr("delete the file")) << text;
    }
    EXPECT_DOUBLE_EQ(m.share(kLong), 0.10) << "nothing taken from " << text;
  };
  const std::string head =
      R"({"format": "monet-retry-margins", "version": 1, "budget_bytes": 1048576000, )"
      R"("margin": 0.1, )";
  refused("{", "not valid JSON");
  refused(R"({"format": "monet-predictor-state", "version": 1})", "format");
  refused(R"({"format": "monet-retry-margins", "version": 2})", "version 2");
  refused(R"({"format": 7, "version": 1})", "format");
  refused(R"([1, 2])", "format");
  refused(R"({"format": "monet-retry-margins", "version": "one"})", R"(version "one")");
  refused(R"({"format": "monet-retry-margins", "version": 1e300})", "version 1e+300");
  refused(R"({"format": "monet-retry-margins"})", "version (none)");
  refused(head + R"("shapes": []})", "needs budget_bytes, margin, learned_extra and shapes");
  refused(head + R"("learned_extra": -0.1, "shapes": []})", "learned_extra is -0.1");
  refused(head + R"("learned_extra": 0.1, "shapes": [{"dims": [8, 0], "extra": 0.1}]})",
          "not a positive integer");
  refused(head + R"("learned_extra": 0.1, "shapes": [{"dims": [8, 32], "extra": 2}]})",
          "a shape's extra is 2");
  refused(head + R"("learned_extra": 0.1, "shapes": [{"extra": 0.1}]})", "needs dims and extra");
}

TEST(RetryMargins, AFolderThatCannotBeWrittenIsNamed) {
  RetryMargins m(options());
  const std::string path = ::testing::TempDir() + "/no_such_folder_for_monet/margins.json";
  try {
    m.save(path);
    FAIL() << "saved into a folder that does not exist";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("no_such_folder_for_monet"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("writable"));
  }
}

}  // namespace
}  // namespace monet
