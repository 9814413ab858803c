// The CUDA runtime calls the CUDA backend makes, as a table of function pointers. libmonet fills
// it with the CUDA runtime it links; libmonet_preload fills it with the next definitions after its
// own interposers (dlsym RTLD_NEXT), so it calls the real cudaMalloc without linking CUDA.
#pragma once

#include <cuda_runtime_api.h>

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
  X(get_last_error, cudaGetLastError)                  \
  X(get_error_string, cudaGetErrorString)

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
  cudaError_t (*get_last_error)() = nullptr;
  const char* (*get_error_string)(cudaError_t error) = nullptr;

  bool complete() const;
};

// The CUDA runtime linked into this program (libmonet built with CUDA).
const CudaApi& linked_cuda_api();

// The number of usable CUDA devices through `api`; 0 when the call fails for any reason (no
// driver, a driver too old for the runtime, no device).
int cuda_device_count(const CudaApi& api);

}  // namespace monet
