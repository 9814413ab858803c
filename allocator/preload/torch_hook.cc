// libmonet_preload_torch.so: loaded by libmonet_preload.so into a process that has loaded its
// own CPU-only LibTorch. Links c10 (which binds to the process's copy) and libmonet_preload.so
// (whose pools it uses), nothing else.
#include "allocator/torch_cpu_allocator.h"

extern "C" __attribute__((visibility("default"))) void monet_preload_install_cpu() {
  monet::install_cpu_allocator();
}
