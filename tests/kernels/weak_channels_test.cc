// The BatchNorms' test for weights too small to invert, and its cache: on a device the cache
// stands between every output-keeping BatchNorm forward and a wait for the device, so what it
// must get right (a weight changed in place, a new storage, a weight gone, one wait for many) is
// checked here on CPU tensors, where it behaves the same.
#include "kernels/weak_channels.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace monet::kernels {
namespace {

std::vector<std::int64_t> indices(const at::Tensor& weak) {
  if (!weak.defined()) return {};
  const at::Tensor w = weak.to(at::kCPU).contiguous();
  return std::vector<std::int64_t>(w.data_ptr<std::int64_t>(),
                                   w.data_ptr<std::int64_t>() + w.numel());
}

using Indices = std::vector<std::int64_t>;

TEST(WeakChannels, BelowAHundredthOfTheLargerOfOneAndTheBias) {
  const at::Tensor weight = at::tensor({1.0, 0.0, 0.009, -0.009, 0.5, 0.011}, at::kFloat);
  const at::Tensor bias = at::tensor({0.0, 0.0, 0.0, 0.0, 100.0, 1.0}, at::kFloat);
  EXPECT_EQ(indices(weak_channels(weight, bias)), (Indices{1, 2, 3, 4}));
  EXPECT_EQ(indices(weak_channels(weight, at::Tensor())), (Indices{1, 2, 3}));
  EXPECT_FALSE(weak_channels(at::ones({4}, at::kFloat), at::zeros({4}, at::kFloat)).defined());
  // The device form of the test agrees with the host's loop.
  const at::Tensor random = at::randn({64}, at::kFloat) * 0.02;
  const at::Tensor random_bias = at::randn({64}, at::kFloat) * 3;
  WeakChannelCache cache;
  EXPECT_EQ(indices(cache.lookup(random, random_bias)),
            indices(weak_channels(random, random_bias)));
}

TEST(WeakChannelCache, AnswersAgainWithoutTestingUntilAWeightChangesInPlace) {
  WeakChannelCache cache;
  const at::Tensor weight = at::tensor({1.0, 0.0, 1.0, 1.0}, at::kFloat).requires_grad_();
  const at::Tensor bias = at::zeros({4}, at::kFloat).requires_grad_();
  EXPECT_EQ(indices(cache.lookup(weight, bias)), (Indices{1}));
  EXPECT_EQ(indices(cache.lookup(weight, bias)), (Indices{1}));
  EXPECT_EQ(cache.refreshes(), 1);
  {
    at::NoGradGuard no_grad;
    weight[3].zero_();  // as an optimizer's step changes it
  }
  EXPECT_EQ(indices(cache.lookup(weight, bias)), (Indices{1, 3}));
  EXPECT_EQ(cache.refreshes(), 2);
  {
    at::NoGradGuard no_grad;
    bias[0].fill_(1000.0);  // the bias counts too
  }
  EXPECT_EQ(indices(cache.lookup(weight, bias)), (Indices{0, 1, 3}));
  {
    at::NoGradGuard no_grad;
    weight.fill_(2.0);
    bias.zero_();
  }
  EXPECT_FALSE(cache.lookup(weight, bias).defined());
  EXPECT_EQ(cache.refreshes(), 4);
}

TEST(WeakChannelCache, OneStaleWeightRefreshesEveryStaleOneAtOnce) {
  WeakChannelCache cache;
  std::vector<at::Tensor> weights;
  for (int k = 0; k < 5; ++k) weights.push_back(at::ones({3}, at::kFloat));
  for (const at::Tensor& w : weights) EXPECT_FALSE(cache.lookup(w, at::Tensor()).defined());
  EXPECT_EQ(cache.refreshes(), 5);                        // each new weight is stale on its own
  for (int k = 0; k < 5; ++k) weights[k][k % 3].zero_();  // a step changes them all
  EXPECT_EQ(indices(cache.lookup(weights[0], at::Tensor())), (Indices{0}));
  EXPECT_EQ(cache.refreshes(), 6);
  for (int k = 1; k < 5; ++k) {
    EXPECT_EQ(indices(cache.lookup(weights[k], at::Tensor())), (Indices{k % 3})) << k;
  }
  EXPECT_EQ(cache.refreshes(), 6) << "the others were answered by the first one's refresh";
}

TEST(WeakChannelCache, ANewStorageIsSeenAndAWeightGoneIsForgotten) {
  WeakChannelCache cache;
  at::Tensor weight = at::ones({2}, at::kFloat);
  EXPECT_FALSE(cache.lookup(weight, at::Tensor()).defined());
  weight.set_data(at::zeros({2}, at::kFloat));  // new storage; the version need not move
  EXPECT_EQ(indices(cache.lookup(weight, at::Tensor())), (Indices{0, 1}));
  {
    const at::Tensor other = at::ones({2}, at::kFloat);
    cache.lookup(other, at::Tensor());
    EXPECT_EQ(cache.size(), 2u);
  }
  weight.zero_();  // stale again: its refresh drops the entry of the weight that is gone
  cache.lookup(weight, at::Tensor());
  EXPECT_EQ(cache.size(), 1u);
}

}  // namespace
}  // namespace monet::kernels
