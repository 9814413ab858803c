#include "allocator/caching_allocator.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <vector>

#include "allocator/host_backend.h"
#include "allocator/size_rules.h"
#include "fake_backend.h"
#include "monet/errors.h"

namespace monet {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * 1024;

class PoolTest : public ::testing::Test {
 protected:
  void ExpectSound() { EXPECT_THAT(pool_.check_invariants(), IsEmpty()); }

  HostBackend backend_{testing::whole_segments()};
  CachingAllocator pool_{backend_, {}};
};

TEST_F(PoolTest, RoundsTo512AndAligns) {
  void* a = pool_.allocate(1);
  void* b = pool_.allocate(513);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 512, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 512, 0u);
  const MemoryStats s = pool_.stats();
  EXPECT_EQ(s.allocated_bytes, 512u + 1024u);
  EXPECT_EQ(s.requested_bytes, 1u + 513u);
  ExpectSound();
  pool_.free(a);
  pool_.free(b);
  ExpectSound();
}

TEST_F(PoolTest, ZeroBytesIsNullAndFreeOfNullIsIgnored) {
  EXPECT_EQ(pool_.allocate(0), nullptr);
  pool_.free(nullptr);
  EXPECT_EQ(pool_.stats().allocations, 0u);
}

// owns() is a block handed out and not taken back; holds() any byte of a segment, in use or
// cached: a pointer it holds and does not own was freed already (the preload's cudaFree refuses
// it).
TEST_F(PoolTest, HoldsEveryByteOfItsSegmentsAndOwnsOnlyWhatItHandedOut) {
  char* a = static_cast<char*>(pool_.allocate(4 * kMiB));
  EXPECT_TRUE(pool_.owns(a));
  EXPECT_FALSE(pool_.owns(a + 512));
  EXPECT_TRUE(pool_.holds(a));
  EXPECT_TRUE(pool_.holds(a + 4 * kMiB - 1));
  pool_.free(a);
  EXPECT_FALSE(pool_.owns(a));
  EXPECT_TRUE(pool_.holds(a));  // cached
  int elsewhere = 0;
  EXPECT_FALSE(pool_.holds(&elsewhere));
  EXPECT_FALSE(pool_.holds(nullptr));
  pool_.release_cached();
  EXPECT_FALSE(pool_.holds(a));
}

// A size_t of -1 (a caller's negative size) or any size no address space holds is refused as
// out of memory, as cudaMalloc refuses it, before its rounding could wrap around.
TEST(PoolBudget, ASizeBeyondAnyAddressSpaceIsOutOfMemory) {
  HostBackend backend(testing::whole_segments(/*capacity=*/0, /*backed=*/false));
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  void* a = pool.allocate(kKiB);
  for (std::size_t bytes : {SIZE_MAX, SIZE_MAX - 600, (std::size_t{1} << 62) + 1}) {
    SCOPED_TRACE(bytes);
    try {
      pool.allocate(bytes);
      FAIL() << "allocated";
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.requested_bytes, bytes);
      EXPECT_THAT(e.what(), Not(HasSubstr("in pieces")));
    }
  }
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.out_of_memory, 3u);
  EXPECT_EQ(s.out_of_memory_in_pieces, 0u);
  EXPECT_EQ(s.allocated_bytes, kKiB);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  pool.free(a);
  EXPECT_NE(pool.allocate(kMiB), nullptr);  // the pool goes on serving
}

TEST_F(PoolTest, SmallRequestsShareOneSmallSegment) {
  void* a = pool_.allocate(100 * kKiB);
  void* b = pool_.allocate(200 * kKiB);
  const MemoryStats s = pool_.stats();
  EXPECT_EQ(s.reserved_bytes, size_rules::kSmallSegment);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.cache_hits, 1u);  // b came from the segment a's request reserved
  EXPECT_EQ(static_cast<char*>(b), static_cast<char*>(a) + 100 * kKiB);
  pool_.free(a);
  pool_.free(b);
  ExpectSound();
}

TEST_F(PoolTest, SegmentSizesFollowTheRules) {
  void* mid = pool_.allocate(3 * kMiB);  // 1 MiB < size < 10 MiB: a 20 MiB segment
  EXPECT_EQ(pool_.stats().reserved_bytes, 20 * kMiB);
  void* fits = pool_.allocate(11 * kMiB);  // from the 17 MiB left of that segment
  EXPECT_EQ(pool_.stats().reserved_bytes, 20 * kMiB);
  void* big = pool_.allocate(25 * kMiB);  // own segment, rounded up to 2 MiB
  EXPECT_EQ(pool_.stats().reserved_bytes, 20 * kMiB + 26 * kMiB);
  pool_.free(fits);
  pool_.free(mid);
  pool_.free(big);
  ExpectSound();
}

TEST_F(PoolTest, LargePoolKeepsSmallTailsAttached) {
  void* a = pool_.allocate(11 * kMiB + 512 * kKiB);  // segment of 12 MiB, tail of 512 KiB
  MemoryStats s = pool_.stats();
  EXPECT_EQ(s.allocated_bytes, 12 * kMiB);  // the tail stays with the block
  EXPECT_EQ(s.free_blocks, 0u);
  pool_.free(a);
  void* b = pool_.allocate(5 * kMiB);  // the freed 12 MiB block splits: 7 MiB tail > 1 MiB
  s = pool_.stats();
  EXPECT_EQ(s.allocated_bytes, 5 * kMiB);
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(s.largest_free_bytes, 7 * kMiB);
  pool_.free(b);
  ExpectSound();
}

