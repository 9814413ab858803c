// Every runtime test ends with no budget on any pool, however it ends: a test sets the budget of
// the pool it trains in (a Runtime's Options, or the pool itself), and an assertion that fails
// returns before the test's last line. Without this, the next test in the same process (running
// the binary rather than ctest, which runs each test alone) would start under that budget.
#include <gtest/gtest.h>

#include "allocator/device_pools.h"

namespace monet::testing {
namespace {

class LiftBudgetsAfterEachTest : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo&) override {
    for (CachingAllocator* pool : pools::all()) pool->set_budget_bytes(0);
  }
};

[[maybe_unused]] const bool kRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new LiftBudgetsAfterEachTest);
  return true;
}();

}  // namespace
}  // namespace monet::testing
