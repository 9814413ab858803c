// Long random sequences of allocations and frees, over several streams, with cross-stream use
// and a budget, checking every invariant as they run and that no two live blocks overlap (each
// live block carries a fill pattern that must survive until it is freed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/size_rules.h"
#include "allocator/trace.h"
#include "fake_backend.h"
#include "monet/errors.h"

namespace monet {
namespace {

using ::testing::IsEmpty;

struct Live {
  unsigned char* ptr;
  std::size_t bytes;
  unsigned char fill;
};

std::size_t random_size(std::mt19937_64& rng) {
  // Mostly small tensors, some mid-sized, a few large, like a training step.
  const int kind = std::uniform_int_distribution<int>(0, 99)(rng);
  if (kind < 60) return std::uniform_int_distribution<std::size_t>(1, 64 << 10)(rng);
  if (kind < 90) return std::uniform_int_distribution<std::size_t>(64 << 10, 4 << 20)(rng);
  return std::uniform_int_distribution<std::size_t>(4 << 20, 24 << 20)(rng);
}

// Writes the fill at a few places; enough to catch overlaps without touching every byte.
void stamp(const Live& l) {
  l.ptr[0] = l.fill;
  l.ptr[l.bytes / 2] = l.fill;
  l.ptr[l.bytes - 1] = l.fill;
}
bool intact(const Live& l) {
  return l.ptr[0] == l.fill && l.ptr[l.bytes / 2] == l.fill && l.ptr[l.bytes - 1] == l.fill;
}

void run_stress(std::uint64_t seed, std::size_t budget, int steps, std::size_t granularity) {
  std::mt19937_64 rng(seed);
  HostBackend::Options options;
  options.granularity = granularity;
  testing::ManualEventBackend backend(options);
  CachingAllocator pool(backend, CachingAllocator::Options{budget, nullptr});
  std::vector<Live> live;
  std::size_t live_requested = 0;
  int refused = 0;

  for (int step = 0; step < steps; ++step) {
    const int action = std::uniform_int_distribution<int>(0, 99)(rng);
    if (action < 55 || live.empty()) {
      const std::size_t bytes = random_size(rng);
      const Stream stream = std::uniform_int_distribution<Stream>(0, 2)(rng);
      try {
        auto* p = static_cast<unsigned char*>(pool.allocate(bytes, stream));
        Live l{p, bytes, static_cast<unsigned char>(step * 131 + 7)};
        stamp(l);
        if (std::uniform_int_distribution<int>(0, 9)(rng) == 0) {
          pool.record_stream(p, std::uniform_int_distribution<Stream>(0, 2)(rng));
        }
        live.push_back(l);
        live_requested += bytes;
      } catch (const OutOfMemoryError& e) {
        ++refused;
        // Refusal is right only when the budget leaves no room for the block, even after the
        // cache was released.
        const std::size_t unit = granularity != 0 ? granularity : size_rules::kMinBlock;
        ASSERT_GT(e.reserved_bytes + size_rules::round_up(size_rules::block_size(bytes), unit),
                  budget)
            << "refused although the budget had room";
      }
    } else if (action < 97) {
      const std::size_t i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
      ASSERT_TRUE(intact(live[i])) << "block overwritten while live, step " << step;
      pool.free(live[i].ptr);
      live_requested -= live[i].bytes;
      live[i] = live.back();
      live.pop_back();
    } else if (action < 99) {
      backend.complete_all();
    } else {
      pool.release_cached();
    }

    if (step % 64 == 0) {
      ASSERT_THAT(pool.check_invariants(), IsEmpty()) << "step " << step;
      ASSERT_EQ(pool.stats().requested_bytes, live_requested);
    }
    ASSERT_LE(pool.stats().reserved_bytes, budget);
  }
  for (const Live& l : live) {
    ASSERT_TRUE(intact(l));
    pool.free(l.ptr);
  }
  backend.complete_all();
  pool.release_cached();
  ASSERT_THAT(pool.check_invariants(), IsEmpty());
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.allocations, s.frees);
  EXPECT_LE(s.peak_reserved_bytes, budget);
  ::testing::Test::RecordProperty("refused", refused);
}

// The statistics against a model kept beside the pool: every counter the model can know exactly
// (requested bytes, counts, peaks, marks, blocks in use, refusals with room in the budget) after
// every operation of a random sequence that also empties the cache, changes the budget, resets
// the peaks and makes and clears marks.
void run_model(std::uint64_t seed, std::size_t granularity) {
  std::mt19937_64 rng(seed);
  const auto pick = [&rng](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  HostBackend::Options options;
  options.granularity = granularity;
  options.backed = false;
  testing::ManualEventBackend backend(options);
  std::size_t budget = std::size_t{96} << 20;
  CachingAllocator pool(backend, CachingAllocator::Options{budget, nullptr});
  std::map<char*, std::size_t> live;  // address -> bytes asked for
  std::size_t requested = 0, least_allocated = 0;
  std::uint64_t allocations = 0, frees = 0, refused = 0, in_pieces = 0, hits = 0;
  std::size_t peak_allocated = 0, peak_requested = 0, peak_reserved = 0;
  struct OpenMark {
    Mark mark;
    std::size_t allocated, requested;  // the peaks since the mark
  };
  std::vector<OpenMark> marks;
  bool over_budget = false;  // the budget was lowered below what is in use
  for (int step = 0; step < 12000; ++step) {
    SCOPED_TRACE(step);
    const int action = pick(100);
    if (action < 50 || live.empty()) {
      // Sizes at the rules' edges now and then.
      static constexpr std::size_t kEdges[] = {
          1,       511, 512, 513, 1 << 20, (1 << 20) + 1, (10 << 20) - 1, 10 << 20, (10 << 20) + 1,
          20 << 20};
      const std::size_t bytes = pick(10) == 0 ? kEdges[pick(10)] : random_size(rng);
      const std::uint64_t reserves = pool.stats().segment_reserves;
      try {
        auto* p = static_cast<char*>(pool.allocate(bytes, static_cast<Stream>(pick(2))));
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % size_rules::kMinBlock, 0u);
        const auto next = live.lower_bound(p);
        if (next != live.end()) {
          ASSERT_LE(p + size_rules::block_size(bytes), next->first) << "overlaps the next block";
        }
        if (next != live.begin()) {
          const auto before = std::prev(next);
          ASSERT_LE(before->first + size_rules::block_size(before->second), p) << "overlaps";
        }
        live[p] = bytes;
        ++allocations;
        requested += bytes;
        least_allocated += size_rules::block_size(bytes);
        if (pool.stats().segment_reserves == reserves) ++hits;
        if (pick(20) == 0) pool.record_stream(p, static_cast<Stream>(pick(3)));
      } catch (const OutOfMemoryError& e) {
        ++refused;
        // In pieces: the budget has room for the block, and, committed by granule, for the
        // granules it takes (a budget of less room than one granule is no hole).
        if (budget != 0 && bytes <= size_rules::kMaxRequest &&
            e.allocated_bytes + size_rules::block_size(bytes) <= budget &&
            (granularity == 0 ||
             e.allocated_bytes + size_rules::round_up(size_rules::block_size(bytes), granularity) <=
                 budget)) {
          ++in_pieces;
        }
        const MemoryStats s = pool.stats();
        EXPECT_EQ(e.allocated_bytes, s.allocated_bytes);
        EXPECT_EQ(e.reserved_bytes, s.reserved_bytes);
        EXPECT_EQ(e.largest_free_bytes, s.largest_free_bytes);
      }
    } else if (action < 88) {
      auto it = std::next(live.begin(), pick(static_cast<int>(live.size())));
      pool.free(it->first);
      ++frees;
      requested -= it->second;
      least_allocated -= size_rules::block_size(it->second);
      live.erase(it);
    } else if (action < 90) {
      backend.complete_all();
    } else if (action < 92) {
      pool.release_cached();
      if (live.empty()) {
        ASSERT_EQ(pool.stats().reserved_bytes, 0u);
      }
    } else if (action < 94) {
      budget = pick(4) == 0 ? 0 : static_cast<std::size_t>(8 + pick(120)) << 20;
      pool.set_budget_bytes(budget);
      over_budget = budget != 0 && pool.stats().reserved_bytes > budget;
      if (live.empty()) {
        ASSERT_EQ(pool.stats().reserved_bytes, 0u);
      }
    } else if (action < 95) {
      pool.reset_peaks();
      const MemoryStats s = pool.stats();
      peak_allocated = s.allocated_bytes;
      peak_requested = s.requested_bytes;
      peak_reserved = s.reserved_bytes;
    } else if (action < 98) {
      const Mark m = pool.mark();
      marks.push_back({m, m.allocated_bytes, m.requested_bytes});
      ASSERT_EQ(m.requested_bytes, requested);
    } else {
      pool.clear_marks();
      marks.clear();
    }

    const MemoryStats s = pool.stats();
    peak_allocated = std::max(peak_allocated, s.allocated_bytes);
    peak_requested = std::max(peak_requested, s.requested_bytes);
    peak_reserved = std::max(peak_reserved, s.reserved_bytes);
    ASSERT_EQ(s.requested_bytes, requested);
    ASSERT_GE(s.allocated_bytes, least_allocated);
    ASSERT_LE(s.allocated_bytes, s.reserved_bytes);
    ASSERT_EQ(s.allocations, allocations);
    ASSERT_EQ(s.frees, frees);
    ASSERT_EQ(s.out_of_memory, refused);
    ASSERT_EQ(s.out_of_memory_in_pieces, in_pieces);
    ASSERT_EQ(s.cache_hits, hits);
    ASSERT_EQ(s.segments, s.segment_reserves - s.segment_releases);
    ASSERT_EQ(s.active_blocks, live.size());
    ASSERT_EQ(s.peak_allocated_bytes, peak_allocated);
    ASSERT_EQ(s.peak_requested_bytes, peak_requested);
    ASSERT_EQ(s.peak_reserved_bytes, peak_reserved);
    ASSERT_EQ(s.budget_bytes, budget);
    if (budget != 0 && s.reserved_bytes <= budget) over_budget = false;
    if (budget != 0 && !over_budget) {
      ASSERT_LE(s.reserved_bytes, budget);
    }
    if (s.free_blocks == 0) {
      ASSERT_EQ(s.largest_free_bytes, 0u);
    }
    for (OpenMark& m : marks) {
      m.allocated = std::max(m.allocated, s.allocated_bytes);
      m.requested = std::max(m.requested, s.requested_bytes);
      ASSERT_EQ(pool.peak_since(m.mark), m.allocated);
      ASSERT_EQ(pool.peak_requested_since(m.mark), m.requested);
    }
    if (step % 64 == 0 && !over_budget) {
      ASSERT_THAT(pool.check_invariants(), IsEmpty());
    }
  }
}

TEST(PoolModel, EveryStatisticAgreesWithAModelOfThePool) {
  for (const std::size_t granularity :
       {std::size_t{0}, std::size_t{64} << 10, std::size_t{2} << 20}) {
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      SCOPED_TRACE(::testing::Message() << "granularity " << granularity << ", seed " << seed);
      run_model(seed, granularity);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

class PoolStress : public ::testing::TestWithParam<std::size_t> {};

TEST_P(PoolStress, RandomSequencesKeepEveryInvariant) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    run_stress(seed, /*budget=*/std::size_t{256} << 20, /*steps=*/6000, GetParam());
  }
}

TEST_P(PoolStress, TightBudgetRefusesOnlyWhenFull) {
  run_stress(/*seed=*/42, /*budget=*/std::size_t{64} << 20, /*steps=*/8000, GetParam());
}

// Segments held whole (cudaMalloc-like) and committed by 2 MiB granules.
INSTANTIATE_TEST_SUITE_P(Granularity, PoolStress,
                         ::testing::Values(std::size_t{0}, std::size_t{2} << 20));

}  // namespace
}  // namespace monet

