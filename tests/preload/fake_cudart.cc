// A CUDA runtime without a GPU, for the preload's tests: one device whose memory is host memory,
// and the few functions libmonet_preload.so passes calls on to. Built as libcudart.so, so that the
// preload finds it as it finds the real one. FAKE_CUDA_MALLOC_ERROR=N makes every cudaMalloc fail
// with error N, as a device with a sticky error from an earlier kernel does.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>

namespace {
constexpr std::size_t kGiB = std::size_t{1} << 30;
std::atomic<long> next_event{1};
}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  if (const char* error = std::getenv("FAKE_CUDA_MALLOC_ERROR")) {
    *ptr = nullptr;
    return static_cast<cudaError_t>(std::atoi(error));
  }
  *ptr = bytes == 0 ? nullptr : std::aligned_alloc(512, (bytes + 511) / 512 * 512);
  return bytes == 0 || *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *free = 12 * kGiB;
  *total = 16 * kGiB;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(next_event++);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "fake CUDA error"; }

}  // extern "C"
