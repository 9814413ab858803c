// monet's allocator from LibTorch: route tensors through it, read what it did.
//
//   monet::install();                       // once, at start
//   ... train ...
//   std::cout << monet::format_stats(monet::memory_stats());
//
// The budget comes from MONET_BUDGET (see README): it caps every byte monet holds from the
// training device, cached or in use. A request beyond it first empties monet's cache, and then
// fails with c10::OutOfMemoryError (torch.cuda.OutOfMemoryError in Python) whose message names
// the numbers and the knob.
#pragma once

#include <string>

#include "monet/memory_stats.h"

namespace monet {

// The device index of the CPU in the calls below; CUDA devices are 0, 1, ...
constexpr int kCpu = -1;

// Routes every new LibTorch CPU tensor through monet's CPU pool, and, when monet and LibTorch
// were built with CUDA and a GPU is present, every CUDA tensor through monet's CUDA pools
// (PyTorch's pluggable-allocator hook; call before the first CUDA tensor is made: after it,
// PyTorch refuses the swap and install() throws monet::ConfigError saying so). Reads and checks
// the allocator's MONET_* variables (MONET_BUDGET, MONET_CPU_BUDGET, MONET_CUDA_SEGMENTS,
// MONET_LOG, MONET_STATS, MONET_TRACE): a malformed one throws monet::ConfigError; the runtime's
// (MONET_MARGIN, MONET_PLANNER, ...) are checked by Options::from_env(). Idempotent.
void install();

// Statistics of the pool of `device` (kCpu or a CUDA index). Throws std::out_of_range for a
// CUDA device monet cannot use.
MemoryStats memory_stats(int device = kCpu);

// Releases the cached blocks of every pool back to the device (like torch.cuda.empty_cache()).
void empty_cache();

}  // namespace monet
