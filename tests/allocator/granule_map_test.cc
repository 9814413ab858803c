// The granule map against a plain vector of flags, over ranges that start and end inside words,
// on word boundaries and across several words.
#include "allocator/granule_map.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace monet {
namespace {

std::size_t count(const std::vector<bool>& flags, std::size_t first, std::size_t last) {
  std::size_t n = 0;
  for (std::size_t g = first; g < last; ++g) n += flags[g] ? 1 : 0;
  return n;
}

std::size_t run_end(const std::vector<bool>& flags, std::size_t g, std::size_t last, bool value) {
  while (g < last && flags[g] == value) ++g;
  return g;
}

// The granule-at-a-time walk decommit_free made before start_of_last.
std::size_t start_of_last(const std::vector<bool>& flags, std::size_t first, std::size_t last,
                          std::size_t n) {
  std::size_t g = last;
  for (std::size_t found = 0; g > first && found < n;) {
    if (flags[--g]) ++found;
  }
  return g;
}

TEST(GranuleMap, StartsWithNothingCommitted) {
  GranuleMap map;
  EXPECT_EQ(map.size(), 0u);
  map.assign(130);
  EXPECT_EQ(map.size(), 130u);
  EXPECT_EQ(map.count(), 0u);
  EXPECT_EQ(map.run_end(0, 130, false), 130u);
  EXPECT_EQ(map.run_end(5, 130, true), 5u);
}

TEST(GranuleMap, CountsAndRunsAgreeWithOneFlagAGranule) {
  std::mt19937 rng(7);
  for (const std::size_t size : {1u, 63u, 64u, 65u, 200u, 1024u}) {
    GranuleMap map;
    map.assign(size);
    std::vector<bool> flags(size, false);
    std::uniform_int_distribution<std::size_t> at(0, size);
    for (int i = 0; i < 400; ++i) {
      std::size_t first = at(rng), last = at(rng);
      if (first > last) std::swap(first, last);
      const bool value = (rng() & 1U) != 0;
      map.set(first, last, value);
      for (std::size_t g = first; g < last; ++g) flags[g] = value;

      std::size_t a = at(rng), b = at(rng);
      if (a > b) std::swap(a, b);
      ASSERT_EQ(map.count(a, b), count(flags, a, b)) << size << " [" << a << ", " << b << ")";
      ASSERT_EQ(map.run_end(a, b, true), run_end(flags, a, b, true)) << size;
      ASSERT_EQ(map.run_end(a, b, false), run_end(flags, a, b, false)) << size;
      for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2},
                                  count(flags, a, b), count(flags, a, b) + 1, (b - a) / 2}) {
        ASSERT_EQ(map.start_of_last(a, b, n), a == b ? b : start_of_last(flags, a, b, n))
            << size << " [" << a << ", " << b << ") n " << n;
      }
      if (a < size) {
        ASSERT_EQ(map.test(a), flags[a]);
      }
    }
    EXPECT_EQ(map.count(), count(flags, 0, size));
  }
}

TEST(GranuleMap, TheLastCommittedGranulesAreFoundAcrossWords) {
  GranuleMap map;
  map.assign(1000);
  map.set(3, 5, true);      // granules 3 and 4
  map.set(130, 131, true);  // 130
  map.set(900, 903, true);  // 900 to 902
  EXPECT_EQ(map.start_of_last(0, 1000, 1), 902u);
  EXPECT_EQ(map.start_of_last(0, 1000, 3), 900u);
  EXPECT_EQ(map.start_of_last(0, 1000, 4), 130u);
  EXPECT_EQ(map.start_of_last(0, 1000, 5), 4u);
  EXPECT_EQ(map.start_of_last(0, 1000, 6), 3u);
  EXPECT_EQ(map.start_of_last(0, 1000, 7), 0u);  // fewer than asked: from the range's start
  EXPECT_EQ(map.start_of_last(4, 901, 2), 130u);
  EXPECT_EQ(map.start_of_last(131, 900, 1), 131u);
  EXPECT_EQ(map.start_of_last(0, 1000, 0), 1000u);
}

TEST(GranuleMap, ARunStopsAtItsLimitInsideAWord) {
  GranuleMap map;
  map.assign(128);
  map.set(10, 100, true);
  EXPECT_EQ(map.run_end(10, 128, true), 100u);
  EXPECT_EQ(map.run_end(10, 40, true), 40u);
  EXPECT_EQ(map.run_end(0, 128, false), 10u);
  EXPECT_EQ(map.run_end(100, 128, false), 128u);
  EXPECT_EQ(map.count(0, 64), 54u);
  EXPECT_EQ(map.count(64, 128), 36u);
}

}  // namespace
}  // namespace monet
