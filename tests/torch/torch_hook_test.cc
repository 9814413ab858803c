// monet as LibTorch's CPU allocator: every tensor goes through the pool, PyTorch's raw
// allocation contract holds, marks measure a forward pass, and the budget ends in
// c10::OutOfMemoryError with monet's message.
#include <c10/core/CPUAllocator.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "allocator/device_pools.h"
#include "monet/allocator.h"

namespace monet {
namespace {

using ::testing::HasSubstr;

class TorchHookTest : public ::testing::Test {
 protected:
  void SetUp() override { install(); }
};

TEST_F(TorchHookTest, NewTensorsComeFromMonet) {
  const MemoryStats before = memory_stats();
  auto t = torch::ones({256, 1024});
  const MemoryStats after = memory_stats();
  EXPECT_GT(after.allocations, before.allocations);
  EXPECT_GE(after.allocated_bytes, before.allocated_bytes + 256 * 1024 * sizeof(float));
  EXPECT_TRUE(pools::cpu().owns(t.data_ptr()));
  EXPECT_FLOAT_EQ(t.sum().item<float>(), 256.0f * 1024.0f);
}

TEST_F(TorchHookTest, RawAllocateKeepsContextEqualToData) {
  c10::Allocator* allocator = c10::GetCPUAllocator();
  ASSERT_NE(allocator->raw_deleter(), nullptr);
  void* p = allocator->raw_allocate(4096);  // asserts ctx == data inside
  EXPECT_TRUE(pools::cpu().owns(p));
  allocator->raw_deallocate(p);
  EXPECT_FALSE(pools::cpu().owns(p));
}

TEST_F(TorchHookTest, MarksMeasureAForwardPass) {
  torch::nn::Linear layer(512, 512);
  auto x = torch::randn({64, 512});
  CachingAllocator& pool = pools::cpu();
  const Mark m = pool.mark();
  auto y = torch::relu(layer->forward(x));
  const std::size_t peak = pool.peak_since(m);
  EXPECT_GE(peak - m.allocated_bytes, 64 * 512 * sizeof(float));  // at least y
}

TEST_F(TorchHookTest, TrainingStepMatchesWithoutMonetNumerically) {
  // The allocator must not change results: the same step from the same seed gives the same loss
  // whether the tensors' memory is fresh or reused from the cache.
  auto step = [] {
    torch::manual_seed(7);
    torch::nn::Sequential net(torch::nn::Linear(32, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, 4));
    auto x = torch::randn({16, 32});
    auto loss = net->forward(x).pow(2).mean();
    loss.backward();
    return std::make_pair(loss.item<double>(),
                          net->parameters()[0].grad().abs().sum().item<double>());
  };
  const auto first = step();
  const auto second = step();  // served from blocks the first step freed
  EXPECT_EQ(first, second);
}

TEST_F(TorchHookTest, BudgetEndsInTorchOutOfMemoryWithMonetsMessage) {
  CachingAllocator& pool = pools::cpu();
  const std::size_t saved = pool.budget_bytes();
  pool.set_budget_bytes(pool.stats().reserved_bytes + (64 << 20));
  try {
    auto huge = torch::empty({256 << 20}, torch::kFloat);  // 1 GiB
    ADD_FAILURE() << "a tensor over the budget was allocated";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("monet: out of memory on cpu"));
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("tried to allocate 1.00 GiB"));
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("MONET_BUDGET"));
  }
  pool.set_budget_bytes(saved);
  auto fine = torch::empty({1 << 20}, torch::kFloat);  // the pool still works
  EXPECT_TRUE(pool.owns(fine.data_ptr()));
}

TEST_F(TorchHookTest, CudaTensorsComeFromMonetWhereThereIsAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device or a CPU-only LibTorch";
  auto t = torch::ones({1 << 20}, torch::kCUDA);
  EXPECT_TRUE(pools::cuda(0).owns(t.data_ptr()));
  EXPECT_GE(memory_stats(0).allocated_bytes, std::size_t{4} << 20);
  EXPECT_FLOAT_EQ(t.sum().item<float>(), 1 << 20);
}

}  // namespace
}  // namespace monet
