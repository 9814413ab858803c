#include "allocator/cuda_backend.h"

#include <fmt/format.h>

#include <stdexcept>

namespace monet {
namespace {

// Makes `device` current for a scope and restores the caller's device after.
class DeviceScope {
 public:
  DeviceScope(const CudaApi& api, int device) : api_(api) {
    if (api_.get_device(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) api_.set_device(device);
  }
  ~DeviceScope() {
    int now = -1;
    if (previous_ >= 0 && api_.get_device(&now) == cudaSuccess && now != previous_) {
      api_.set_device(previous_);
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  const CudaApi& api_;
  int previous_ = -1;
};

}  // namespace

bool CudaApi::complete() const {
#define MONET_PRESENT(member, function) &&member != nullptr
  return true MONET_CUDA_API(MONET_PRESENT);
#undef MONET_PRESENT
}

int cuda_device_count(const CudaApi& api) {
  if (!api.complete()) return 0;
  int count = 0;
  if (api.get_device_count(&count) != cudaSuccess) {
    api.get_last_error();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return count;
}

CudaBackend::CudaBackend(const CudaApi& api, int device) : api_(api), device_(device) {
  if (!api_.complete())
    throw std::runtime_error("monet: the CUDA runtime's functions were not found");
  DeviceScope scope(api_, device_);
  size_t free = 0, total = 0;
  check(api_.mem_get_info(&free, &total), "cudaMemGetInfo");
  total_bytes_ = total;
}

std::string CudaBackend::device_name() const { return fmt::format("cuda:{}", device_); }

void* CudaBackend::reserve(std::size_t bytes) {
  DeviceScope scope(api_, device_);
  void* p = nullptr;
  const cudaError_t status = api_.malloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    api_.get_last_error();  // a failed cudaMalloc leaves its error behind; clear it
    return nullptr;
  }
  check(status, "cudaMalloc");
  return p;
}

void CudaBackend::release(void* segment, std::size_t) {
  DeviceScope scope(api_, device_);
  check(api_.free(segment), "cudaFree");
}

Event CudaBackend::record_event(Stream stream) {
  DeviceScope scope(api_, device_);
  cudaEvent_t event = nullptr;
  check(api_.event_create_with_flags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(api_.event_record(event, reinterpret_cast<cudaStream_t>(stream)), "cudaEventRecord");
  return reinterpret_cast<Event>(event);
}

bool CudaBackend::event_done(Event event) {
  const cudaError_t status = api_.event_query(reinterpret_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) {
    api_.get_last_error();
    return false;
  }
  check(status, "cudaEventQuery");
  return true;
}

void CudaBackend::wait_event(Event event) {
  check(api_.event_synchronize(reinterpret_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
}

void CudaBackend::destroy_event(Event event) {
  DeviceScope scope(api_, device_);
  check(api_.event_destroy(reinterpret_cast<cudaEvent_t>(event)), "cudaEventDestroy");
}

void CudaBackend::check(cudaError_t status, const char* what) const {
  if (status == cudaSuccess) return;
  throw std::runtime_error(
      fmt::format("monet: {} failed on cuda:{}: {}", what, device_, api_.get_error_string(status)));
}

}  // namespace monet
