#include "allocator/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/device_pools.h"
#include "allocator/host_backend.h"
#include "monet/errors.h"

namespace monet {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/monet_trace_" + name + "_" + std::to_string(::getpid()) +
         ".trace";
}

std::vector<TraceEvent> read_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return read_trace(in);
}

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

TEST(Trace, ALastLineCutShortIsLeftOutWhereAsked) {
  const std::string whole = "# monet-trace 1\na 1 cpu 0 4096 0x1000\nf 2 cpu 0 4096 0x1000\n";
  std::string cut = "stale";
  std::istringstream in(whole + "a 3 cpu 0 40");
  EXPECT_EQ(read_trace(in, &cut).size(), 2u);
  EXPECT_EQ(cut, "a 3 cpu 0 40");
  std::istringstream ends_whole(whole);
  EXPECT_EQ(read_trace(ends_whole, &cut).size(), 2u);
  EXPECT_EQ(cut, "");
  // Not asked, the line is read as any other: this one is malformed.
  std::istringstream not_asked(whole + "a 3 cpu 0 40");
  EXPECT_THROW(read_trace(not_asked), std::runtime_error);
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
        "a 1 cpu 0 5 1000", "ab 1 cpu 0 5 0x1000", "a 1 cpu 0 5 0x1000 f 2 cpu 0 5 0x1000",
        // A device the pools do not name: a trace damaged, or not monet's.
        "a 1 gpu 0 5 0x1000", "a 1 cuda 0 5 0x1000", "a 1 cuda: 0 5 0x1000",
        "a 1 cuda:-1 0 5 0x1000", "a 1 cuda:1x 0 5 0x1000", "a 1 CPU 0 5 0x1000"}) {
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
  EXPECT_EQ(events[0].device, "cuda:1");
  EXPECT_EQ(events[0].line, 2u);
  EXPECT_EQ(events[0].bytes, SIZE_MAX);
  EXPECT_EQ(events[0].stream, 93824992236880u);
  EXPECT_EQ(events[0].address, 0xFFABu);
}

TEST(Trace, UnwritablePathIsAConfigError) {
  EXPECT_THROW(TraceWriter("/nonexistent-folder/x.trace"), ConfigError);
  EXPECT_THROW(check_trace_path("/nonexistent-folder/x.trace"), ConfigError);
  // A folder is writable as a folder, not as a trace: named at start, not when the first pool
  // fails to open it and the job goes on without a trace.
  for (const std::string& folder : {::testing::TempDir(), std::string("/tmp")}) {
    try {
      check_trace_path(folder);
      ADD_FAILURE() << "a folder was taken for a trace: " << folder;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("is a folder")) << folder;
    }
  }
}

// Checking MONET_TRACE at start opens nothing: the file may be the trace of the process that
// started this one.
TEST(Trace, CheckingThePathLeavesTheFileAsItIs) {
  const std::string path = temp_path("check");
  std::ofstream(path) << "# monet-trace 1\n";
  check_trace_path(path);
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "# monet-trace 1\n");
  std::remove(path.c_str());
  check_trace_path(path);
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "created";
}

// A second writer of a trace that one holds open leaves it alone and writes its own file.
TEST(Trace, ASecondWriterOfTheSameFileWritesItsOwn) {
  const std::string path = temp_path("second");
  const std::string own = path + "." + std::to_string(::getpid());
  int x[2] = {};
  {
    TraceWriter first(path);
    first.record(TraceEvent::Op::kAlloc, "cpu", 0, 64, &x[0]);
    first.flush();
    {
      TraceWriter second(path);
      EXPECT_EQ(second.path(), own);
      second.record(TraceEvent::Op::kAlloc, "cpu", 0, 128, &x[1]);
    }
    first.record(TraceEvent::Op::kFree, "cpu", 0, 64, &x[0]);
  }
  EXPECT_THAT(read_file(path), ElementsAre(Field(&TraceEvent::bytes, 64u),
                                           Field(&TraceEvent::op, TraceEvent::Op::kFree)));
  EXPECT_THAT(read_file(own), ElementsAre(Field(&TraceEvent::bytes, 128u)));
  // Once the first is closed, the file is free for the next job to write afresh.
  { TraceWriter next(path); }
  EXPECT_THAT(read_file(path), IsEmpty());
  std::remove(path.c_str());
  std::remove(own.c_str());
}

// Run by Trace.AProgramStartedWhileTheTraceIsWrittenLeavesItAlone in a process of its own, as a
// program that a traced job starts: it checks the environment it inherited, as the preload does
// when it loads, and allocates from the process's pools.
TEST(TraceChild, AllocatesUnderTheEnvironmentItInherited) {
  if (std::getenv("MONET_TRACE") == nullptr) {
    GTEST_SKIP() << "run by Trace.AProgramStartedWhileTheTraceIsWrittenLeavesItAlone";
  }
  pools::validate_environment();
  CachingAllocator& pool = pools::cpu();
  pool.free(pool.allocate(1000));
}

// A job's trace is the job's: a program it starts (by exec, with MONET_TRACE in the environment
// it inherits) neither truncates it nor writes into it, and writes its own file beside it.
TEST(Trace, AProgramStartedWhileTheTraceIsWrittenLeavesItAlone) {
  const std::string path = temp_path("exec");
  int x[3] = {};
  TraceWriter writer(path);
  for (int& i : x) writer.record(TraceEvent::Op::kAlloc, "cpu", 0, 64, &i);
  writer.flush();

  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "MONET_TRACE=", 12) != 0) env.emplace_back(*e);
  }
  env.push_back("MONET_TRACE=" + path);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=TraceChild.*";
  char* argv[] = {self.data(), filter.data(), nullptr};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execve(argv[0], argv, envp.data());
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  writer.record(TraceEvent::Op::kFree, "cpu", 0, 64, &x[0]);
  writer.flush();

  const std::vector<TraceEvent> events = read_file(path);
  ASSERT_EQ(events.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(events[i].address, reinterpret_cast<std::uintptr_t>(&x[i]));
  const std::string childs = path + "." + std::to_string(child);
  EXPECT_THAT(read_file(childs), ElementsAre(Field(&TraceEvent::bytes, 1000u),
                                             Field(&TraceEvent::op, TraceEvent::Op::kFree)));
  std::remove(path.c_str());
  std::remove(childs.c_str());
}

// A trace that cannot be written (a full disk) ends with a warning; no allocation or free fails
// for it, and no block is lost.
TEST(Trace, AWriteThatFailsEndsTheTraceAndThePoolGoesOn) {
  TraceWriter writer("/dev/full");
  HostBackend backend(HostBackend::Options{0, /*backed=*/false});
  CachingAllocator pool(backend, CachingAllocator::Options{0, &writer});
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; ++i) pool.free(pool.allocate(4096));
  writer.flush();
  const std::string said = ::testing::internal::GetCapturedStderr();
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.allocations, 1000u);
  EXPECT_EQ(s.frees, 1000u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.active_blocks, 0u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  const std::string warning = "MONET_TRACE: writing /dev/full failed";
  const auto first = said.find(warning);
  EXPECT_NE(first, std::string::npos) << said;
  EXPECT_EQ(said.find(warning, first + 1), std::string::npos) << "said more than once: " << said;
}

}  // namespace
}  // namespace monet
