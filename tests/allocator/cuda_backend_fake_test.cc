// The CUDA backend's bookkeeping over a simulated device: tables of CUDA functions that count
// their calls and check what they are asked (no address mapped twice, no handle used after its
// release), so that the expandable segments' logic runs in CI, where there is no GPU. What the
// real driver does is cuda_backend_test.cc's, on a device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/cuda_backend.h"
#include "allocator/device_pools.h"
#include "monet/errors.h"

namespace monet {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGranule = 2 * kMiB;

// The simulated device: one at a time, reset by each test.
struct FakeDevice {
  std::size_t capacity = 1024 * kMiB;  // physical memory
  std::size_t physical = 0;            // created and not released
  CUdeviceptr next_address = 0x100000000;
  unsigned long long next_handle = 1;
  std::set<CUmemGenericAllocationHandle> handles;              // created, not released
  std::map<CUdeviceptr, CUmemGenericAllocationHandle> mapped;  // granule address -> handle
  int creates = 0, releases = 0, maps = 0, unmaps = 0, syncs = 0;
  std::vector<std::string> errors;  // what the backend asked that a driver would refuse
  int devices = 1;
  int current = 0;                       // the current device
  std::set<int> contexts;                // devices asked for their memory: each a context, on a GPU
  std::set<int> unusable;                // devices cudaSetDevice refuses (no context can be made)
  std::vector<int> malloc_devices;       // the device current at each cudaMalloc
  CUresult create_error = CUDA_SUCCESS;  // what cuMemCreate answers, where not success
  int set_access_calls = 0;
  int set_access_fails_at = -1;  // the call (counted from 0) that cuMemSetAccess refuses
  int unmap_fails_at = -1;       // the call (counted from 0) that cuMemUnmap refuses
  int release_calls = 0;
  int release_fails_at = -1;  // the call (counted from 0) that cuMemRelease refuses
};
FakeDevice fake;

// The CUDA runtime's functions, one for each CudaApi entry.
namespace runtime {

cudaError_t fake_malloc(void** ptr, size_t bytes) {
  fake.malloc_devices.push_back(fake.current);
  *ptr = reinterpret_cast<void*>(fake.next_address);
  fake.next_address += bytes;
  return cudaSuccess;
}
cudaError_t fake_free(void*) { return cudaSuccess; }
cudaError_t fake_mem_get_info(size_t* free, size_t* total) {
  fake.contexts.insert(fake.current);
  *total = fake.capacity;
  *free = fake.capacity - fake.physical;
  return cudaSuccess;
}
cudaError_t fake_get_device(int* device) {
  *device = fake.current;
  return cudaSuccess;
}
cudaError_t fake_set_device(int device) {
  if (fake.unusable.count(device) != 0) return cudaErrorDevicesUnavailable;
  fake.current = device;
  return cudaSuccess;
}
cudaError_t fake_get_device_count(int* count) {
  *count = fake.devices;
  return cudaSuccess;
}
cudaError_t fake_event_create_with_flags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(fake.next_handle++);
  return cudaSuccess;
}
cudaError_t fake_event_record(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t fake_event_query(cudaEvent_t) { return cudaSuccess; }
cudaError_t fake_event_synchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t fake_event_destroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t fake_device_synchronize() {
  ++fake.syncs;
  return cudaSuccess;
}
cudaError_t fake_get_last_error() { return cudaSuccess; }
const char* fake_get_error_string(cudaError_t) { return "fake error"; }

}  // namespace runtime

// The driver's, one for each CudaDriverApi entry.
namespace driver {

CUresult fake_get_granularity(size_t* granularity, const CUmemAllocationProp*,
                              CUmemAllocationGranularity_flags) {
  *granularity = kGranule;
  return CUDA_SUCCESS;
}
CUresult fake_address_reserve(CUdeviceptr* ptr, size_t size, size_t, CUdeviceptr,
                              unsigned long long) {
  *ptr = fake.next_address;
  fake.next_address += size;
  return CUDA_SUCCESS;
}
CUresult fake_address_free(CUdeviceptr, size_t) { return CUDA_SUCCESS; }
CUresult fake_create(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp*,
                     unsigned long long) {
  if (fake.create_error != CUDA_SUCCESS) return fake.create_error;
  if (fake.physical + size > fake.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  fake.physical += size;
  *handle = fake.next_handle++;
  fake.handles.insert(*handle);
  ++fake.creates;
  return CUDA_SUCCESS;
}
CUresult fake_release(CUmemGenericAllocationHandle handle) {
  if (fake.release_calls++ == fake.release_fails_at) return CUDA_ERROR_INVALID_VALUE;
  if (fake.handles.erase(handle) == 0) fake.errors.push_back("released an unknown handle");
  for (const auto& [address, h] : fake.mapped) {
    if (h == handle) fake.errors.push_back("released a handle that is still mapped");
  }
  fake.physical -= kGranule;
  ++fake.releases;
  return CUDA_SUCCESS;
}
CUresult fake_map(CUdeviceptr ptr, size_t size, size_t, CUmemGenericAllocationHandle handle,
                  unsigned long long) {
  if (size != kGranule) fake.errors.push_back("mapped other than one granule");
  if (fake.handles.count(handle) == 0) fake.errors.push_back("mapped an unknown handle");
  for (const auto& [address, h] : fake.mapped) {
    if (h == handle) fake.errors.push_back("mapped a handle twice");
  }
  if (!fake.mapped.emplace(ptr, handle).second) fake.errors.push_back("mapped an address twice");
  ++fake.maps;
  return CUDA_SUCCESS;
}
CUresult fake_unmap(CUdeviceptr ptr, size_t) {
  if (fake.unmaps == fake.unmap_fails_at) {
    ++fake.unmaps;
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (fake.mapped.erase(ptr) == 0) fake.errors.push_back("unmapped an address not mapped");
  ++fake.unmaps;
  return CUDA_SUCCESS;
}
CUresult fake_set_access(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) {
  if (fake.set_access_calls++ == fake.set_access_fails_at) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
CUresult fake_device_get_attribute(int* value, CUdevice_attribute, CUdevice) {
  *value = 1;
  return CUDA_SUCCESS;
}
CUresult fake_get_error_string(CUresult, const char** text) {
  *text = "fake error";
  return CUDA_SUCCESS;
}

}  // namespace driver

// The tables, every entry filled from the namespace's fake_<entry>.
CudaApi fake_api() {
  CudaApi a;
#define MONET_FAKE(member, function) a.member = runtime::fake_##member;
  MONET_CUDA_API(MONET_FAKE)
#undef MONET_FAKE
  return a;
}

CudaDriverApi fake_driver() {
  CudaDriverApi d;
#define MONET_FAKE(member, function) d.member = driver::fake_##member;
  MONET_CUDA_DRIVER_API(MONET_FAKE)
#undef MONET_FAKE
  return d;
}

class FakeExpandableTest : public ::testing::Test {
 protected:
  void SetUp() override { fake = FakeDevice{}; }
  // Every granule mapped is a created handle, and the pool's reserved bytes are what is mapped.
  void ExpectConsistent(CachingAllocator& pool) {
    EXPECT_THAT(fake.errors, ::testing::IsEmpty());
    EXPECT_EQ(fake.mapped.size() * kGranule, pool.stats().reserved_bytes);
    EXPECT_EQ(fake.handles.size(), fake.mapped.size()) << "memory created and not mapped";
  }

  CudaApi api_ = fake_api();
  CudaDriverApi driver_ = fake_driver();
};

TEST_F(FakeExpandableTest, MemoryGivenBackToMakeRoomIsMappedAgainNotCreatedAnew) {
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  void* a = pool.allocate(40 * kMiB);
  void* b = pool.allocate(20 * kMiB);
  EXPECT_EQ(fake.creates, 30);
  pool.free(a);  // a 40 MiB hole, still mapped
  ExpectConsistent(pool);
  // 44 MiB does not fit the hole: the hole's 40 MiB go to a new segment, 4 MiB are created.
  const int syncs = fake.syncs;
  void* c = pool.allocate(44 * kMiB);
  EXPECT_EQ(fake.creates, 30 + 2);
  EXPECT_EQ(fake.releases, 0);
  EXPECT_EQ(fake.syncs, syncs + 1) << "one wait for the device before the unmapping";
  EXPECT_EQ(pool.stats().reserved_bytes, 64 * kMiB);
  EXPECT_EQ(pool.stats().decommitted_bytes_total, 40 * kMiB);
  ExpectConsistent(pool);
  pool.free(b);
  pool.free(c);
  pool.release_cached();
  ExpectConsistent(pool);
  EXPECT_TRUE(fake.handles.empty());
  EXPECT_EQ(fake.physical, 0u);
}

// A mapping call that fails halfway through a commit (the third granule of five) is an error for
// the allocation, and leaves nothing behind: the granules mapped before it unmapped and released,
// the block cached again in the pool, and the next allocation served.
TEST_F(FakeExpandableTest, AMappingErrorHalfwayThroughACommitLosesNothing) {
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  fake.set_access_fails_at = 2;
  EXPECT_THROW(pool.allocate(10 * kMiB), CudaCallError);
  EXPECT_THAT(pool.check_invariants(), ::testing::IsEmpty());
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  ExpectConsistent(pool);
  EXPECT_TRUE(fake.handles.empty()) << "memory made by the failed commit and not released";
  void* a = pool.allocate(10 * kMiB);
  EXPECT_EQ(pool.stats().reserved_bytes, 10 * kMiB);
  ExpectConsistent(pool);
  pool.free(a);
  EXPECT_EQ(pool.release_cached(), 10 * kMiB);
  EXPECT_EQ(pool.stats().segments, 0u) << "a segment the failed allocation lost";
  EXPECT_TRUE(fake.handles.empty());
}

// Where the driver does not release a granule that a failed commit made, the granule is kept
// spare rather than lost: the next commit maps it, and once mapped it goes back like any other.
TEST_F(FakeExpandableTest, AGranuleTheDriverDoesNotReleaseAfterAFailedCommitIsKeptSpare) {
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  fake.set_access_fails_at = 2;  // the third granule of five
  fake.release_fails_at = 0;     // the rollback's first release: that third granule's
  EXPECT_THROW(pool.allocate(10 * kMiB), CudaCallError);
  EXPECT_THAT(pool.check_invariants(), ::testing::IsEmpty());
  EXPECT_THAT(fake.errors, ::testing::IsEmpty());
  EXPECT_TRUE(fake.mapped.empty());
  EXPECT_EQ(fake.handles.size(), 1u) << "the granule the driver did not release, kept";
  EXPECT_EQ(fake.creates, 3);
  void* a = pool.allocate(10 * kMiB);
  EXPECT_EQ(fake.creates, 3 + 4) << "the kept granule mapped again, not created anew";
  ExpectConsistent(pool);
  pool.free(a);
  pool.release_cached();
  ExpectConsistent(pool);
  EXPECT_TRUE(fake.handles.empty()) << "memory still made once every block went back";
}

// A commit that finds the device full halfway gives back what it had mapped without waiting for
// the device: nothing can have used granules mapped a moment ago (it used to wait, a wait that
// MemoryStats::decommits did not count).
TEST_F(FakeExpandableTest, ACommitThatFindsTheDeviceFullHalfwayDoesNotWaitForIt) {
  fake.capacity = 6 * kMiB;  // three granules
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  const int syncs = fake.syncs;
  EXPECT_ANY_THROW(pool.allocate(10 * kMiB));
  EXPECT_EQ(fake.syncs, syncs);
  EXPECT_EQ(pool.stats().decommits, 0u);
  EXPECT_THAT(pool.check_invariants(), ::testing::IsEmpty());
  ExpectConsistent(pool);
  EXPECT_TRUE(fake.handles.empty()) << "memory made by the refused commit and not released";
  void* a = pool.allocate(6 * kMiB);
  ExpectConsistent(pool);
  pool.free(a);
}

// An unmapping call that fails halfway through a give-back maps again what the give-back had
// unmapped: the pool, told of the error, still counts those granules committed, and a block later
// served there must have memory behind it.
TEST_F(FakeExpandableTest, AnUnmapErrorHalfwayThroughAGiveBackMapsAgainWhatItUnmapped) {
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{64 * kMiB, nullptr});
  void* a = pool.allocate(10 * kMiB);
  void* b = pool.allocate(4 * kMiB);
  pool.free(a);  // a hole of five granules, still mapped
  fake.unmap_fails_at = fake.unmaps + 2;
  EXPECT_THROW(pool.release_cached(), CudaCallError);
  EXPECT_THAT(pool.check_invariants(), ::testing::IsEmpty());
  ExpectConsistent(pool);
  EXPECT_EQ(pool.stats().reserved_bytes, 14 * kMiB);
  void* c = pool.allocate(10 * kMiB);  // the hole again, every granule mapped
  EXPECT_EQ(c, a);
  ExpectConsistent(pool);
  pool.free(c);
  pool.free(b);
  pool.release_cached();
  EXPECT_EQ(pool.stats().segments, 0u);
  ExpectConsistent(pool);
  EXPECT_TRUE(fake.handles.empty());
}

TEST_F(FakeExpandableTest, WhatIsKeptAndNotUsedGoesBackToTheDevice) {
  // Three 8 MiB blocks, a and b in a 20 MiB segment, c in another; a and c freed. A 10 MiB
  // request lands in c's free segment and needs one granule more, past the high-water mark (24
  // MiB): the pool gives back the last granule of a's hole and its memory is mapped there.
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{});
  void* a = pool.allocate(8 * kMiB);
  void* b = pool.allocate(8 * kMiB);
  void* c = pool.allocate(8 * kMiB);
  pool.free(a);
  pool.free(c);
  void* d = pool.allocate(10 * kMiB);
  EXPECT_EQ(pool.stats().reserved_bytes, 24 * kMiB);
  EXPECT_EQ(fake.creates, 12) << "the granule d needed came from a's hole";
  EXPECT_EQ(fake.releases, 0);
  ExpectConsistent(pool);
  pool.free(b);
  pool.free(d);
  pool.release_cached();
  EXPECT_TRUE(fake.handles.empty());
}

TEST_F(FakeExpandableTest, AFullDeviceGetsTheKeptMemoryBackBeforeTheLastTry) {
  // The device holds 62 MiB. With 20 in use and a 40 MiB hole, a 44 MiB request needs 64: the
  // commit fails with the hole's memory kept, which must go back before the pool empties its
  // cache and gives up, leaving nothing created that is not mapped.
  fake.capacity = 62 * kMiB;
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{});
  void* a = pool.allocate(40 * kMiB);
  void* b = pool.allocate(20 * kMiB);
  pool.free(a);
  EXPECT_THROW(pool.allocate(44 * kMiB), OutOfMemoryError);
  ExpectConsistent(pool);
  EXPECT_EQ(fake.physical, 20 * kMiB);
  pool.free(b);
  pool.release_cached();
  EXPECT_TRUE(fake.handles.empty());
}

// A chain's training step, forward then backward, at an input of `scale`: six kept activations
// with a workspace freed after each, then a gradient beside each as they are freed.
void TrainingStep(CachingAllocator& pool, std::size_t scale) {
  std::vector<void*> kept;
  for (std::size_t i = 0; i < 6; ++i) {
    void* workspace = pool.allocate((i % 3 + 2) * scale * kMiB / 4);
    kept.push_back(pool.allocate((i % 2 + 3) * scale * kMiB / 4));
    pool.free(workspace);
  }
  while (!kept.empty()) {
    void* grad = pool.allocate(3 * scale * kMiB / 4);
    pool.free(kept.back());
    kept.pop_back();
    pool.free(grad);
  }
}

TEST_F(FakeExpandableTest, StepsUnderABudgetTheyDoNotReachStopWaitingForTheDevice) {
  // Input sizes that change from step to step: once each has run, every step is served from
  // memory still mapped, with no unmapping (each of which waits for the device).
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{160 * kMiB, nullptr});
  for (std::size_t scale : {8, 3, 5}) TrainingStep(pool, scale);
  const int syncs = fake.syncs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (std::size_t scale : {5, 8, 3, 8, 5, 3}) TrainingStep(pool, scale);
  }
  EXPECT_EQ(fake.syncs, syncs);
  EXPECT_EQ(pool.stats().decommits, 0u);
  ExpectConsistent(pool);
  pool.release_cached();
  EXPECT_TRUE(fake.handles.empty());
}

