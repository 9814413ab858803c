// The CUDA calls the CUDA backend makes, as tables of function pointers. libmonet fills them with
// the CUDA it links; libmonet_preload fills them with the definitions after its own interposers
// (dlsym RTLD_NEXT) and from the process's libcuda, so it calls the real cudaMalloc without
// linking CUDA.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

// Every entry of the table with the runtime function that fills it, for code that fills or checks
// the table as a whole: X(member, function).
#define MONET_CUDA_API(X)                              \
  X(malloc, cudaMalloc)                                \
  X(free, cudaFree)                                    \
  X(mem_get_info, cudaMemGetInfo)                      \
  X(get_device, cudaGetDevice)                         \
  X(set_device, cudaSetDevice)                         \
  X(get_device_count, cudaGetDeviceCount)              \
  X(event_create_with_flags, cudaEventCreateWithFlags) \
  X(event_record, cudaEventRecord)                     \
  X(event_query, cudaEventQuery)                       \
  X(event_synchronize, cudaEventSynchronize)           \
  X(event_destroy, cudaEventDestroy)                   \
  X(device_synchronize, cudaDeviceSynchronize)         \
  X(get_last_error, cudaGetLastError)                  \
  X(get_error_string, cudaGetErrorString)

// The driver's virtual memory API, for segments committed by granule (expandable segments).
#define MONET_CUDA_DRIVER_API(X)                    \
  X(get_granularity, cuMemGetAllocationGranularity) \
  X(address_reserve, cuMemAddressReserve)           \
  X(address_free, cuMemAddressFree)                 \
  X(create, cuMemCreate)                            \
  X(release, cuMemRelease)                          \
  X(map, cuMemMap)                                  \
  X(unmap, cuMemUnmap)                              \
  X(set_access, cuMemSetAccess)                     \
  X(device_get_attribute, cuDeviceGetAttribute)     \
  X(get_error_string, cuGetErrorString)

namespace monet {

struct CudaApi {
  cudaError_t (*malloc)(void** ptr, size_t bytes) = nullptr;
  cudaError_t (*free)(void* ptr) = nullptr;
  cudaError_t (*mem_get_info)(size_t* free, size_t* total) = nullptr;
  cudaError_t (*get_device)(int* device) = nullptr;
  cudaError_t (*set_device)(int device) = nullptr;
  cudaError_t (*get_device_count)(int* count) = nullptr;
  cudaError_t (*event_create_with_flags)(cudaEvent_t* event, unsigned int flags) = nullptr;
  cudaError_t (*event_record)(cudaEvent_t event, cudaStream_t stream) = nullptr;
  cudaError_t (*event_query)(cudaEvent_t event) = nullptr;
  cudaError_t (*event_synchronize)(cudaEvent_t event) = nullptr;
  cudaError_t (*event_destroy)(cudaEvent_t event) = nullptr;
  cudaError_t (*device_synchronize)() = nullptr;
  cudaError_t (*get_last_error)() = nullptr;
  const char* (*get_error_string)(cudaError_t error) = nullptr;

  bool complete() const;
};

struct CudaDriverApi {
  CUresult (*get_granularity)(size_t* granularity, const CUmemAllocationProp* prop,
                              CUmemAllocationGranularity_flags option) = nullptr;
  CUresult (*address_reserve)(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                              unsigned long long flags) = nullptr;
  CUresult (*address_free)(CUdeviceptr ptr, size_t size) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle handle) = nullptr;
  CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) = nullptr;
  CUresult (*unmap)(CUdeviceptr ptr, size_t size) = nullptr;
  CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                         size_t count) = nullptr;
  CUresult (*device_get_attribute)(int* value, CUdevice_attribute attribute,
                                   CUdevice device) = nullptr;
  CUresult (*get_error_string)(CUresult error, const char** text) = nullptr;

  bool complete() const;
};

// Points `fn` at the function `name` found through `handle` (a dlopen handle, or RTLD_NEXT);
// nullptr where there is none. How the tables are filled without linking CUDA.
template <typename Fn>
void look_up(Fn*& fn, void* handle, const char* name) {
  fn = reinterpret_cast<Fn*>(dlsym(handle, name));
}

// Makes `device` current through `api` for a scope and restores the caller's device after. Where
// cudaSetDevice fails (a device whose context cannot be made: full, or taken by another process),
// the caller's device stays current: status() says so, and the scope's calls must not be made.
class DeviceScope {
 public:
  DeviceScope(const CudaApi& api, int device) : api_(api) {
    if (api_.get_device(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) status_ = api_.set_device(device);
  }
  ~DeviceScope() {
    int now = -1;
    if (previous_ >= 0 && api_.get_device(&now) == cudaSuccess && now != previous_) {
      api_.set_device(previous_);
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  // cudaSetDevice's answer, cudaSuccess where the device was current already.
  cudaError_t status() const { return status_; }

 private:
  const CudaApi& api_;
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// The CUDA runtime linked into this program (libmonet built with CUDA).
const CudaApi& linked_cuda_api();

// The driver's virtual memory API from the process's libcuda.so.1 (loaded at run time, so that
// nothing links the driver), or nullptr where there is no driver or it lacks a function.
const CudaDriverApi* cuda_driver_api();

// The number of usable CUDA devices through `api`; 0 when the call fails for any reason (no
// driver, a driver too old for the runtime, no device).
int cuda_device_count(const CudaApi& api);

}  // namespace monet