TEST_F(PoolTest, FreedNeighboursMerge) {
  char* a = static_cast<char*>(pool_.allocate(4 * kKiB));
  char* b = static_cast<char*>(pool_.allocate(4 * kKiB));
  char* c = static_cast<char*>(pool_.allocate(4 * kKiB));
  ASSERT_EQ(b, a + 4 * kKiB);
  ASSERT_EQ(c, b + 4 * kKiB);
  pool_.free(b);
  ExpectSound();
  EXPECT_EQ(pool_.stats().free_blocks, 2u);  // b, and the rest of the segment after c
  pool_.free(a);
  ExpectSound();
  EXPECT_EQ(pool_.stats().free_blocks, 2u);  // a+b merged
  EXPECT_EQ(pool_.stats().largest_free_bytes, size_rules::kSmallSegment - 12 * kKiB);
  pool_.free(c);
  ExpectSound();
  const MemoryStats s = pool_.stats();
  EXPECT_EQ(s.free_blocks, 1u);  // the whole segment again
  EXPECT_EQ(s.largest_free_bytes, size_rules::kSmallSegment);
}

TEST_F(PoolTest, BestFitPicksTheSmallestBlockThatFits) {
  char* a = static_cast<char*>(pool_.allocate(64 * kKiB));
  char* gap1 = static_cast<char*>(pool_.allocate(8 * kKiB));
  char* b = static_cast<char*>(pool_.allocate(16 * kKiB));
  char* gap2 = static_cast<char*>(pool_.allocate(8 * kKiB));
  pool_.free(a);
  pool_.free(b);
  char* c = static_cast<char*>(pool_.allocate(12 * kKiB));
  EXPECT_EQ(c, b);  // the 16 KiB hole, not the 64 KiB one
  for (void* p : {static_cast<void*>(gap1), static_cast<void*>(gap2), static_cast<void*>(c)}) {
    pool_.free(p);
  }
  ExpectSound();
}

TEST_F(PoolTest, StatsCountEverything) {
  void* a = pool_.allocate(1000);
  void* b = pool_.allocate(30 * kMiB);
  pool_.free(a);
  void* c = pool_.allocate(1000);
  MemoryStats s = pool_.stats();
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.frees, 1u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.segment_reserves, 2u);
  EXPECT_EQ(s.active_blocks, 2u);
  EXPECT_EQ(s.peak_allocated_bytes, 1024u + 30 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 2 * kMiB + 30 * kMiB);
  pool_.free(b);
  pool_.free(c);
  EXPECT_EQ(pool_.release_cached(), 32 * kMiB);
  s = pool_.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.segment_releases, 2u);
  EXPECT_EQ(s.peak_reserved_bytes, 32 * kMiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 1.0 - (1024.0 + 30.0 * kMiB) / (32.0 * kMiB));
  pool_.reset_peaks();
  EXPECT_EQ(pool_.stats().peak_reserved_bytes, 0u);
  ExpectSound();
}

// A block that a pending event frees while the pool waits for room is served from the cache.
TEST(PoolStats, ABlockFreedByAnEventTheBudgetWaitedForIsACacheHit) {
  testing::ManualEventBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{20 * kMiB, nullptr});
  void* a = pool.allocate(18 * kMiB, 1);
  pool.record_stream(a, 2);
  pool.free(a);
  void* b = pool.allocate(18 * kMiB, 1);
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.segment_reserves, 1u);
  EXPECT_EQ(s.cache_hits, 1u);
  pool.free(b);
}

