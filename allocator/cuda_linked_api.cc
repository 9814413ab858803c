// The CUDA runtime that libmonet links. Kept apart from cuda_backend.cc so that
// libmonet_preload, which must not link CUDA, can use the backend with its own table.
#include "allocator/cuda_api.h"

namespace monet {

const CudaApi& linked_cuda_api() {
  static const CudaApi api = [] {
    CudaApi a;
    a.malloc = &cudaMalloc;
    a.free = &cudaFree;
    a.mem_get_info = &cudaMemGetInfo;
    a.get_device = &cudaGetDevice;
    a.set_device = &cudaSetDevice;
    a.get_device_count = &cudaGetDeviceCount;
    a.event_create_with_flags = &cudaEventCreateWithFlags;
    a.event_record = &cudaEventRecord;
    a.event_query = &cudaEventQuery;
    a.event_synchronize = &cudaEventSynchronize;
    a.event_destroy = &cudaEventDestroy;
    a.get_last_error = &cudaGetLastError;
    a.get_error_string = &cudaGetErrorString;
    return a;
  }();
  return api;
}

}  // namespace monet