namespace monet {
namespace {

// LibTorch allocates from several threads at once (intra-op parallelism): the pool must hold its
// invariants and its counts when they race.
TEST(PoolThreads, ConcurrentAllocationsAndFreesStaySound) {
  HostBackend backend;
  CachingAllocator pool(backend, CachingAllocator::Options{std::size_t{512} << 20, nullptr});
  constexpr int kThreads = 4;
  constexpr int kSteps = 4000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<Live> live;
      for (int step = 0; step < kSteps; ++step) {
        if (live.empty() || std::uniform_int_distribution<int>(0, 1)(rng) == 0) {
          const std::size_t bytes = random_size(rng) / 4 + 1;
          auto* p = static_cast<unsigned char*>(pool.allocate(bytes));
          Live l{p, bytes, static_cast<unsigned char>(t * 50 + step)};
          stamp(l);
          live.push_back(l);
        } else {
          const std::size_t i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
          ASSERT_TRUE(intact(live[i])) << "thread " << t << " step " << step;
          pool.free(live[i].ptr);
          live[i] = live.back();
          live.pop_back();
        }
      }
      for (const Live& l : live) pool.free(l.ptr);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.allocations, s.frees);
}

// Everything else a job does to a pool from other threads while LibTorch allocates: statistics,
// peaks, marks, emptying the cache, changing the budget, the trace. Run under ThreadSanitizer by
// scripts/test; here, the counts must agree and the trace must hold every event whole.
class PoolThreadsWithObserver : public ::testing::TestWithParam<std::size_t> {};

TEST_P(PoolThreadsWithObserver, StatisticsMarksReleasesAndBudgetChangesRaceWithAllocations) {
  const std::string path = ::testing::TempDir() + "/monet_threads_" + std::to_string(::getpid()) +
                           "_" + std::to_string(GetParam()) + ".trace";
  constexpr std::size_t kBudget = std::size_t{256} << 20;
  constexpr int kThreads = 3;
  constexpr int kSteps = 3000;
  std::atomic<int> refused{0};
  std::atomic<bool> done{false};
  MemoryStats s;
  {
    TraceWriter trace(path);
    HostBackend::Options options;
    options.granularity = GetParam();
    HostBackend backend(options);
    CachingAllocator pool(backend, CachingAllocator::Options{kBudget, &trace});
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&pool, &refused, t] {
        std::mt19937_64 rng(200 + t);
        std::vector<Live> live;
        for (int step = 0; step < kSteps; ++step) {
          if (live.empty() || std::uniform_int_distribution<int>(0, 1)(rng) == 0) {
            const std::size_t bytes = random_size(rng) / 4 + 1;
            try {
              Live l{static_cast<unsigned char*>(pool.allocate(bytes)), bytes,
                     static_cast<unsigned char>(t * 50 + step)};
              stamp(l);
              live.push_back(l);
            } catch (const OutOfMemoryError&) {
              ++refused;
            }
          } else {
            const std::size_t i =
                std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
            ASSERT_TRUE(intact(live[i])) << "thread " << t << " step " << step;
            pool.free(live[i].ptr);
            live[i] = live.back();
            live.pop_back();
          }
        }
        for (const Live& l : live) pool.free(l.ptr);
      });
    }
    std::thread observer([&pool, &done] {
      int round = 0;
      while (!done.load()) {
        const Mark m = pool.mark();
        const MemoryStats now = pool.stats();
        EXPECT_LE(now.allocated_bytes, now.reserved_bytes);
        EXPECT_GE(pool.peak_since(m), m.allocated_bytes);
        EXPECT_GE(pool.peak_requested_since(m), m.requested_bytes);
        switch (round++ % 4) {
          case 0:
            pool.reset_peaks();
            break;
          case 1:
            pool.release_cached();
            break;
          case 2:
            pool.set_budget_bytes(kBudget / 2);
            break;
          default:
            pool.set_budget_bytes(kBudget);
            break;
        }
        EXPECT_NE(pool.budget_bytes(), 0u);
        if (round % 64 == 0) pool.clear_marks();
      }
    });
    for (std::thread& t : threads) t.join();
    done = true;
    observer.join();
    EXPECT_THAT(pool.check_invariants(), IsEmpty());
    s = pool.stats();
    EXPECT_EQ(s.allocated_bytes, 0u);
    EXPECT_EQ(s.allocations, s.frees);
  }
  std::ifstream in(path);
  const std::vector<TraceEvent> events = read_trace(in);  // throws on a torn line
  const auto allocs = std::count_if(events.begin(), events.end(), [](const TraceEvent& e) {
    return e.op == TraceEvent::Op::kAlloc;
  });
  EXPECT_EQ(static_cast<std::uint64_t>(allocs), s.allocations);
  EXPECT_EQ(events.size(), 2 * s.allocations);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Granularity, PoolThreadsWithObserver,
                         ::testing::Values(std::size_t{0}, std::size_t{2} << 20));

}  // namespace
}  // namespace monet