// A backend that cannot record a stream's event (a CUDA error) fails the free with nothing changed:
// the block stays handed out, the events recorded for it are destroyed, and a second free works.
TEST(PoolStreams, AnEventThatCannotBeRecordedFailsTheFreeWithNothingChanged) {
  struct FailingSecondEvent : testing::ManualEventBackend {
    using ManualEventBackend::ManualEventBackend;
    Event record_event(Stream s) override {
      if (fail && recorded() == 1) {
        fail = false;
        throw std::runtime_error("cudaEventRecord failed (test)");
      }
      return ManualEventBackend::record_event(s);
    }
    bool fail = true;
  };
  FailingSecondEvent backend(testing::whole_segments());
  CachingAllocator pool(backend, {});
  void* a = pool.allocate(kMiB, 1);
  pool.record_stream(a, 2);
  pool.record_stream(a, 3);
  EXPECT_THROW(pool.free(a), std::runtime_error);
  EXPECT_TRUE(pool.owns(a));
  EXPECT_EQ(backend.destroyed(), 1) << "the event recorded before the error";
  EXPECT_EQ(pool.stats().frees, 0u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  pool.free(a);
  backend.complete_all();
  void* b = pool.allocate(kMiB, 1);
  EXPECT_EQ(b, a) << "the block came back once its events completed";
  pool.free(b);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

// A request refused after a cached block was found for it is no hit: nothing was served.
TEST(PoolStats, ARefusedRequestIsNoCacheHit) {
  HostBackend backend;  // 2 MiB granules
  CachingAllocator pool(backend, CachingAllocator::Options{8 * kMiB, nullptr});
  void* a = pool.allocate(6 * kMiB);  // a 20 MiB segment, 6 MiB of it committed
  // The segment's free 14 MiB hold the request, but committing 4 more MiB would pass the budget.
  EXPECT_THROW(pool.allocate(4 * kMiB), OutOfMemoryError);
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.cache_hits, 0u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  pool.free(a);
}

// A pool whose backend broke its promise of 512-byte alignment: check_invariants names the
// block by its address, without reading the memory there (here it cannot be read at all).
TEST(PoolInvariants, AViolationNamesTheBlockByItsAddress) {
  class MisalignedBackend : public HostBackend {
   public:
    MisalignedBackend() : HostBackend(testing::whole_segments(0, /*backed=*/false)) {}
    void* reserve(std::size_t bytes) override {
      void* p = HostBackend::reserve(bytes + 512);
      return p == nullptr ? nullptr : static_cast<char*>(p) + 256;
    }
    void release(void* segment, std::size_t bytes) override {
      HostBackend::release(static_cast<char*>(segment) - 256, bytes + 512);
    }
  };
  MisalignedBackend backend;
  CachingAllocator pool(backend, {});
  void* a = pool.allocate(1000);
  EXPECT_THAT(pool.check_invariants(),
              Contains(fmt::format("block {} of 1024 bytes is not 512-byte aligned", a)));
  pool.free(a);
}

// The index of allocated blocks has power-of-two buckets, indexed by the hash's low bits. Blocks
// at 2 MiB boundaries (large blocks at the start of cudaMalloc's segments) must not share one
// bucket: each free would walk every such block in use.
TEST(PoolIndex, BlocksAtTwoMiBBoundariesSpreadOverTheBuckets) {
  constexpr std::size_t kBuckets = 1024;
  std::set<std::size_t> used;
  for (std::uintptr_t i = 0; i < kBuckets; ++i) {
    const auto address =
        reinterpret_cast<const char*>(std::uintptr_t{0x7f0000000000} + i * 2 * kMiB);
    used.insert(AddressHash()(address) & (kBuckets - 1));
  }
  EXPECT_GT(used.size(), kBuckets / 2);
}

TEST_F(PoolTest, ReleaseKeepsSegmentsInUse) {
  void* a = pool_.allocate(1000);
  void* big = pool_.allocate(40 * kMiB);
  pool_.free(big);
  EXPECT_EQ(pool_.release_cached(), 40 * kMiB);
  EXPECT_EQ(pool_.stats().reserved_bytes, 2 * kMiB);
  pool_.free(a);
  ExpectSound();
}

TEST_F(PoolTest, FreeOfAForeignPointerSaysSo) {
  int local = 0;
  EXPECT_THROW(pool_.free(&local), std::invalid_argument);
  void* a = pool_.allocate(10);
  pool_.free(a);
  try {
    pool_.free(a);
    FAIL() << "double free not detected";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("did not hand out or already took back"));
  }
}

TEST_F(PoolTest, StreamsDoNotShareBlocks) {
  void* a = pool_.allocate(4 * kKiB, /*stream=*/1);
  pool_.free(a);
  void* b = pool_.allocate(4 * kKiB, /*stream=*/2);
  EXPECT_NE(a, b);
  EXPECT_EQ(pool_.stats().segments, 2u);
  void* c = pool_.allocate(4 * kKiB, /*stream=*/1);
  EXPECT_EQ(a, c);
  pool_.free(b);
  pool_.free(c);
  ExpectSound();
}

TEST(PoolStreams, BlockUsedOnAnotherStreamWaitsForItsEvent) {
  testing::ManualEventBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, {});
  void* a = pool.allocate(8 * kKiB, /*stream=*/1);
  pool.record_stream(a, /*stream=*/2);
  pool.record_stream(a, /*stream=*/2);  // recorded once
  pool.record_stream(a, /*stream=*/1);  // its own stream: nothing to wait for
  pool.free(a);
  EXPECT_EQ(backend.recorded(), 1);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());

  void* b = pool.allocate(8 * kKiB, /*stream=*/1);
  EXPECT_NE(a, b) << "reused while stream 2 may still use it";
  backend.complete_all();
  void* c = pool.allocate(8 * kKiB, /*stream=*/1);
  EXPECT_EQ(a, c) << "not reused after its event completed";
  EXPECT_EQ(backend.destroyed(), 1);
  pool.free(b);
  pool.free(c);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

TEST(PoolStreams, BudgetPressureWaitsForPendingBlocks) {
  testing::ManualEventBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{20 * kMiB, nullptr});
  void* a = pool.allocate(18 * kMiB, 1);  // own 18 MiB segment
  pool.record_stream(a, 2);
  pool.free(a);
  // Only the pending block can hold this; the pool must wait for its event rather than fail.
  void* b = pool.allocate(18 * kMiB, 1);
  EXPECT_EQ(a, b);
  EXPECT_EQ(backend.waited(), 1);
  pool.free(b);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

TEST(PoolBudget, ReservedNeverExceedsBudget) {
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{30 * kMiB, nullptr});
  void* a = pool.allocate(4 * kMiB);  // 20 MiB segment
  void* b = pool.allocate(4 * kMiB);  // same segment
  void* c = pool.allocate(4 * kMiB);  // same segment (12 of 20 MiB used)
  void* d = pool.allocate(9 * kMiB);  // 20 MiB would exceed 30: an exact 9 MiB segment instead
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 29 * kMiB);
  EXPECT_LE(s.peak_reserved_bytes, 30 * kMiB);
  for (void* p : {a, b, c, d}) pool.free(p);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

TEST(PoolBudget, CachedSegmentsAreReleasedBeforeFailing) {
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{40 * kMiB, nullptr});
  void* a = pool.allocate(30 * kMiB);
  pool.free(a);                        // cached: 30 MiB reserved, nothing in use
  void* b = pool.allocate(36 * kMiB);  // needs the 30 MiB released first
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 36 * kMiB);
  EXPECT_EQ(s.cache_flushes, 1u);
  EXPECT_EQ(s.segment_releases, 1u);
  pool.free(b);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

TEST(PoolBudget, OnlyTheCachedSegmentsTheBudgetNeedsAreReleased) {
  // Whole segments under an 80 MiB budget: 30 and 14 MiB cached, 20 in use. A 32 MiB request
  // needs 16 MiB of room: the smallest cached segment large enough alone (30) goes, the 14 stays
  // for the request that wants it next.
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{80 * kMiB, nullptr});
  void* a = pool.allocate(30 * kMiB);
  void* b = pool.allocate(14 * kMiB);
  void* c = pool.allocate(20 * kMiB);
  pool.free(a);
  pool.free(b);
  void* d = pool.allocate(32 * kMiB);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 66 * kMiB);
  EXPECT_EQ(s.segment_releases, 1u);
  EXPECT_EQ(s.cache_flushes, 1u);
  void* e = pool.allocate(14 * kMiB);  // the cached 14 MiB segment, no new one
  EXPECT_EQ(pool.stats().segment_reserves, s.segment_reserves);
  for (void* p : {c, d, e}) pool.free(p);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

