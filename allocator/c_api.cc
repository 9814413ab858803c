// The C functions of include/monet/c_api.h, over the process's pools.
#include "monet/c_api.h"

#include <c10/util/Exception.h>

#include "allocator/device_pools.h"
#ifdef MONET_HAVE_CUDA
#include "allocator/cuda_api.h"
#endif
#include "monet/errors.h"

namespace {

// Loaded by PyTorch's pluggable hook, libmonet is used without monet::install(): the first call
// checks the MONET_* variables as install() does (a malformed one is a ConfigError, not a silent
// default), and readies the CUDA pools and the report at exit.
monet::CachingAllocator& pool(int device) {
  static const bool ready = [] {
    monet::pools::validate_environment();
#ifdef MONET_HAVE_CUDA
    if (monet::pools::cuda_devices() == 0) monet::pools::set_cuda_api(&monet::linked_cuda_api());
#endif
    monet::pools::report_at_exit(/*by_default=*/true);
    return true;
  }();
  (void)ready;
  // -1 is the host (c_api.h); any other index, negative ones too, a CUDA device or out_of_range.
  return device == -1 ? monet::pools::cpu() : monet::pools::cuda(device);
}

monet::Stream as_stream(cudaStream_t stream) { return reinterpret_cast<monet::Stream>(stream); }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* monet_malloc(ssize_t size, int device,
                                                          cudaStream_t stream) {
  try {
    return pool(device).allocate(static_cast<size_t>(size), as_stream(stream));
  } catch (const monet::OutOfMemoryError& e) {
    throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, e.what());
  }
}

__attribute__((visibility("default"))) void monet_free(void* ptr, ssize_t, int device,
                                                       cudaStream_t) {
  pool(device).free(ptr);
}

__attribute__((visibility("default"))) void* monet_try_malloc(size_t size, int device,
                                                              cudaStream_t stream) {
  try {
    return pool(device).allocate(size, as_stream(stream));
  } catch (const monet::OutOfMemoryError&) {
    return nullptr;
  }
}

__attribute__((visibility("default"))) void monet_record_stream(void* ptr, int device,
                                                                cudaStream_t stream) {
  pool(device).record_stream(ptr, as_stream(stream));
}

__attribute__((visibility("default"))) void monet_memory_info(int device, size_t* allocated,
                                                              size_t* reserved, size_t* budget) {
  const monet::MemoryStats s = pool(device).stats();
  if (allocated) *allocated = s.allocated_bytes;
  if (reserved) *reserved = s.reserved_bytes;
  if (budget) *budget = s.budget_bytes;
}

}  // extern "C"
