#include "planner/plan_cache.h"

#include <gtest/gtest.h>

namespace monet {
namespace {

PlanResult plan_with_peak(std::int64_t peak) {
  PlanResult r;
  r.peak_bytes = peak;
  r.feasible = true;
  return r;
}

TEST(PlanCache, HitAndMiss) {
  PlanCache cache;
  const ShapeKey key({32, 128});
  EXPECT_EQ(cache.find(key), nullptr);
  cache.insert(key, plan_with_peak(1000));
  const PlanResult* hit = cache.find(ShapeKey({32, 127}));  // the same bucket
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->peak_bytes, 1000);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(PlanCache, InsertReplaces) {
  PlanCache cache;
  const ShapeKey key({8});
  cache.insert(key, plan_with_peak(1));
  cache.insert(key, plan_with_peak(2));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.find(key)->peak_bytes, 2);
}

TEST(PlanCache, EvictsTheLeastRecentlyUsed) {
  PlanCache::Options options;
  options.capacity = 2;
  PlanCache cache(options);
  const ShapeKey a({1}), b({2}), c({3});
  cache.insert(a, plan_with_peak(1));
  cache.insert(b, plan_with_peak(2));
  ASSERT_NE(cache.find(a), nullptr);  // a is now more recent than b
  cache.insert(c, plan_with_peak(3));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.find(a), nullptr);
  EXPECT_EQ(cache.find(b), nullptr);
  EXPECT_NE(cache.find(c), nullptr);
  EXPECT_EQ(cache.stats().evictions, 1u);
}

TEST(PlanCache, MeasuredPeakOffTheSimulatedOneDropsThePlan) {
  PlanCache cache;  // 5% either way
  const ShapeKey key({64});
  cache.insert(key, plan_with_peak(1000));
  EXPECT_FALSE(cache.report_measured_peak(key, 1050));
  EXPECT_FALSE(cache.report_measured_peak(key, 950));
  EXPECT_NE(cache.find(key), nullptr);
  EXPECT_TRUE(cache.report_measured_peak(key, 1051));  // above: the plan is not safe
  EXPECT_EQ(cache.find(key), nullptr);
  cache.insert(key, plan_with_peak(1000));
  EXPECT_TRUE(cache.report_measured_peak(key, 900));  // below: it recomputes more than needed
  EXPECT_EQ(cache.stats().invalidations, 2u);
  EXPECT_FALSE(cache.report_measured_peak(key, 5));  // nothing cached for it any more
}

TEST(PlanCache, EraseAndClear) {
  PlanCache cache;
  cache.insert(ShapeKey({1}), plan_with_peak(1));
  cache.insert(ShapeKey({2}), plan_with_peak(2));
  EXPECT_TRUE(cache.erase(ShapeKey({1})));
  EXPECT_FALSE(cache.erase(ShapeKey({1})));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.find(ShapeKey({2})), nullptr);
}

TEST(PlanCache, RejectsBadOptions) {
  PlanCache::Options zero;
  zero.capacity = 0;
  EXPECT_THROW(PlanCache{zero}, ConfigError);
  PlanCache::Options negative;
  negative.peak_tolerance = -0.1;
  EXPECT_THROW(PlanCache{negative}, ConfigError);
}

}  // namespace
}  // namespace monet