TEST(PoolBudget, WhereNoCachedSegmentIsEnoughTheLargestGoFirst) {
  // 10, 12 and 14 MiB cached, 20 in use, a 60 MiB budget: a 30 MiB request needs 26 MiB of room,
  // which the 14 and the 12 make; the 10 stays.
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{60 * kMiB, nullptr});
  void* cached[] = {pool.allocate(10 * kMiB), pool.allocate(12 * kMiB), pool.allocate(14 * kMiB)};
  void* c = pool.allocate(20 * kMiB);
  for (void* p : cached) pool.free(p);
  void* d = pool.allocate(30 * kMiB);
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 60 * kMiB);
  EXPECT_EQ(s.segment_releases, 2u);
  EXPECT_EQ(s.largest_free_bytes, 10 * kMiB);
  for (void* p : {c, d}) pool.free(p);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

TEST(PoolBudget, OutOfMemoryNamesTheNumbersAndTheKnob) {
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  void* a = pool.allocate(50 * kMiB);
  try {
    pool.allocate(20 * kMiB);
    FAIL() << "allocation over the budget succeeded";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("tried to allocate 20.00 MiB"));
    EXPECT_THAT(m, HasSubstr("50.00 MiB allocated"));
    EXPECT_THAT(m, HasSubstr("50.00 MiB reserved"));
    EXPECT_THAT(m, HasSubstr("64.00 MiB budget"));
    EXPECT_THAT(m, HasSubstr("largest free block 0 B"));
    EXPECT_THAT(m, HasSubstr("MONET_BUDGET"));
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
    EXPECT_EQ(e.requested_bytes, 20 * kMiB);
    EXPECT_EQ(e.budget_bytes, 64 * kMiB);
    EXPECT_THAT(m, Not(HasSubstr("in pieces"))) << "50 MiB in use and 20 more pass the budget";
  }
  EXPECT_EQ(pool.stats().out_of_memory, 1u);
  EXPECT_EQ(pool.stats().out_of_memory_in_pieces, 0u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  pool.free(a);
}

// The CPU pool beside a GPU takes its budget from MONET_CPU_BUDGET: its refusals name that knob,
// not MONET_BUDGET, which caps the GPU.
TEST(PoolBudget, OutOfMemoryNamesTheKnobTheBudgetCameFrom) {
  for (const std::size_t capacity : {std::size_t{0}, 32 * kMiB}) {
    SCOPED_TRACE(capacity);
    HostBackend backend(testing::whole_segments(capacity, /*backed=*/false));
    CachingAllocator pool(backend,
                          CachingAllocator::Options{64 * kMiB, nullptr, "MONET_CPU_BUDGET"});
    try {
      pool.allocate(40 * kMiB);
      pool.allocate(40 * kMiB);
      FAIL() << "80 MiB under a 64 MiB budget";
    } catch (const OutOfMemoryError& e) {
      const std::string m = e.what();
      EXPECT_THAT(m, HasSubstr("64.00 MiB budget (MONET_CPU_BUDGET)"));
      EXPECT_THAT(m,
                  HasSubstr(capacity == 0 ? "Raise MONET_CPU_BUDGET" : "lower MONET_CPU_BUDGET"));
      EXPECT_THAT(m, Not(HasSubstr("MONET_BUDGET")));
    }
    pool.release_cached();
  }
}

TEST(PoolBudget, OutOfMemoryWithRoomInTheBudgetSaysTheFreeMemoryIsInPieces) {
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  // A 40 MiB segment, then 15 MiB of it in use: a 25 MiB hole that cannot be given back.
  pool.free(pool.allocate(40 * kMiB));
  void* a = pool.allocate(15 * kMiB);
  ASSERT_EQ(pool.stats().reserved_bytes, 40 * kMiB);
  // 15 + 30 MiB fit the 64 MiB budget, but neither the hole nor a new segment beside it holds 30.
  try {
    pool.allocate(30 * kMiB);
    FAIL() << "a 30 MiB segment beside 40 MiB held fitted a 64 MiB budget";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("largest free block 25.00 MiB"));
    EXPECT_THAT(m, HasSubstr("the budget has room for it, but its free memory is in pieces"));
    EXPECT_THAT(m, HasSubstr("MONET_CUDA_SEGMENTS=expandable"));
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
  }
  EXPECT_EQ(pool.stats().out_of_memory, 1u);
  EXPECT_EQ(pool.stats().out_of_memory_in_pieces, 1u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  pool.free(a);
}

