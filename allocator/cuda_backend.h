// Device memory of one CUDA device: segments from cudaMalloc, events from cudaEvent*. Every call
// is made with the backend's device current, and the caller's current device is restored after.
#pragma once

#include "allocator/backend.h"
#include "allocator/cuda_api.h"

namespace monet {

class CudaBackend : public Backend {
 public:
  // `api` must outlive the backend. Throws std::runtime_error if `device` cannot be used.
  CudaBackend(const CudaApi& api, int device);

  std::string device_name() const override;
  std::size_t total_bytes() const override { return total_bytes_; }
  void* reserve(std::size_t bytes) override;
  void release(void* segment, std::size_t bytes) override;
  Event record_event(Stream stream) override;
  bool event_done(Event event) override;
  void wait_event(Event event) override;
  void destroy_event(Event event) override;

  int device() const { return device_; }

 private:
  void check(cudaError_t status, const char* what) const;

  const CudaApi& api_;
  int device_;
  std::size_t total_bytes_ = 0;
};

}  // namespace monet
