// The kernel clock over a CUPTI without a device (fake_cupti.cc): a window's time is the union of
// its records, and a window CUPTI could not time whole (it refused to turn records on, or dropped
// records) has no time and says why, rather than reading low. Runs everywhere, GPU or not.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "runtime/kernel_clock.h"

namespace monet {
namespace {

// The fake's controls, from the copy the clock loaded.
struct Fake {
  void (*ran)(std::uint64_t, std::uint64_t);
  void (*refuse_records)(int);
  void (*drop)(std::size_t);
  void (*set_now)(std::uint64_t);
  int (*kinds_on)();
};

class KernelClockOverFakeCupti : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    KernelClock::instance().prefer_library(FAKE_CUPTI_LIBRARY);
    ASSERT_TRUE(KernelClock::instance().available())
        << KernelClock::instance().unavailable_reason();
    void* lib = dlopen(FAKE_CUPTI_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(lib, nullptr) << "the clock did not load the fake CUPTI";
    fake_.ran = reinterpret_cast<decltype(fake_.ran)>(dlsym(lib, "fake_cupti_ran"));
    fake_.refuse_records =
        reinterpret_cast<decltype(fake_.refuse_records)>(dlsym(lib, "fake_cupti_refuse_records"));
    fake_.drop = reinterpret_cast<decltype(fake_.drop)>(dlsym(lib, "fake_cupti_drop"));
    fake_.set_now = reinterpret_cast<decltype(fake_.set_now)>(dlsym(lib, "fake_cupti_set_now"));
    fake_.kinds_on = reinterpret_cast<decltype(fake_.kinds_on)>(dlsym(lib, "fake_cupti_kinds_on"));
    ASSERT_TRUE(fake_.ran && fake_.refuse_records && fake_.drop && fake_.set_now && fake_.kinds_on);
  }
  void SetUp() override {
    if (fake_.ran == nullptr) GTEST_SKIP() << "the fake CUPTI was not loaded";
    fake_.refuse_records(0);
    fake_.set_now(1000);
  }
  static Fake fake_;
};

Fake KernelClockOverFakeCupti::fake_{};

constexpr int kMultipleSubscribers = 39;  // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED

TEST_F(KernelClockOverFakeCupti, AWindowIsTheUnionOfItsRecordsAfterItsStart) {
  KernelClock& clock = KernelClock::instance();
  clock.start();
  fake_.ran(1500, 2500);
  fake_.ran(2000, 3000);  // overlaps the first
  fake_.ran(500, 1200);   // began before the window: 200 ns of it count
  const DeviceTime t = clock.stop();
  ASSERT_TRUE(t.timed()) << t.error;
  EXPECT_EQ(t.records, 3u);
  EXPECT_DOUBLE_EQ(t.seconds, 1e-9 * (1500 + 200));
  EXPECT_EQ(fake_.kinds_on(), 0) << "records stay on after the window";
}

TEST_F(KernelClockOverFakeCupti, WorkOutsideAWindowIsNotRecorded) {
  KernelClock& clock = KernelClock::instance();
  fake_.ran(1000, 9000);
  clock.start();
  const DeviceTime t = clock.stop();
  ASSERT_TRUE(t.timed()) << t.error;
  EXPECT_EQ(t.records, 0u);
  EXPECT_EQ(t.seconds, 0.0);
}

TEST_F(KernelClockOverFakeCupti, RecordsRefusedAtTheStartAreNoTimeAndSayWhy) {
  KernelClock& clock = KernelClock::instance();
  fake_.refuse_records(kMultipleSubscribers);
  clock.start();
  fake_.ran(1000, 2000);
  const DeviceTime t = clock.stop();
  EXPECT_FALSE(t.timed());
  EXPECT_EQ(t.seconds, 0.0);
  EXPECT_NE(t.error.find("CUPTI would not record kernel activity "
                         "(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)"),
            std::string::npos)
      << t.error;
  // Once CUPTI records again, so does the clock.
  fake_.refuse_records(0);
  clock.start();
  fake_.ran(1000, 1400);
  const DeviceTime again = clock.stop();
  ASSERT_TRUE(again.timed()) << again.error;
  EXPECT_DOUBLE_EQ(again.seconds, 400e-9);
}

TEST_F(KernelClockOverFakeCupti, DroppedRecordsAreNoTimeAndSayHowMany) {
  KernelClock& clock = KernelClock::instance();
  clock.start();
  fake_.ran(1000, 5000);
  fake_.drop(4);
  const DeviceTime t = clock.stop();
  EXPECT_FALSE(t.timed());
  EXPECT_EQ(t.seconds, 0.0);
  EXPECT_EQ(t.error, "CUPTI dropped 4 records for want of buffer space");
  EXPECT_EQ(fake_.kinds_on(), 0);
  // Counted for the window they were dropped in only.
  clock.start();
  fake_.ran(1000, 3000);
  const DeviceTime next = clock.stop();
  ASSERT_TRUE(next.timed()) << next.error;
  EXPECT_DOUBLE_EQ(next.seconds, 2000e-9);
}

TEST_F(KernelClockOverFakeCupti, DropsBeforeAWindowAreNotItsOwn) {
  KernelClock& clock = KernelClock::instance();
  fake_.drop(2);  // while no window was open
  clock.start();
  fake_.ran(1000, 1100);
  const DeviceTime t = clock.stop();
  ASSERT_TRUE(t.timed()) << t.error;
  EXPECT_DOUBLE_EQ(t.seconds, 100e-9);
}

}  // namespace
}  // namespace monet
