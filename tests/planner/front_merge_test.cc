#include "planner/front_merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace monet {
namespace {

// A random front: P rising, time falling, each state's parent its own index.
std::vector<DpState> random_front(std::mt19937_64& rng, int size) {
  std::uniform_int_distribution<std::int64_t> step(0, 3);
  std::uniform_int_distribution<int> fall(1, 4);
  std::vector<DpState> front;
  std::int64_t retained = step(rng);
  double time = 1000.0;
  for (int k = 0; k < size; ++k) {
    front.push_back(DpState{retained, time, k, 0, 0, 0});
    retained += 1 + step(rng);
    time -= fall(rng);
  }
  return front;
}

// Every candidate that no other beats on both P and time (the first of equals), by brute force.
std::vector<DpState> pareto(const std::vector<DpState>& source, const std::vector<StateRun>& runs) {
  std::vector<DpState> all;
  for (const StateRun& run : runs) {
    for (std::int32_t k = run.begin; k < run.end; ++k) {
      all.push_back(DpState{source[k].retained + run.retained, source[k].time + run.time,
                            source[k].parent, run.from, run.choice, run.kind});
    }
  }
  std::vector<DpState> front;
  for (const DpState& s : all) {
    bool beaten = false;
    for (const DpState& t : all) {
      if (t.retained <= s.retained && t.time <= s.time &&
          (t.retained < s.retained || t.time < s.time)) {
        beaten = true;
      }
    }
    const bool repeat = std::any_of(front.begin(), front.end(), [&](const DpState& t) {
      return t.retained == s.retained && t.time == s.time;
    });
    if (!beaten && !repeat) front.push_back(s);
  }
  std::sort(front.begin(), front.end(),
            [](const DpState& x, const DpState& y) { return x.retained < y.retained; });
  return front;
}

// Both ways of merging (a few runs at once, more in pairs) against brute force, whole fronts.
TEST(FrontMerge, AppendsTheExactFrontOfItsRuns) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<DpState> source = random_front(rng, 1 + trial % 25);
    const int size = static_cast<int>(source.size());
    std::vector<StateRun> runs;
    const int count = 1 + trial % 9;
    for (int r = 0; r < count; ++r) {
      const int begin = std::uniform_int_distribution<int>(0, size - 1)(rng);
      const int end = std::uniform_int_distribution<int>(begin + 1, size)(rng);
      runs.push_back(StateRun{begin, end, std::uniform_int_distribution<std::int64_t>(0, 20)(rng),
                              std::uniform_real_distribution<double>(0.0, 30.0)(rng), r, 0, 0});
    }
    std::vector<DpState> pool(3);  // earlier fronts, left alone
    FrontMerge merge(0);
    ASSERT_TRUE(merge.append_front(source, runs, &pool));
    const std::vector<DpState> expected = pareto(source, runs);
    ASSERT_EQ(pool.size() - 3, expected.size()) << "trial " << trial;
    for (std::size_t k = 0; k < expected.size(); ++k) {
      EXPECT_EQ(pool[3 + k].retained, expected[k].retained) << "trial " << trial;
      EXPECT_EQ(pool[3 + k].time, expected[k].time) << "trial " << trial;
    }
  }
}

TEST(FrontMerge, UnitesTwoFrontsAndThinsLargeOnes) {
  std::mt19937_64 rng(42);
  std::vector<DpState> pool = random_front(rng, 40);
  std::vector<DpState> other = random_front(rng, 30);
  for (DpState& s : other) s.time += 5.0;
  pool.insert(pool.end(), other.begin(), other.end());
  std::vector<DpState> united;
  FrontMerge::unite(pool, 0, 40, 40, 70, &united);
  std::vector<StateRun> both = {StateRun{0, 40, 0, 0.0, 0, 0, 0},
                                StateRun{40, 70, 0, 0.0, 0, 0, 0}};
  std::vector<DpState> indexed = pool;
  for (std::size_t k = 0; k < indexed.size(); ++k) indexed[k].parent = static_cast<std::int32_t>(k);
  const std::vector<DpState> expected = pareto(indexed, both);
  ASSERT_EQ(united.size(), expected.size());
  for (std::size_t k = 0; k < united.size(); ++k) {
    EXPECT_EQ(united[k].retained, expected[k].retained);
    EXPECT_EQ(pool[united[k].parent].time, united[k].time);  // parents are pool indices
  }

  // Cut to 8 buckets: the least P stays, and every state kept is the fastest of its bucket.
  std::vector<DpState> front(united.begin(), united.end());
  FrontMerge thin(8);
  ASSERT_TRUE(thin.thin(0, &front));
  EXPECT_LE(front.size(), 9u);
  EXPECT_EQ(front.front().retained, united.front().retained);
  EXPECT_EQ(front.back().retained, united.back().retained);
  for (std::size_t k = 1; k < front.size(); ++k) {
    EXPECT_LT(front[k - 1].retained, front[k].retained);
    EXPECT_GT(front[k - 1].time, front[k].time);
  }
}

TEST(FrontMerge, ThinsByTimeWithinABucketOfEveryDroppedState) {
  std::mt19937_64 rng(43);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<DpState> whole = random_front(rng, 20 + trial * 4);
    const int buckets = 4 + trial % 13;
    std::vector<DpState> front = whole;
    FrontMerge thin(buckets);
    thin.set_thin_by_time(true);
    ASSERT_TRUE(thin.thin(0, &front));
    EXPECT_LE(front.size(), static_cast<std::size_t>(buckets) + 1);
    EXPECT_EQ(front.front().retained, whole.front().retained);  // the least P
    EXPECT_EQ(front.back().time, whole.back().time);            // the fastest
    for (std::size_t k = 1; k < front.size(); ++k) {
      EXPECT_LT(front[k - 1].retained, front[k].retained);
      EXPECT_GT(front[k - 1].time, front[k].time);
    }
    // Every state dropped has a kept one with no more P and at most a bucket's width more time.
    const double width = (whole.front().time - whole.back().time) / (buckets - 1);
    for (const DpState& s : whole) {
      const DpState* cover = nullptr;
      for (const DpState& kept : front) {
        if (kept.retained <= s.retained) cover = &kept;
      }
      ASSERT_NE(cover, nullptr);
      EXPECT_LE(cover->time, s.time + width * (1 + 1e-12)) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace monet
