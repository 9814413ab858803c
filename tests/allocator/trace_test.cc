#include "allocator/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "allocator/caching_allocator.h"
#include "allocator/host_backend.h"
#include "monet/errors.h"

namespace monet {
namespace {

using ::testing::HasSubstr;

// Across fork() (the process's pools call these through pthread_atfork): the events recorded
// before it are written once, not again from the child's copy of the buffer, and the child
// records nothing, since its blocks lie at the parent's addresses.
TEST(Trace, AForkedChildRecordsNothingAndRepeatsNothing) {
  const std::string path =
      ::testing::TempDir() + "/monet_trace_fork_" + std::to_string(::getpid()) + ".trace";
  {
    TraceWriter writer(path);
    int x = 0;
    for (int i = 0; i < 3; ++i) writer.record(TraceEvent::Op::kAlloc, "cpu", 0, 64, &x + i);
    writer.lock_for_fork();
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      writer.unlock_after_fork(/*in_child=*/true);
      writer.record(TraceEvent::Op::kAlloc, "cpu", 0, 128, &x);
      writer.flush();
      _exit(0);
    }
    writer.unlock_after_fork(/*in_child=*/false);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    writer.record(TraceEvent::Op::kFree, "cpu", 0, 64, &x);
  }
  std::ifstream in(path);
  const std::vector<TraceEvent> events = read_trace(in);
  ASSERT_EQ(events.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(events[i].bytes, 64u) << i;
  EXPECT_EQ(events[3].op, TraceEvent::Op::kFree);
  std::remove(path.c_str());
}

TEST(Trace, RecordsEveryAllocationAndFreeAndReadsBack) {
  const std::string path =
      ::testing::TempDir() + "/monet_trace_test_" + std::to_string(::getpid()) + ".trace";
  void* a = nullptr;
  void* b = nullptr;
  {
    TraceWriter writer(path);
    HostBackend backend;
    CachingAllocator pool(backend, CachingAllocator::Options{0, &writer});
    a = pool.allocate(1000, /*stream=*/0);
    b = pool.allocate(5 << 20, /*stream=*/7);
    pool.free(a);
    pool.free(b);
  }
  std::ifstream in(path);
  const std::vector<TraceEvent> events = read_trace(in);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].op, TraceEvent::Op::kAlloc);
  EXPECT_EQ(events[0].bytes, 1000u);
  EXPECT_EQ(events[0].device, "cpu");
  EXPECT_EQ(events[0].address, reinterpret_cast<std::uintptr_t>(a));
  EXPECT_EQ(events[1].stream, 7u);
  EXPECT_EQ(events[2].op, TraceEvent::Op::kFree);
  EXPECT_EQ(events[2].bytes, 1000u);
  EXPECT_EQ(events[3].address, reinterpret_cast<std::uintptr_t>(b));
  EXPECT_LE(events[0].time_ns, events[3].time_ns);
  std::remove(path.c_str());
}

TEST(Trace, MalformedLinesAreNamed) {
  std::istringstream in("# monet-trace 1\na 1 cpu 0 512 0x1000\nx 2 cpu 0 512 0x1000\n");
  try {
    read_trace(in);
    FAIL() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("trace line 3"));
  }
  std::istringstream future("# monet-trace 9\n");
  EXPECT_THROW(read_trace(future), std::runtime_error);
  // A negative size would read as a size near 2^64; a number must be whole and fit.
  for (const char* bad :
       {"a 1 cpu 0 -5 0x1000", "a 1 cpu 0 +5 0x1000", "a 1x cpu 0 5 0x1000", "a 1 cpu -1 5 0x1000",
        "a 1 cpu 0 99999999999999999999 0x1000", "a 1 cpu 0 5 0x", "a 1 cpu 0 5 0x12g",
        "a 1 cpu 0 5 1000", "ab 1 cpu 0 5 0x1000"}) {
    std::istringstream line(std::string("# monet-trace 1\n") + bad + "\n");
    try {
      read_trace(line);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("trace line 2")) << bad;
    }
  }
  std::istringstream good(
      "# monet-trace 1\nf 7 cuda:1 93824992236880 18446744073709551615 0xFFab\n");
  const std::vector<TraceEvent> events = read_trace(good);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].bytes, SIZE_MAX);
  EXPECT_EQ(events[0].stream, 93824992236880u);
  EXPECT_EQ(events[0].address, 0xFFABu);
}

TEST(Trace, UnwritablePathIsAConfigError) {
  EXPECT_THROW(TraceWriter("/nonexistent-folder/x.trace"), ConfigError);
}

}  // namespace
}  // namespace monet
