// The CUDA backend on a real device. Each test skips itself where there is no usable GPU (no
// driver, a driver too old for the runtime, no device).
#include "allocator/cuda_backend.h"

#include <gtest/gtest.h>

#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/cuda_api.h"
#include "fill_kernel.h"
#include "monet/errors.h"

namespace monet {
namespace {

class CudaPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count(linked_cuda_api()) == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaPoolTest, BlocksAreUsableDeviceMemory) {
  CudaBackend backend(linked_cuda_api(), 0);
  EXPECT_EQ(backend.device_name(), "cuda:0");
  EXPECT_GT(backend.total_bytes(), 0u);
  CachingAllocator pool(backend, {});
  const std::size_t n = 3 << 20;
  void* p = pool.allocate(n);
  ASSERT_EQ(monet_test_fill(p, n, 0x5a, nullptr), cudaSuccess);
  std::vector<unsigned char> host(n);
  ASSERT_EQ(cudaMemcpy(host.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t i = 0; i < n; i += 4099) ASSERT_EQ(host[i], 0x5a) << i;
  pool.free(p);
  EXPECT_TRUE(pool.check_invariants().empty());
}

TEST_F(CudaPoolTest, CrossStreamBlockWaitsForItsStream) {
  CudaBackend backend(linked_cuda_api(), 0);
  CachingAllocator pool(backend, {});
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  void* p = pool.allocate(1 << 20);
  ASSERT_EQ(monet_test_fill(p, 1 << 20, 1, side), cudaSuccess);
  pool.record_stream(p, reinterpret_cast<Stream>(side));
  pool.free(p);
  ASSERT_EQ(cudaStreamSynchronize(side), cudaSuccess);
  void* q = pool.allocate(1 << 20);  // the event has completed: the block is reused
  EXPECT_EQ(p, q);
  pool.free(q);
  cudaStreamDestroy(side);
  EXPECT_TRUE(pool.check_invariants().empty());
}

TEST_F(CudaPoolTest, BudgetCapsDeviceMemory) {
  CudaBackend backend(linked_cuda_api(), 0);
  CachingAllocator pool(backend, CachingAllocator::Options{64 << 20, nullptr});
  void* p = pool.allocate(48 << 20);
  EXPECT_THROW(pool.allocate(32 << 20), OutOfMemoryError);
  pool.free(p);
  EXPECT_EQ(pool.release_cached(), std::size_t{48} << 20);
}

TEST(CudaDetection, AnyFailureMeansNoDevice) {
  const int n = cuda_device_count(linked_cuda_api());
  EXPECT_GE(n, 0);
}

}  // namespace
}  // namespace monet