// Committed by granule, a budget with room for a request's bytes but not for one granule refuses
// it for the granule, which the message says; its free memory is not in pieces.
TEST(PoolBudget, ABudgetOfLessThanAGranuleSaysSoNotInPieces) {
  HostBackend::Options device = testing::whole_segments(0, /*backed=*/false);
  device.granularity = 2 * kMiB;
  HostBackend backend(device);
  CachingAllocator pool(backend, CachingAllocator::Options{1 * kMiB, nullptr});
  try {
    pool.allocate(4096);
    FAIL() << "a 2 MiB granule under a 1 MiB budget";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_THAT(m, HasSubstr("the budget has room for its bytes, but not for the 2.00 MiB "
                             "granules memory is committed in"));
    EXPECT_THAT(m, HasSubstr("Raise MONET_BUDGET"));
    EXPECT_THAT(m, Not(HasSubstr("in pieces")));
  }
  EXPECT_EQ(pool.stats().out_of_memory, 1u);
  EXPECT_EQ(pool.stats().out_of_memory_in_pieces, 0u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

// A device with less room than the budget (memory held outside monet, or a budget above the
// device): the message says the device refused, not the budget, and not how free memory lies.
TEST(PoolBudget, OutOfMemoryWhereTheDeviceHasNoRoomSaysSo) {
  for (const std::size_t granularity : {std::size_t{0}, 2 * kMiB}) {
    SCOPED_TRACE(granularity);
    HostBackend::Options device = testing::whole_segments(32 * kMiB, /*backed=*/false);
    device.granularity = granularity;
    HostBackend backend(device);
    CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
    try {
      pool.allocate(40 * kMiB);
      FAIL() << "40 MiB on a device of 32";
    } catch (const OutOfMemoryError& e) {
      const std::string m = e.what();
      EXPECT_THAT(m, HasSubstr("the budget has room for it, but the device (32.00 MiB in all) does "
                               "not, even with monet's cache given back"));
      EXPECT_THAT(m, HasSubstr("lower MONET_BUDGET to what the device has free"));
      EXPECT_THAT(m, Not(HasSubstr("in pieces")));
      EXPECT_THAT(m, Not(HasSubstr("Raise MONET_BUDGET")));
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
    }
    EXPECT_EQ(pool.stats().out_of_memory, 1u);
    EXPECT_EQ(pool.stats().out_of_memory_in_pieces, 0u);
    EXPECT_THAT(pool.check_invariants(), IsEmpty());
  }
  // Without a budget the device is all there is to refuse.
  HostBackend backend(testing::whole_segments(32 * kMiB, /*backed=*/false));
  CachingAllocator pool(backend, {});
  try {
    pool.allocate(40 * kMiB);
    FAIL() << "40 MiB on a device of 32";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the device has no room for it"));
    EXPECT_THAT(e.what(), Not(HasSubstr("MONET_BUDGET")));
  }
}

TEST(PoolBudget, SimulatedDeviceCapacityIsHonoured) {
  HostBackend backend(testing::whole_segments(24 * kMiB, /*backed=*/false));
  CachingAllocator pool(backend, {});
  void* a = pool.allocate(16 * kMiB);
  EXPECT_THROW(pool.allocate(16 * kMiB), OutOfMemoryError);
  pool.free(a);
  void* b = pool.allocate(16 * kMiB);  // the cached segment serves it
  EXPECT_EQ(a, b);
  pool.free(b);
  EXPECT_EQ(backend.held_bytes(), 16 * kMiB);
}

TEST(PoolBudget, LoweringTheBudgetReleasesCache) {
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, CachingAllocator::Options{100 * kMiB, nullptr});
  void* a = pool.allocate(60 * kMiB);
  pool.free(a);
  pool.set_budget_bytes(50 * kMiB);
  EXPECT_EQ(pool.stats().reserved_bytes, 0u);
  EXPECT_EQ(pool.stats().budget_bytes, 50 * kMiB);
  EXPECT_THROW(pool.allocate(60 * kMiB), OutOfMemoryError);
}

TEST(PoolMarks, PeakSinceAMark) {
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, {});
  void* base = pool.allocate(1 * kMiB);
  const Mark m1 = pool.mark();
  EXPECT_EQ(m1.allocated_bytes, 1 * kMiB);
  void* t = pool.allocate(3 * kMiB);
  pool.free(t);
  const Mark m2 = pool.mark();
  void* u = pool.allocate(2 * kMiB);
  EXPECT_EQ(pool.peak_since(m1), 4 * kMiB);
  EXPECT_EQ(pool.peak_since(m2), 3 * kMiB);
  pool.free(u);
  pool.clear_marks();
  EXPECT_THROW(pool.peak_since(m2), std::out_of_range);
  pool.free(base);
}

TEST(PoolMarks, RequestedPeakCountsExactSizes) {
  HostBackend backend(testing::whole_segments());
  CachingAllocator pool(backend, {});
  void* base = pool.allocate(1000);  // a 1024-byte block
  const Mark m = pool.mark();
  EXPECT_EQ(m.requested_bytes, 1000u);
  void* t = pool.allocate(3000);
  pool.free(t);
  void* u = pool.allocate(100);
  EXPECT_EQ(pool.peak_requested_since(m), 4000u);
  EXPECT_EQ(pool.peak_since(m), 1024u + 3072u);
  pool.free(u);
  pool.free(base);
}

}  // namespace
}  // namespace monet

