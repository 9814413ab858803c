#include "planner/shape_key.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <unordered_set>

namespace monet {
namespace {

TEST(ShapeKey, SmallDimsAreExact) {
  for (std::int64_t d = 0; d <= 32; ++d) EXPECT_EQ(ShapeKey::bucket(d), d);
}

TEST(ShapeKey, LargeDimsRoundUpWithinOneSixteenth) {
  EXPECT_EQ(ShapeKey::bucket(33), 34);
  EXPECT_EQ(ShapeKey::bucket(100), 100);
  EXPECT_EQ(ShapeKey::bucket(101), 104);
  EXPECT_EQ(ShapeKey::bucket(129), 136);
  EXPECT_EQ(ShapeKey::bucket(512), 512);
  for (std::int64_t d = 1; d < 100000; d += 7) {
    const std::int64_t b = ShapeKey::bucket(d);
    ASSERT_GE(b, d);
    ASSERT_LE(static_cast<double>(b), static_cast<double>(d) * (1.0 + 1.0 / 16)) << d;
    ASSERT_EQ(ShapeKey::bucket(b), b) << "a bucket bound is its own bucket";
  }
}

TEST(ShapeKey, CoarserBuckets) {
  EXPECT_EQ(ShapeKey::bucket(9, 3), 10);
  EXPECT_EQ(ShapeKey::bucket(17, 3), 20);
  EXPECT_EQ(ShapeKey::bucket(17, 1), 32);
}

TEST(ShapeKey, EqualWithinABucket) {
  const ShapeKey a({32, 201}), b({32, 207}), c({32, 209}), d({16, 201});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_EQ(a.dims(), (std::vector<std::int64_t>{32, 208}));
  EXPECT_EQ(a.to_string(), "32x208");
  EXPECT_EQ(ShapeKey(std::vector<std::int64_t>{}).to_string(), "scalar");
  std::unordered_set<ShapeKey, ShapeKeyHash> seen = {a, b, c, d};
  EXPECT_EQ(seen.size(), 3u);
}

TEST(ShapeKey, RejectsBadInput) {
  EXPECT_THROW(ShapeKey({-1}), std::invalid_argument);
  EXPECT_THROW(ShapeKey::bucket(5, 0), std::invalid_argument);
  EXPECT_THROW(ShapeKey::bucket(5, 63), std::invalid_argument);
}

}  // namespace
}  // namespace monet
