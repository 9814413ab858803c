#include "allocator/torch_cpu_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstring>

#include "allocator/device_pools.h"
#include "common/torch_compat.h"
#include "monet/errors.h"

namespace monet {
namespace {

std::atomic<bool> g_installed{false};

// The DataPtr's context is the data pointer itself (PyTorch asserts this in raw_allocate), so
// the deleter finds the block by address.
void free_cpu(void* ptr) { pools::cpu().free(ptr); }

class CpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) MONET_ALLOCATE_CONST override {
    void* ptr = nullptr;
    try {
      ptr = pools::cpu().allocate(bytes);
    } catch (const OutOfMemoryError& e) {
      // PyTorch turns this type into torch.cuda.OutOfMemoryError (torch.OutOfMemoryError in 2.x).
      throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, e.what());
    }
    return {ptr, ptr, &free_cpu, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_cpu; }

#if MONET_TORCH_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count != 0) std::memcpy(dest, src, count);
  }
#endif
};

}  // namespace

void install_cpu_allocator() {
  static CpuAllocator allocator;
  if (g_installed.exchange(true)) return;
  pools::cpu();  // make the pool now, so that a bad MONET_* value fails here, at start
  // LibTorch registers its default CPU allocator at priority 0; a higher one wins whatever the
  // order of static initialisation.
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
}

bool cpu_allocator_installed() { return g_installed.load(); }

}  // namespace monet
