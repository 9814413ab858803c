// The CUPTI kernel clock (src/runtime/kernel_clock.h): the union of device intervals on the host,
// and, on a CUDA device, the busy time of kernels of known length against CUDA's events. The
// device tests skip where there is no device; where there is one, a clock that cannot time fails
// them unless MONET_STAGE_CLOCK=wall says CUPTI is not to be used.
#include "runtime/kernel_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef MONET_TEST_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "spin_kernel.h"
#endif

namespace monet {
namespace {

TEST(BusyNanoseconds, CountsTheUnionOfIntervals) {
  std::vector<DeviceInterval> v = {{100, 200}, {150, 300}, {400, 450}, {410, 420}};
  EXPECT_EQ(busy_nanoseconds(v, 0), 200u + 50u);
}

TEST(BusyNanoseconds, LeavesOutWhatRanBeforeTheWindow) {
  std::vector<DeviceInterval> v = {{10, 50}, {80, 120}, {200, 210}};
  EXPECT_EQ(busy_nanoseconds(v, 100), 20u + 10u);
}

TEST(BusyNanoseconds, EmptyAndReversedIntervalsCountNothing) {
  std::vector<DeviceInterval> none;
  EXPECT_EQ(busy_nanoseconds(none, 0), 0u);
  std::vector<DeviceInterval> v = {{50, 50}, {90, 60}, {0, 0}};
  EXPECT_EQ(busy_nanoseconds(v, 0), 0u);
}

TEST(BusyNanoseconds, UnsortedInputWithAGapInside) {
  std::vector<DeviceInterval> v = {{500, 600}, {0, 100}, {90, 110}, {300, 310}};
  EXPECT_EQ(busy_nanoseconds(v, 0), 110u + 10u + 100u);
}

TEST(KernelClock, SaysWhyWhenItCannotTime) {
  KernelClock& clock = KernelClock::instance();
  if (clock.available()) {
    EXPECT_TRUE(clock.unavailable_reason().empty());
  } else {
    EXPECT_FALSE(clock.unavailable_reason().empty());
    clock.start();
    const DeviceTime t = clock.stop();
    EXPECT_FALSE(t.timed());
    EXPECT_EQ(t.error, clock.unavailable_reason());
    EXPECT_EQ(t.seconds, 0.0);
  }
}

#ifdef MONET_TEST_HAVE_CUDA

bool cupti_declined() {
  const char* v = std::getenv("MONET_STAGE_CLOCK");
  return v != nullptr && std::string(v) == "wall";
}

class KernelClockOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    // Any error here (no driver, a driver too old for the runtime) means no device.
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      GTEST_SKIP() << "no CUDA device";
    }
    if (cupti_declined()) GTEST_SKIP() << "MONET_STAGE_CLOCK=wall";
    ASSERT_TRUE(KernelClock::instance().available())
        << KernelClock::instance().unavailable_reason();
    ASSERT_EQ(cudaStreamCreateWithFlags(&a_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&b_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  void TearDown() override {
    if (a_) cudaStreamDestroy(a_);
    if (b_) cudaStreamDestroy(b_);
  }
  cudaStream_t a_ = nullptr, b_ = nullptr;
};

TEST_F(KernelClockOnDevice, AKernelTakesWhatCudaEventsSay) {
  KernelClock& clock = KernelClock::instance();
  cudaEvent_t begin, end;
  ASSERT_EQ(cudaEventCreate(&begin), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);
  clock.start();
  ASSERT_EQ(cudaEventRecord(begin, a_), cudaSuccess);
  ASSERT_EQ(monet_test_spin(0.005, a_), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, a_), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const DeviceTime kernel_time = clock.stop();
  ASSERT_TRUE(kernel_time.timed()) << kernel_time.error;
  const double kernel = kernel_time.seconds;
  float event_ms = 0.0f;
  ASSERT_EQ(cudaEventElapsedTime(&event_ms, begin, end), cudaSuccess);
  EXPECT_GE(kernel, 0.005);
  EXPECT_NEAR(kernel, 1e-3 * event_ms, 0.1 * 1e-3 * event_ms + 50e-6);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
}

TEST_F(KernelClockOnDevice, OverlappingKernelsCountOnce) {
  KernelClock& clock = KernelClock::instance();
  clock.start();
  ASSERT_EQ(monet_test_spin(0.004, a_), cudaSuccess);
  ASSERT_EQ(monet_test_spin(0.004, b_), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const DeviceTime busy_time = clock.stop();
  ASSERT_TRUE(busy_time.timed()) << busy_time.error;
  const double busy = busy_time.seconds;
  EXPECT_GE(busy, 0.004);
  EXPECT_LT(busy, 0.0079);  // two 4 ms kernels side by side, not 8 ms
}

TEST_F(KernelClockOnDevice, IdleHostTimeAndEarlierWorkDoNotCount) {
  KernelClock& clock = KernelClock::instance();
  ASSERT_EQ(monet_test_spin(0.003, a_), cudaSuccess);  // before the window
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  clock.start();
  ASSERT_EQ(monet_test_spin(0.001, a_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a_), cudaSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(5)) {
  }
  ASSERT_EQ(monet_test_spin(0.001, a_), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const DeviceTime busy_time = clock.stop();
  ASSERT_TRUE(busy_time.timed()) << busy_time.error;
  const double busy = busy_time.seconds;
  EXPECT_GE(busy, 0.002);
  EXPECT_LT(busy, 0.0035);  // not the 3 ms before the window, not the 5 ms of host time
}

TEST_F(KernelClockOnDevice, CopiesAndMemsetsCount) {
  KernelClock& clock = KernelClock::instance();
  void* p = nullptr;
  const std::size_t n = std::size_t{256} << 20;
  ASSERT_EQ(cudaMalloc(&p, n), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  clock.start();
  ASSERT_EQ(cudaMemsetAsync(p, 0, n, a_), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const DeviceTime t = clock.stop();
  EXPECT_TRUE(t.timed()) << t.error;
  EXPECT_GT(t.seconds, 0.0);
  EXPECT_GE(t.records, 1u);
  cudaFree(p);
}

#endif  // MONET_TEST_HAVE_CUDA

}  // namespace
}  // namespace monet
