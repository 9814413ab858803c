// monet's pool as LibTorch's CPU allocator (a c10::Allocator). Needs only c10, so that the
// preload's companion library can bring it into a process that loaded its own LibTorch.
#pragma once

namespace monet {

// Makes monet's CPU pool the allocator of every new CPU tensor (c10::SetCPUAllocator, at a
// priority above LibTorch's default). Idempotent.
void install_cpu_allocator();

// True once install_cpu_allocator() has run in this process.
bool cpu_allocator_installed();

}  // namespace monet