TEST_F(FakeExpandableTest, StepsAtTheirBudgetWaitForTheDeviceLessThanOnceAStep) {
  // The same steps under a budget that the largest input reaches: memory moves between the
  // inputs' layouts, but seldom.
  CudaBackend backend(api_, 0, &driver_);
  CachingAllocator pool(backend, CachingAllocator::Options{56 * kMiB, nullptr});
  for (std::size_t scale : {8, 3, 5}) TrainingStep(pool, scale);
  EXPECT_GT(pool.stats().decommits, 0u) << "the budget binds";
  const int syncs = fake.syncs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (std::size_t scale : {5, 8, 3, 8, 5, 3}) TrainingStep(pool, scale);
  }
  EXPECT_LT(fake.syncs - syncs, 18);
  EXPECT_LE(pool.stats().peak_reserved_bytes, 56 * kMiB);
  ExpectConsistent(pool);
  pool.release_cached();
  EXPECT_TRUE(fake.handles.empty());
}

TEST_F(FakeExpandableTest, WholeSegmentsAreCudaMallocs) {
  CudaBackend backend(api_, 0);
  EXPECT_EQ(backend.granularity(), 0u);
  CachingAllocator pool(backend, CachingAllocator::Options{});
  void* a = pool.allocate(4 * kMiB);
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(fake.creates, 0);
  pool.free(a);
}