namespace monet {
namespace {

// Over a backend that commits by granule (2 MiB here), reserved bytes are committed bytes.
class GranularPoolTest : public ::testing::Test {
 protected:
  HostBackend backend_;  // 2 MiB granules by default
  CachingAllocator pool_{backend_, {}};
};

TEST_F(GranularPoolTest, OnlyTheGranulesOfHandedOutBlocksCount) {
  void* a = pool_.allocate(3 * kMiB);  // a 20 MiB segment of address space, 2 granules committed
  MemoryStats s = pool_.stats();
  EXPECT_EQ(s.reserved_bytes, 4 * kMiB);
  EXPECT_EQ(backend_.held_bytes(), 4 * kMiB);
  void* b = pool_.allocate(3 * kMiB);  // shares the second granule with a
  s = pool_.stats();
  EXPECT_EQ(s.reserved_bytes, 6 * kMiB);
  EXPECT_THAT(pool_.check_invariants(), IsEmpty());
  pool_.free(a);
  pool_.free(b);
  EXPECT_EQ(pool_.stats().reserved_bytes, 6 * kMiB);  // cached, still committed
  EXPECT_EQ(pool_.release_cached(), 6 * kMiB);
  EXPECT_EQ(pool_.stats().reserved_bytes, 0u);
  EXPECT_EQ(backend_.held_bytes(), 0u);
  EXPECT_THAT(pool_.check_invariants(), IsEmpty());
}

TEST_F(GranularPoolTest, FreeHolesAreGivenBackBeforeTheReservationGrows) {
  // Two 8 MiB blocks, then the first is freed: its granules are a cached hole. A 12 MiB request
  // does not fit the hole; rather than raise the reservation past its high-water mark (16 MiB),
  // the pool gives the hole's granules back first.
  void* a = pool_.allocate(8 * kMiB);
  void* b = pool_.allocate(8 * kMiB);
  EXPECT_EQ(pool_.stats().reserved_bytes, 16 * kMiB);
  pool_.free(a);
  void* c = pool_.allocate(12 * kMiB);
  MemoryStats s = pool_.stats();
  EXPECT_EQ(s.allocated_bytes, 20 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 20 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 20 * kMiB);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  // The totals count the churn: a's 8 MiB went back and 12 MiB came, after the first 16.
  EXPECT_EQ(s.committed_bytes_total, 28 * kMiB);
  EXPECT_EQ(s.decommitted_bytes_total, 8 * kMiB);
  EXPECT_THAT(format_stats(s), HasSubstr("committed, in all"));
  EXPECT_THAT(pool_.check_invariants(), IsEmpty());
  pool_.free(b);
  pool_.free(c);
}

TEST_F(GranularPoolTest, GranulesGivenBackAndWantedAgainRaiseTheMark) {
  // A training step whose blocks land on more granules than its peak in use, repeated: the mark
  // rises by a quarter of what each step commits again after giving it back, until the step's
  // granules all stay committed. Before, the reservation stayed at the first step's peak and every
  // step gave back and committed the same 8 MiB again (on the host, page faults; on CUDA, waits).
  std::size_t decommitted_after_eighth = 0, committed_after_eighth = 0;
  for (int step = 0; step < 12; ++step) {
    void* a = pool_.allocate(12 * kMiB);
    pool_.free(a);
    void* b = pool_.allocate(1 * kMiB);
    void* c = pool_.allocate(9 * kMiB);
    pool_.free(b);
    void* d = pool_.allocate(10 * kMiB);
    pool_.free(c);
    pool_.free(d);
    const MemoryStats s = pool_.stats();
    if (step == 0) {
      EXPECT_GT(s.decommitted_bytes_total, 0u);  // the first step stays tight
    }
    if (step == 7) {
      decommitted_after_eighth = s.decommitted_bytes_total;
      committed_after_eighth = s.committed_bytes_total;
    }
    if (step > 7) {
      EXPECT_EQ(s.decommitted_bytes_total, decommitted_after_eighth) << "step " << step;
      EXPECT_EQ(s.committed_bytes_total, committed_after_eighth) << "step " << step;
    }
    EXPECT_LE(s.reserved_bytes, 32 * kMiB);  // never past every block of the step at once
    EXPECT_THAT(pool_.check_invariants(), IsEmpty());
  }
}

// A host backend whose commit, decommit or release fails at a chosen call (counted from 0), as a
// CUDA mapping call may: a backend error partway must leave the pool's statistics as the backend
// left its memory.
struct FailingBackend : HostBackend {
  using HostBackend::HostBackend;
  bool commit(void* ptr, std::size_t bytes) override {
    if (commits++ == commit_fails_at) throw std::runtime_error("cuMemMap failed (test)");
    return HostBackend::commit(ptr, bytes);
  }
  void decommit(void* ptr, std::size_t bytes) override {
    if (decommits++ == decommit_fails_at) throw std::runtime_error("cuMemUnmap failed (test)");
    HostBackend::decommit(ptr, bytes);
  }
  void release(void* segment, std::size_t bytes) override {
    if (releases++ == release_fails_at) throw std::runtime_error("cuMemAddressFree failed (test)");
    HostBackend::release(segment, bytes);
  }
  int commits = 0, decommits = 0, releases = 0;
  int commit_fails_at = -1, decommit_fails_at = -1, release_fails_at = -1;
};

// Five 4 MiB blocks in one 20 MiB segment, the first and third freed and their holes given back:
// a free block on each side of the second.
std::vector<void*> two_holes_given_back(CachingAllocator& pool) {
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(pool.allocate(4 * kMiB));
  pool.free(blocks[0]);
  pool.free(blocks[2]);
  pool.release_cached();
  return blocks;
}

// A block over two uncommitted runs (the holes either side of a freed middle) whose second commit
// fails: the allocation fails, the first run stays committed and counted, and the peaks are never
// below what is reserved.
TEST(PoolGranules, ACommitThatFailsAtItsSecondRunKeepsThePeaksAboveWhatIsReserved) {
  FailingBackend backend;  // 2 MiB granules
  CachingAllocator pool(backend, {});
  std::vector<void*> blocks = two_holes_given_back(pool);
  pool.free(blocks[1]);  // one free block of 12 MiB: 4 uncommitted, 4 committed, 4 uncommitted
  pool.reset_peaks();
  backend.commit_fails_at = backend.commits + 1;
  EXPECT_THROW(pool.allocate(12 * kMiB), std::runtime_error);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  EXPECT_EQ(pool.stats().reserved_bytes, backend.held_bytes());
  EXPECT_EQ(pool.stats().reserved_bytes, 16 * kMiB) << "the first run, committed before the error";
  void* a = pool.allocate(12 * kMiB);
  EXPECT_EQ(pool.stats().reserved_bytes, 20 * kMiB);
  pool.free(a);
  for (int i : {3, 4}) pool.free(blocks[i]);
  pool.release_cached();
  EXPECT_EQ(pool.stats().segments, 0u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

// A give-back whose second run fails, in another hole or in the same free block: what the backend
// gave back before the error counts as given back (bytes, and the one decommit it waited for), the
// rest as still committed, and a later give-back takes the rest.
TEST(PoolGranules, AGiveBackThatFailsAtItsSecondRunCountsTheFirst) {
  FailingBackend backend;
  CachingAllocator pool(backend, {});
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(pool.allocate(4 * kMiB));
  pool.free(blocks[0]);
  pool.free(blocks[2]);
  backend.decommit_fails_at = backend.decommits + 1;  // the second hole
  EXPECT_THROW(pool.release_cached(), std::runtime_error);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  EXPECT_EQ(pool.stats().reserved_bytes, backend.held_bytes());
  EXPECT_EQ(pool.stats().reserved_bytes, 16 * kMiB);
  EXPECT_EQ(pool.stats().decommits, 1u);
  EXPECT_EQ(pool.release_cached(), 4 * kMiB);
  EXPECT_EQ(pool.stats().reserved_bytes, backend.held_bytes());
  // One free block of 20 MiB whose committed granules are two runs, the second refused.
  for (int i : {1, 3, 4}) pool.free(blocks[i]);
  backend.decommit_fails_at = backend.decommits + 1;
  EXPECT_THROW(pool.release_cached(), std::runtime_error);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  EXPECT_EQ(pool.stats().reserved_bytes, backend.held_bytes());
  EXPECT_EQ(pool.stats().reserved_bytes, 8 * kMiB);
  EXPECT_EQ(pool.stats().decommits, 3u);
  pool.release_cached();
  EXPECT_EQ(pool.stats().segments, 0u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

// A segment the backend fails to release stays the pool's, whole and cached: its free block in
// its free set (it was taken out first, and a second release then erased a block no set held),
// and the next release gives it back.
TEST(PoolGranules, ASegmentTheBackendFailsToReleaseStaysCached) {
  for (std::size_t granularity : {std::size_t{0}, 2 * kMiB}) {
    SCOPED_TRACE(granularity == 0 ? "whole segments" : "committed by granule");
    HostBackend::Options options;
    options.granularity = granularity;
    FailingBackend backend(options);
    CachingAllocator pool(backend, {});
    pool.free(pool.allocate(8 * kMiB));
    const std::size_t reserved = pool.stats().reserved_bytes;
    backend.release_fails_at = backend.releases;
    EXPECT_THROW(pool.release_cached(), std::runtime_error);
    EXPECT_THAT(pool.check_invariants(), IsEmpty());
    EXPECT_EQ(pool.stats().segments, 1u);
    EXPECT_EQ(pool.stats().reserved_bytes, granularity == 0 ? reserved : 0u);
    EXPECT_EQ(pool.stats().reserved_bytes, backend.held_bytes());
    pool.release_cached();
    EXPECT_EQ(pool.stats().segments, 0u);
    EXPECT_EQ(pool.stats().reserved_bytes, 0u);
    EXPECT_THAT(pool.check_invariants(), IsEmpty());
    void* a = pool.allocate(8 * kMiB);  // served from a new segment
    pool.free(a);
  }
}

// Each give-back that MemoryStats::decommits counts is one wait for the device, as the CUDA
// backend waits: before its first decommit outside a hold, or the first within one. Emptying the
// cache, lowering the budget and releasing whole segments with several holes each wait once.
TEST(PoolGranules, EveryDecommitCountedIsOneWaitForTheDevice) {
  struct CountingWaits : HostBackend {
    void decommit(void* ptr, std::size_t bytes) override {
      if (!synchronized) ++waits;
      synchronized = holding;
      HostBackend::decommit(ptr, bytes);
    }
    void hold_decommitted(bool hold) override {
      holding = hold;
      synchronized = false;
    }
    bool holding = false, synchronized = false;
    std::uint64_t waits = 0;
  };
  CountingWaits backend;  // 2 MiB granules
  CachingAllocator pool(backend, {});
  const auto five_with_three_holes = [&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 5; ++i) blocks.push_back(pool.allocate(4 * kMiB));  // one 20 MiB segment
    for (int i : {0, 2, 4}) pool.free(blocks[i]);
    return blocks;
  };
  std::vector<void*> blocks = five_with_three_holes();
  pool.release_cached();  // three holes given back at once
  EXPECT_EQ(pool.stats().decommits, 1u);
  EXPECT_EQ(backend.waits, pool.stats().decommits);
  for (int i : {1, 3}) pool.free(blocks[i]);
  pool.release_cached();
  blocks = five_with_three_holes();
  pool.set_budget_bytes(10 * kMiB);  // lower than reserved: the holes go back at once
  EXPECT_EQ(backend.waits, pool.stats().decommits);
  for (int i : {1, 3}) pool.free(blocks[i]);
  pool.set_budget_bytes(0);
  blocks = five_with_three_holes();
  for (int i : {1, 3}) pool.free(blocks[i]);
  std::vector<void*> more;
  for (int i = 0; i < 3; ++i) more.push_back(pool.allocate(4 * kMiB));
  pool.free(more[1]);  // a wholly free segment of 20 MiB with holes: released in one wait
  pool.free(more[0]);
  pool.free(more[2]);
  pool.release_cached();
  EXPECT_EQ(pool.stats().segments, 0u);
  EXPECT_EQ(backend.waits, pool.stats().decommits);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
}

TEST_F(GranularPoolTest, OnlyWhatTheCommitNeedsIsGivenBack) {
  // A 20 MiB segment holds a and b; c has a 12 MiB segment of its own. With a and c freed, 28 MiB
  // are committed (the high-water mark), 20 of them in cached holes.
  void* a = pool_.allocate(8 * kMiB);
  void* b = pool_.allocate(8 * kMiB);
  void* c = pool_.allocate(12 * kMiB);
  pool_.free(a);
  pool_.free(c);
  EXPECT_EQ(pool_.stats().reserved_bytes, 28 * kMiB);
  // d fits no free block: a new 14 MiB segment, 14 MiB past the mark, so the pool gives back 14
  // MiB of the largest holes (c's 12, then the last 2 of a's hole), not every hole, at once.
  void* d = pool_.allocate(14 * kMiB);
  MemoryStats s = pool_.stats();
  EXPECT_EQ(s.reserved_bytes, 28 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 28 * kMiB);
  EXPECT_EQ(s.decommitted_bytes_total, 14 * kMiB);
  EXPECT_EQ(s.decommits, 1u);
  EXPECT_EQ(backend_.held_bytes(), 28 * kMiB);
  // What stayed committed of a's hole, its start, serves the next block without committing.
  void* e = pool_.allocate(6 * kMiB);
  s = pool_.stats();
  EXPECT_EQ(s.allocated_bytes, 28 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 28 * kMiB);
  EXPECT_EQ(s.committed_bytes_total, 42 * kMiB);  // 28, then d's 14
  EXPECT_THAT(pool_.check_invariants(), IsEmpty());
  for (void* p : {b, d, e}) pool_.free(p);
}

TEST(GranularPoolBudget, BudgetCountsCommittedBytes) {
  HostBackend backend;
  CachingAllocator pool(backend, CachingAllocator::Options{10 * kMiB, nullptr});
  void* a = pool.allocate(3 * kMiB);  // 4 MiB committed
  void* b = pool.allocate(4 * kMiB);  // granules 1-3 of the same segment: 8 MiB committed
  EXPECT_EQ(pool.stats().reserved_bytes, 8 * kMiB);
  EXPECT_THROW(pool.allocate(4 * kMiB), OutOfMemoryError);  // would need 12 MiB
  pool.free(a);
  void* c = pool.allocate(3 * kMiB);  // the freed granules serve it
  EXPECT_LE(pool.stats().peak_reserved_bytes, 10 * kMiB);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  pool.free(b);
  pool.free(c);
}

TEST(GranularPoolBudget, PressureDecommitsCachedHolesOfOtherStreams) {
  HostBackend backend;
  CachingAllocator pool(backend, CachingAllocator::Options{16 * kMiB, nullptr});
  void* a = pool.allocate(12 * kMiB, /*stream=*/1);
  pool.free(a);                                      // 12 MiB committed, cached for stream 1
  void* b = pool.allocate(12 * kMiB, /*stream=*/2);  // needs 8 of stream 1's granules back
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 16 * kMiB);  // up to the budget: the other 4 stay cached
  EXPECT_EQ(s.decommitted_bytes_total, 8 * kMiB);
  EXPECT_EQ(s.cache_flushes, 1u);
  EXPECT_EQ(s.decommits, 1u);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  pool.free(b);
}

TEST(GranularPoolBudget, CommittedMemoryServesBeforeABetterFitThatWouldPassTheBudget) {
  // a and b fill 16 MiB of a 20 MiB segment, whose last 4 MiB were never committed; c's segment
  // of 12 MiB is freed whole, its memory still committed: 28 MiB, the budget.
  HostBackend backend;
  CachingAllocator pool(backend, CachingAllocator::Options{28 * kMiB, nullptr});
  void* a = pool.allocate(8 * kMiB);
  void* b = pool.allocate(8 * kMiB);
  void* c = pool.allocate(12 * kMiB);
  pool.free(c);
  // The best fit for 4 MiB is the uncommitted tail; committing it would pass the budget and give
  // back 4 MiB of c's hole first (on CUDA, a wait for the device). c's committed hole serves it.
  void* d = pool.allocate(4 * kMiB);
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 28 * kMiB);
  EXPECT_EQ(s.committed_bytes_total, 28 * kMiB);
  EXPECT_EQ(s.decommitted_bytes_total, 0u);
  EXPECT_EQ(s.decommits, 0u);
  EXPECT_EQ(static_cast<char*>(d), static_cast<char*>(c));
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  for (void* p : {a, b, d}) pool.free(p);
}

TEST(GranularPoolBudget, FarFromTheBudgetTheBestFitIsCommitted) {
  // The same blocks under a budget with room: the best fit, the uncommitted tail, is committed.
  HostBackend backend;
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  void* a = pool.allocate(8 * kMiB);
  void* b = pool.allocate(8 * kMiB);
  void* c = pool.allocate(12 * kMiB);
  pool.free(c);
  void* d = pool.allocate(4 * kMiB);
  EXPECT_EQ(static_cast<char*>(d), static_cast<char*>(b) + 8 * kMiB);
  EXPECT_EQ(pool.stats().reserved_bytes, 32 * kMiB);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  for (void* p : {a, b, d}) pool.free(p);
}

// Address space is not free memory: the largest free block counts only committed bytes.
TEST(GranularPoolBudget, TheLargestFreeBlockCountsOnlyCommittedMemory) {
  HostBackend backend(HostBackend::Options{0, /*backed=*/false});
  CachingAllocator pool(backend, CachingAllocator::Options{8 * kMiB, nullptr});
  try {
    pool.allocate(10 * kMiB);  // a 20 MiB segment of address space, none of it committed
    FAIL() << "10 MiB under a budget of 8";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("largest free block 0 B"));
    EXPECT_EQ(e.largest_free_bytes, 0u);
  }
  EXPECT_EQ(pool.stats().largest_free_bytes, 0u);
  void* a = pool.allocate(6 * kMiB);  // that segment's first 6 MiB, now committed
  EXPECT_EQ(pool.stats().largest_free_bytes, 0u);
  pool.free(a);  // a free block of 20 MiB, 6 of them committed
  EXPECT_EQ(pool.stats().largest_free_bytes, 6 * kMiB);
  void* b = pool.allocate(3 * kMiB);  // leaves 3 committed MiB free behind it
  const MemoryStats s = pool.stats();
  EXPECT_EQ(s.largest_free_bytes, 3 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 6 * kMiB);
  pool.free(b);
}

TEST(GranularPoolBudget, UnderABudgetTheReservationRisesToItBeforeGivingBack) {
  // Without a budget the pool gives cached granules back rather than pass its high-water mark
  // (FreeHolesAreGivenBackBeforeTheReservationGrows); under one it holds up to the budget first.
  HostBackend backend;
  CachingAllocator pool(backend, CachingAllocator::Options{24 * kMiB, nullptr});
  void* a = pool.allocate(8 * kMiB);
  void* b = pool.allocate(8 * kMiB);
  pool.free(a);
  void* c = pool.allocate(12 * kMiB);  // 16 + 12 would pass 24: 4 of a's hole go back
  MemoryStats s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 24 * kMiB);
  EXPECT_EQ(s.decommitted_bytes_total, 4 * kMiB);
  EXPECT_EQ(s.decommits, 1u);
  pool.free(c);
  void* d = pool.allocate(4 * kMiB);  // a's hole's committed start serves it: nothing moves
  s = pool.stats();
  EXPECT_EQ(s.reserved_bytes, 24 * kMiB);
  EXPECT_EQ(s.decommits, 1u);
  EXPECT_LE(s.peak_reserved_bytes, 24 * kMiB);
  EXPECT_THAT(pool.check_invariants(), IsEmpty());
  pool.free(b);
  pool.free(d);
}

}  // namespace
}  // namespace monet
