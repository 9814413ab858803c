// Autocast's state as monet's ops and checkpoints save and restore it (kernels/autocast.h).
#include "kernels/autocast.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace monet::kernels {
namespace {

AutocastState bf16_on_cpu() {
  AutocastState s;
  s.cpu = true;
  s.cpu_dtype = at::kBFloat16;
  return s;
}

TEST(AutocastTest, AScopeSetsTheStateAndPutsBackTheOneBefore) {
  ASSERT_EQ(AutocastState::current(), AutocastState());
  {
    const AutocastScope on(bf16_on_cpu());
    EXPECT_EQ(AutocastState::current(), bf16_on_cpu());
    EXPECT_EQ(autocast_lower_precision(at::ones({2})), at::kBFloat16);
    // Not eligible: float64, integers.
    EXPECT_FALSE(autocast_lower_precision(at::ones({2}, at::kDouble)).has_value());
    EXPECT_FALSE(autocast_lower_precision(at::ones({2}, at::kLong)).has_value());
    {
      const AutocastScope off{AutocastState()};
      EXPECT_EQ(AutocastState::current(), AutocastState());
      EXPECT_FALSE(autocast_lower_precision(at::ones({2})).has_value());
    }
    EXPECT_EQ(AutocastState::current(), bf16_on_cpu());
  }
  EXPECT_EQ(AutocastState::current(), AutocastState());
}

TEST(AutocastTest, StatesCompareByWhatTheyCast) {
  AutocastState a, b;
  b.cpu_dtype = at::kHalf;  // off: its dtype casts nothing
  EXPECT_EQ(a, b);
  a.cpu = b.cpu = true;
  EXPECT_NE(a, b);
  EXPECT_EQ(AutocastState().describe(), "off");
  EXPECT_EQ(bf16_on_cpu().describe(), "bfloat16 on cpu");
  AutocastState both = bf16_on_cpu();
  both.cuda = true;
  EXPECT_EQ(both.describe(), "bfloat16 on cpu, float16 on cuda");
}

// A parameter's cast made inside a region is cached once; the cache is emptied when the region a
// scope opened ends, and nothing is cached while AutocastCacheOff holds.
TEST(AutocastTest, TheCacheHoldsCastsForARegionAndNotWhileTurnedOff) {
  const at::Tensor w = at::randn({4, 4}).requires_grad_();
  at::Tensor first;
  {
    const AutocastScope on(bf16_on_cpu());
    const at::Tensor a = autocast_cast(w, at::kBFloat16, at::kCPU);
    first = a;
    const at::Tensor b = autocast_cast(w, at::kBFloat16, at::kCPU);
    EXPECT_TRUE(a.is_same(b));
    {
      const AutocastCacheOff no_cache;
      const at::Tensor c = autocast_cast(w, at::kBFloat16, at::kCPU);
      EXPECT_FALSE(c.is_same(a));
    }
    // An undefined or ineligible tensor is passed through.
    EXPECT_FALSE(autocast_cast(at::Tensor(), at::kBFloat16, at::kCPU).defined());
    const at::Tensor d = at::ones({2}, at::kDouble);
    EXPECT_TRUE(autocast_cast(d, at::kBFloat16, at::kCPU).is_same(d));
  }
  const AutocastScope again(bf16_on_cpu());
  const at::Tensor fresh = autocast_cast(w, at::kBFloat16, at::kCPU);
  EXPECT_FALSE(fresh.is_same(first)) << "the first region's cache outlived it";
  {
    const AutocastCacheOff no_cache;
    EXPECT_FALSE(autocast_cast(w, at::kBFloat16, at::kCPU).is_same(fresh));
  }
  EXPECT_TRUE(autocast_cast(w, at::kBFloat16, at::kCPU).is_same(fresh));
}

}  // namespace
}  // namespace monet::kernels
