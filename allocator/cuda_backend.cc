#include "allocator/cuda_backend.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace monet {

bool CudaApi::complete() const {
#define MONET_PRESENT(member, function) &&member != nullptr
  return true MONET_CUDA_API(MONET_PRESENT);
#undef MONET_PRESENT
}

bool CudaDriverApi::complete() const {
#define MONET_PRESENT(member, function) &&member != nullptr
  return true MONET_CUDA_DRIVER_API(MONET_PRESENT);
#undef MONET_PRESENT
}

const CudaDriverApi* cuda_driver_api() {
  static const CudaDriverApi* api = []() -> const CudaDriverApi* {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return nullptr;
    static CudaDriverApi a;
#define MONET_FIND(member, function) look_up(a.member, driver, #function);
    MONET_CUDA_DRIVER_API(MONET_FIND)
#undef MONET_FIND
    return a.complete() ? &a : nullptr;
  }();
  return api;
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

CudaBackend::CudaBackend(const CudaApi& api, int device, const CudaDriverApi* driver)
    : api_(api), driver_(driver), device_(device) {
  if (!api_.complete()) {
    throw CudaCallError("monet: the CUDA runtime's functions were not found",
                        cudaErrorInitializationError);
  }
  DeviceScope scope(api_, device_);
  check(scope.status(), "cudaSetDevice");
  size_t free = 0, total = 0;
  check(api_.mem_get_info(&free, &total), "cudaMemGetInfo");  // also makes the context current
  total_bytes_ = total;
  if (driver_ == nullptr) return;

  int supported = 0;
  check(driver_->device_get_attribute(
            &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device_),
        "cuDeviceGetAttribute");
  if (!supported) {
    throw std::runtime_error(
        fmt::format("monet: cuda:{} does not support virtual memory management, which "
                    "MONET_CUDA_SEGMENTS=expandable needs; unset it to use whole segments",
                    device_));
  }
  prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop_.location.id = device_;
  size_t granularity = 0;
  check(driver_->get_granularity(&granularity, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity");
  // The pool's segments are multiples of 2 MiB: granules of 2 MiB tile them, whatever finer
  // granule the device allows.
  constexpr std::size_t k2MiB = std::size_t{2} << 20;
  if (granularity == 0 || k2MiB % granularity != 0) {
    throw std::runtime_error(fmt::format(
        "monet: cuda:{} maps memory in granules of {} bytes, which do not tile 2 MiB; unset "
        "MONET_CUDA_SEGMENTS to use whole segments",
        device_, granularity));
  }
  granularity_ = k2MiB;
}

std::string CudaBackend::device_name() const { return fmt::format("cuda:{}", device_); }

void* CudaBackend::reserve(std::size_t bytes) {
  DeviceScope scope(api_, device_);
  check(scope.status(), "cudaSetDevice");
  if (driver_ != nullptr) {
    CUdeviceptr base = 0;
    const CUresult status = driver_->address_reserve(&base, bytes, granularity_, 0, 0);
    if (status == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
    check(status, "cuMemAddressReserve");
    return reinterpret_cast<void*>(base);
  }
  void* p = nullptr;
  const cudaError_t status = api_.malloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    api_.get_last_error();  // a failed cudaMalloc leaves its error behind; clear it
    return nullptr;
  }
  check(status, "cudaMalloc");
  return p;
}

void CudaBackend::release(void* segment, std::size_t bytes) {
  DeviceScope scope(api_, device_);
  check(scope.status(), "cudaSetDevice");
  if (driver_ != nullptr) {
    // The pool decommits every granule before it releases a segment.
    check(driver_->address_free(reinterpret_cast<CUdeviceptr>(segment), bytes), "cuMemAddressFree");
    return;
  }
  check(api_.free(segment), "cudaFree");
}

bool CudaBackend::commit(void* ptr, std::size_t bytes) {
  DeviceScope scope(api_, device_);
  check(scope.status(), "cudaSetDevice");
  const auto base = reinterpret_cast<CUdeviceptr>(ptr);
  for (std::size_t offset = 0; offset < bytes; offset += granularity_) {
    CUmemGenericAllocationHandle handle{};
    if (!spare_.empty()) {
      handle = spare_.back();  // memory given back a moment ago, mapped here instead
      spare_.pop_back();
    } else {
      const CUresult status = driver_->create(&handle, granularity_, &prop_, 0);
      if (status == CUDA_ERROR_OUT_OF_MEMORY) {
        unmap_unused(base, offset);  // all or nothing
        return false;
      }
      check(status, "cuMemCreate");
    }
    bool mapped = false;
    const CUresult status = map_granule(base + offset, handle, &mapped);
    if (status != CUDA_SUCCESS) {
      // All or nothing on an error too: what this call made and mapped goes back (each step as
      // far as the driver lets), and the first error is the one reported.
      if (mapped) driver_->unmap(base + offset, granularity_);
      give_back(handle);
      unmap_unused(base, offset);
      check(status, mapped ? "cuMemSetAccess" : "cuMemMap");
    }
    handles_.emplace(base + offset, handle);
  }
  return true;
}

CUresult CudaBackend::map_granule(CUdeviceptr address, CUmemGenericAllocationHandle handle,
                                  bool* mapped) {
  *mapped = false;
  const CUresult status = driver_->map(address, granularity_, 0, handle, 0);
  if (status != CUDA_SUCCESS) return status;
  *mapped = true;
  CUmemAccessDesc access{};
  access.location = prop_.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return driver_->set_access(address, granularity_, &access, 1);
}

void CudaBackend::give_back(CUmemGenericAllocationHandle handle) {
  if (holding_ || driver_->release(handle) != CUDA_SUCCESS) spare_.push_back(handle);
}

void CudaBackend::unmap_unused(CUdeviceptr base, std::size_t bytes) {
  for (std::size_t offset = 0; offset < bytes; offset += granularity_) {
    auto it = handles_.find(base + offset);
    if (it == handles_.end()) continue;
    driver_->unmap(base + offset, granularity_);
    give_back(it->second);
    handles_.erase(it);
  }
}

void CudaBackend::decommit(void* ptr, std::size_t bytes) {
  DeviceScope scope(api_, device_);
  check(scope.status(), "cudaSetDevice");
  // Blocks are freed in stream order, so kernels queued before the free may still read them:
  // unmapping must wait for the device, as cudaFree does.
  if (!synchronized_) check(api_.device_synchronize(), "cudaDeviceSynchronize");
  synchronized_ = holding_;
  const auto base = reinterpret_cast<CUdeviceptr>(ptr);
  // All or nothing, as the pool counts a run: every granule unmapped first, and where the driver
  // refuses one, those unmapped before it mapped again (as far as the driver lets) before the
  // error is reported, so that no granule the pool counts as committed is left without memory.
  std::vector<std::unordered_map<CUdeviceptr, CUmemGenericAllocationHandle>::iterator> unmapped;
  for (std::size_t offset = 0; offset < bytes; offset += granularity_) {
    auto it = handles_.find(base + offset);
    if (it == handles_.end()) continue;
    const CUresult status = driver_->unmap(base + offset, granularity_);
    if (status != CUDA_SUCCESS) {
      for (const auto& done : unmapped) {
        bool mapped = false;
        map_granule(done->first, done->second, &mapped);
      }
      check(status, "cuMemUnmap");
    }
    unmapped.push_back(it);
  }
  // Given back, as the pool counts it.
  for (const auto& it : unmapped) {
    give_back(it->second);
    handles_.erase(it);
  }
}

void CudaBackend::hold_decommitted(bool hold) {
  if (driver_ == nullptr) return;
  holding_ = hold;
  synchronized_ = false;
  if (hold) return;
  DeviceScope scope(api_, device_);
  check(scope.status(), "cudaSetDevice");
  while (!spare_.empty()) {
    const CUmemGenericAllocationHandle handle = spare_.back();
    spare_.pop_back();
    check(driver_->release(handle), "cuMemRelease");
  }
}

Event CudaBackend::record_event(Stream stream) {
  DeviceScope scope(api_, device_);
  check(scope.status(), "cudaSetDevice");
  cudaEvent_t event = nullptr;
  check(api_.event_create_with_flags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  const cudaError_t recorded = api_.event_record(event, reinterpret_cast<cudaStream_t>(stream));
  if (recorded != cudaSuccess) api_.event_destroy(event);
  check(recorded, "cudaEventRecord");
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
  check(scope.status(), "cudaSetDevice");
  check(api_.event_destroy(reinterpret_cast<cudaEvent_t>(event)), "cudaEventDestroy");
}

void CudaBackend::check(CUresult status, const char* what) const {
  if (status == CUDA_SUCCESS) return;
  const char* text = "unknown error";
  driver_->get_error_string(status, &text);
  cudaError_t code = cudaErrorUnknown;
  switch (status) {
    case CUDA_ERROR_INVALID_VALUE:
      code = cudaErrorInvalidValue;
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      code = cudaErrorMemoryAllocation;
      break;
    case CUDA_ERROR_NOT_INITIALIZED:
      code = cudaErrorInitializationError;
      break;
    case CUDA_ERROR_DEINITIALIZED:
      code = cudaErrorCudartUnloading;
      break;
    case CUDA_ERROR_NO_DEVICE:
      code = cudaErrorNoDevice;
      break;
    case CUDA_ERROR_INVALID_DEVICE:
      code = cudaErrorInvalidDevice;
      break;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      code = cudaErrorIllegalAddress;
      break;
    case CUDA_ERROR_NOT_SUPPORTED:
      code = cudaErrorNotSupported;
      break;
    default:
      break;
  }
  throw CudaCallError(fmt::format("monet: {} failed on cuda:{}: {}", what, device_, text), code);
}

void CudaBackend::check(cudaError_t status, const char* what) const {
  if (status == cudaSuccess) return;
  throw CudaCallError(
      fmt::format("monet: {} failed on cuda:{}: {}", what, device_, api_.get_error_string(status)),
      status);
}

}  // namespace monet