// Random allocations and frees, with streams and events, under budgets and device capacities that
// bind: after every step the device and the pool agree on what is mapped.
TEST_F(FakeExpandableTest, RandomStepsKeepTheDeviceAndThePoolInAgreement) {
  for (std::uint32_t seed = 1; seed <= 100; ++seed) {
    fake = FakeDevice{};
    std::mt19937 gen(seed);
    fake.capacity = (std::uniform_int_distribution<std::size_t>(8, 200)(gen)) * kGranule;
    const std::size_t budget =
        gen() % 3 == 0 ? 0 : std::uniform_int_distribution<std::size_t>(4, 150)(gen) * kGranule;
    {
      CudaBackend backend(api_, 0, &driver_);
      CachingAllocator pool(backend, CachingAllocator::Options{budget, nullptr});
      std::vector<void*> live;
      for (int step = 0; step < 400; ++step) {
        const unsigned op = gen() % 10;
        if (op < 6 || live.empty()) {
          // Small blocks, large ones, and whole granules.
          const std::size_t kinds[] = {1 * kMiB, 8 * kMiB, 40 * kMiB};
          const unsigned kind = gen() % 4;
          const std::size_t bytes =
              kind < 3 ? gen() % kinds[kind] + 1 : (gen() % 16 + 1) * kGranule;
          const Stream stream = gen() % 4 == 0 ? 7 : 0;
          try {
            live.push_back(pool.allocate(bytes, stream));
            if (gen() % 5 == 0) pool.record_stream(live.back(), 9);
          } catch (const OutOfMemoryError&) {
          }
        } else if (op < 9) {
          const std::size_t i = gen() % live.size();
          pool.free(live[i]);
          live.erase(live.begin() + i);
        } else {
          pool.release_cached();
        }
        ASSERT_THAT(fake.errors, ::testing::IsEmpty()) << seed << " step " << step;
        ASSERT_EQ(fake.mapped.size() * kGranule, pool.stats().reserved_bytes)
            << seed << " step " << step;
        ASSERT_EQ(fake.handles.size(), fake.mapped.size()) << seed << " step " << step;
        ASSERT_LE(fake.physical, fake.capacity);
        if (budget != 0) {
          ASSERT_LE(pool.stats().reserved_bytes, budget) << seed;
        }
        const auto problems = pool.check_invariants();
        ASSERT_THAT(problems, ::testing::IsEmpty()) << seed << " step " << step;
      }
      for (void* p : live) pool.free(p);
      pool.release_cached();
      ASSERT_TRUE(fake.handles.empty()) << seed;
    }
    ASSERT_EQ(fake.physical, 0u) << seed;
  }
}

