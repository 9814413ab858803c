// Device memory of one CUDA device, events from cudaEvent*. Every call is made with the backend's
// device current, and the caller's current device is restored after.
//
// Two ways to hold memory:
// - whole segments from cudaMalloc (the default);
// - expandable segments: address ranges from cuMemAddressReserve, with physical memory created and
//   mapped granule by granule (cuMemCreate, cuMemMap) as the pool commits, and unmapped and
//   released as it decommits (see Backend); where the pool gives granules back to make room for
//   a commit, their memory is mapped again where the commit wants it, without a release and a
//   create. Chosen with MONET_CUDA_SEGMENTS=expandable.
#pragma once

#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator/backend.h"
#include "allocator/cuda_api.h"

namespace monet {

// A CUDA call of the backend's failed. `code` is the CUDA runtime's error for it, which the
// preload's interposers answer with: the call's own where it was the runtime's, and for the
// driver's the runtime error of the same number where the two share it (they do for the errors a
// mapping call returns: invalid value, out of memory, not initialized, deinitialized, no or invalid
// device, illegal address, not supported), cudaErrorUnknown otherwise.
class CudaCallError : public std::runtime_error {
 public:
  CudaCallError(const std::string& message, cudaError_t code)
      : std::runtime_error(message), code(code) {}

  cudaError_t code;
};

class CudaBackend : public Backend {
 public:
  // `api` (and `driver`) must outlive the backend. With `driver`, segments are expandable.
  // Throws CudaCallError if a CUDA call fails, std::runtime_error if `device` cannot map memory by
  // granule. Every method throws CudaCallError for a CUDA call that fails (other than for want of
  // memory, which reserve() and commit() answer).
  CudaBackend(const CudaApi& api, int device, const CudaDriverApi* driver = nullptr);

  std::string device_name() const override;
  std::size_t total_bytes() const override { return total_bytes_; }
  void* reserve(std::size_t bytes) override;
  void release(void* segment, std::size_t bytes) override;
  std::size_t granularity() const override { return granularity_; }
  bool commit(void* ptr, std::size_t bytes) override;
  void decommit(void* ptr, std::size_t bytes) override;
  void hold_decommitted(bool hold) override;
  Event record_event(Stream stream) override;
  bool event_done(Event event) override;
  void wait_event(Event event) override;
  void destroy_event(Event event) override;

  int device() const { return device_; }

 private:
  void check(cudaError_t status, const char* what) const;
  void check(CUresult status, const char* what) const;
  // Unmaps the granules of [base, base + bytes) that this backend mapped, keeping their memory
  // where the pool holds what it gives back and releasing it otherwise, as far as the driver lets,
  // without waiting for the device: a commit's own granules, which nothing can have used yet.
  void unmap_unused(CUdeviceptr base, std::size_t bytes);
  // Maps `handle` at `address`, readable and writable from the device: one granule. Returns the
  // driver's first error; `*mapped` says whether the map itself took (then set_access failed).
  CUresult map_granule(CUdeviceptr address, CUmemGenericAllocationHandle handle, bool* mapped);
  // An unmapped granule's memory, given back: kept spare where the pool holds what it gives back
  // or where the driver does not release it now (the next commit maps it, or the end of the next
  // hold releases it and reports the driver's error), released otherwise.
  void give_back(CUmemGenericAllocationHandle handle);

  const CudaApi& api_;
  const CudaDriverApi* driver_;  // null: whole segments
  int device_;
  std::size_t total_bytes_ = 0;
  std::size_t granularity_ = 0;  // 0 with whole segments
  CUmemAllocationProp prop_{};
  std::unordered_map<CUdeviceptr, CUmemGenericAllocationHandle> handles_;  // by granule address
  // While the pool holds what it decommits (hold_decommitted): the granules' memory unmapped and
  // kept for the next commit, and whether the device has been waited for since the hold began
  // (nothing is queued in between, so once is enough).
  bool holding_ = false;
  bool synchronized_ = false;
  std::vector<CUmemGenericAllocationHandle> spare_;
};

}  // namespace monet
