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

// Expandable segments: address ranges whose memory is mapped 2 MiB at a time.
class CudaExpandableTest : public CudaPoolTest {
 protected:
  void SetUp() override {
    CudaPoolTest::SetUp();
    if (IsSkipped()) return;
    if (cuda_driver_api() == nullptr) GTEST_SKIP() << "no CUDA driver virtual memory API";
  }
};

TEST_F(CudaExpandableTest, CommitsOnlyWhatBlocksUse) {
  CudaBackend backend(linked_cuda_api(), 0, cuda_driver_api());
  EXPECT_EQ(backend.granularity(), std::size_t{2} << 20);
  CachingAllocator pool(backend, {});
  const std::size_t n = 3 << 20;
  void* p = pool.allocate(n);  // a 20 MiB range, 4 MiB mapped
  EXPECT_EQ(pool.stats().reserved_bytes, std::size_t{4} << 20);
  ASSERT_EQ(monet_test_fill(p, n, 0x33, nullptr), cudaSuccess);
  std::vector<unsigned char> host(n);
  ASSERT_EQ(cudaMemcpy(host.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t i = 0; i < n; i += 4099) ASSERT_EQ(host[i], 0x33) << i;
  pool.free(p);
  EXPECT_EQ(pool.release_cached(), std::size_t{4} << 20);
  EXPECT_EQ(pool.stats().reserved_bytes, 0u);
  EXPECT_TRUE(pool.check_invariants().empty());
}

TEST_F(CudaExpandableTest, FreeHolesAreUnmappedBeforeTheReservationGrows) {
  CudaBackend backend(linked_cuda_api(), 0, cuda_driver_api());
  CachingAllocator pool(backend, {});
  void* a = pool.allocate(8 << 20);
  void* b = pool.allocate(8 << 20);
  pool.free(a);
  void* c = pool.allocate(12 << 20);
  ASSERT_EQ(monet_test_fill(c, 12 << 20, 1, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(pool.stats().peak_reserved_bytes, std::size_t{20} << 20);
  pool.free(b);
  pool.free(c);
  EXPECT_TRUE(pool.check_invariants().empty());
}

TEST(CudaDetection, AnyFailureMeansNoDevice) {
  const int n = cuda_device_count(linked_cuda_api());
  EXPECT_GE(n, 0);
}

}  // namespace
}  // namespace monet