// Which device's pool owns a pointer is asked of every device (the preload's cudaFree, PyTorch's
// record_stream hook): asking makes no pool, which would make a CUDA context on its device,
// outside any budget.
TEST(FakePools, AskingForADevicesPoolMakesNone) {
  fake = FakeDevice{};
  fake.devices = 2;
  static const CudaApi api = fake_api();
  pools::set_cuda_api(&api);
  ASSERT_EQ(pools::cuda_devices(), 2);
  EXPECT_EQ(pools::cuda_if_made(1), nullptr);
  CachingAllocator& pool = pools::cuda(0);
  EXPECT_EQ(pools::cuda_if_made(0), &pool);
  for (int device : {1, -1, 64}) EXPECT_EQ(pools::cuda_if_made(device), nullptr) << device;
  EXPECT_THAT(fake.contexts, ::testing::ElementsAre(0));
}

// A device that cannot be made current (its context cannot be made: the device is full, or
// another process holds it exclusively) is an error naming it, not the caller's device used in
// its place: the caller's memory counted as its, and handed out as its.
TEST(FakeDevices, ADeviceThatCannotBeMadeCurrentIsAnErrorNotTheCallersDevice) {
  fake = FakeDevice{};
  fake.devices = 2;
  fake.unusable = {1};
  const CudaApi api = fake_api();
  EXPECT_THAT([&] { CudaBackend backend(api, 1); },
              ::testing::ThrowsMessage<std::runtime_error>(
                  ::testing::HasSubstr("cudaSetDevice failed on cuda:1")));
  EXPECT_THAT(fake.contexts, ::testing::IsEmpty()) << "cuda:0 was asked for cuda:1's memory";

  fake.unusable.clear();
  CudaBackend backend(api, 1);
  EXPECT_THAT(fake.contexts, ::testing::ElementsAre(1));
  fake.unusable = {1};
  EXPECT_THROW(backend.reserve(2 * kMiB), std::runtime_error);
  EXPECT_THAT(fake.malloc_devices, ::testing::IsEmpty()) << "cuda:0's memory taken for cuda:1";
  EXPECT_EQ(fake.current, 0);
}

