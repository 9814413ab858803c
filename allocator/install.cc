// monet::install() and the other functions of include/monet/allocator.h.
#include "allocator/device_pools.h"
#include "allocator/torch_cpu_allocator.h"
#include "common/log.h"
#include "monet/allocator.h"
#include "monet/c_api.h"
#include "monet/errors.h"

#ifdef MONET_TORCH_HAS_CUDA
#include <fmt/format.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include "allocator/cuda_api.h"
#endif

namespace monet {
namespace {

#ifdef MONET_TORCH_HAS_CUDA
// Only the pools made so far can own `ptr`: making one to ask would make a CUDA context on its
// device, outside any budget.
void record_stream_anywhere(void* ptr, cudaStream_t stream) {
  for (int d = 0; d < pools::cuda_devices(); ++d) {
    CachingAllocator* pool = pools::cuda_if_made(d);
    if (pool != nullptr && pool->owns(ptr)) {
      pool->record_stream(ptr, reinterpret_cast<Stream>(stream));
      return;
    }
  }
}

void install_cuda_allocator() {
  namespace pluggable = torch::cuda::CUDAPluggableAllocator;
  // Generic lambdas: the device parameter is int in some 2.x releases and c10::DeviceIndex in
  // others.
  auto allocator = pluggable::createCustomAllocator(
      [](size_t size, auto device, cudaStream_t stream) {
        return monet_malloc(static_cast<ssize_t>(size), static_cast<int>(device), stream);
      },
      [](void* ptr, size_t size, auto device, cudaStream_t stream) {
        monet_free(ptr, static_cast<ssize_t>(size), static_cast<int>(device), stream);
      });
  if (auto p = std::dynamic_pointer_cast<pluggable::CUDAPluggableAllocator>(allocator)) {
    p->set_record_stream_fn(&record_stream_anywhere);
  }
  try {
    pluggable::changeCurrentAllocator(allocator);
  } catch (const c10::Error& e) {
    // PyTorch refuses to swap an allocator that has served memory.
    throw ConfigError(fmt::format(
        "monet::install() came after LibTorch's CUDA allocator had started ({}); call it before "
        "the first CUDA tensor is made, e.g. first thing in main()",
        e.what_without_backtrace()));
  }
}
#endif

// The CUDA devices monet serves, found once and before any pool is made: the CPU pool takes its
// budget from MONET_CPU_BUDGET where a GPU trains (else MONET_BUDGET), whichever of install(),
// memory_stats() and empty_cache() comes first.
void find_devices() {
#ifdef MONET_TORCH_HAS_CUDA
  static const bool found = [] {
    pools::set_cuda_api(&linked_cuda_api());
    return true;
  }();
  (void)found;
#endif
}

}  // namespace

void install() {
  static const bool done = [] {
    pools::validate_environment();
    find_devices();
#ifdef MONET_TORCH_HAS_CUDA
    if (pools::cuda_devices() > 0) install_cuda_allocator();
#endif
    install_cpu_allocator();
    pools::report_at_exit(/*by_default=*/false);
    log(LogLevel::kInfo, "installed; {} CUDA device(s)", pools::cuda_devices());
    return true;
  }();
  (void)done;
}

MemoryStats memory_stats(int device) {
  find_devices();
  return device == kCpu ? pools::cpu().stats() : pools::cuda(device).stats();
}

void empty_cache() {
  find_devices();
  for (CachingAllocator* pool : pools::all()) pool->release_cached();
}

}  // namespace monet
