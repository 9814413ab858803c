// fork() while other threads allocate from the process's pools: the child starts with one thread,
// the one that forked, so a pool lock another thread held at that moment would never be released
// in the child, and its first allocation would wait forever. PyTorch's DataLoader forks its
// workers from a process whose threads may be allocating.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include "allocator/device_pools.h"

namespace monet {
namespace {

// Waits up to `seconds` for the child; kills it and returns false if it has not ended by then.
bool ended_cleanly(pid_t child, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  return false;
}

TEST(PoolFork, AChildAllocatesWhileTheParentsThreadsWereAllocating) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not follow fork() in a process with threads";
#endif
  CachingAllocator& pool = pools::cpu();
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> held;
      for (std::size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        held.push_back(pool.allocate(512 + 4096 * ((i + t) % 7)));
        if (held.size() > 8) {
          pool.free(held.front());
          held.erase(held.begin());
        }
      }
      for (void* p : held) pool.free(p);
    });
  }
  int stuck = 0;
  for (int round = 0; round < 200; ++round) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The child: the pool must serve it. No gtest here: only _exit's status goes back.
      void* p = pools::cpu().allocate(1 << 16);
      pools::cpu().free(p);
      (void)pools::cpu().stats();
      _exit(0);
    }
    if (!ended_cleanly(child, 5.0)) ++stuck;
    if (stuck > 0) break;
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(stuck, 0) << "a forked child's first allocation never returned";
}

}  // namespace
}  // namespace monet