// A CUDA call that fails carries the runtime's error for it, which the preload answers with: the
// runtime call's own, and the driver's where the runtime has one of the same meaning.
TEST(FakeDevices, AFailedCallCarriesTheRuntimesErrorForIt) {
  fake = FakeDevice{};
  fake.devices = 2;
  fake.unusable = {1};
  const CudaApi api = fake_api();
  const CudaDriverApi driver = fake_driver();
  try {
    CudaBackend backend(api, 1);
    FAIL() << "cuda:1 cannot be made current";
  } catch (const CudaCallError& e) {
    EXPECT_EQ(e.code, cudaErrorDevicesUnavailable);
  }
  CudaBackend backend(api, 0, &driver);
  void* segment = backend.reserve(2 * kGranule);
  ASSERT_NE(segment, nullptr);
  const std::pair<CUresult, cudaError_t> cases[] = {
      {CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress},
      {CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported},
      {CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue},
      {CUDA_ERROR_LAUNCH_FAILED, cudaErrorUnknown},  // no mapping call returns it
  };
  for (const auto& [driver_error, runtime_error] : cases) {
    fake.create_error = driver_error;
    try {
      backend.commit(segment, kGranule);
      ADD_FAILURE() << "cuMemCreate failed with " << driver_error;
    } catch (const CudaCallError& e) {
      EXPECT_EQ(e.code, runtime_error) << driver_error;
      EXPECT_THAT(e.what(), ::testing::HasSubstr("cuMemCreate failed on cuda:0"));
    }
  }
  fake.create_error = CUDA_SUCCESS;
  backend.release(segment, 2 * kGranule);
}

}  // namespace
}  // namespace monet
