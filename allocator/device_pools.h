// The process's pools: one for CPU memory and one per CUDA device, each made on first use with
// the budget and trace that the MONET_* variables ask for, and never destroyed (LibTorch frees
// tensors during static destruction, after any destructor of ours would have run).
//
// MONET_BUDGET caps the training device: every CUDA device when CUDA is in use, else the CPU.
// With CUDA in use, MONET_CPU_BUDGET caps the CPU pool.
//
// fork() is safe: the pools' locks are held across it and let go in both processes, and a child
// keeps a copy of every pool as it was, but records no trace. The trace (MONET_TRACE) is opened
// with the first pool; a process started while another one writes it writes its own (TraceWriter).
#pragma once

#include <vector>

#include "allocator/caching_allocator.h"

namespace monet {

struct CudaApi;

namespace pools {

// The CUDA runtime the CUDA pools use. Call before the first pool is made (so that the CPU pool
// knows whether it is the training device); nullptr or an API without devices means CPU only.
void set_cuda_api(const CudaApi* api);

// The number of CUDA devices the pools can use (0 without CUDA).
int cuda_devices();

// Throws ConfigError for a malformed MONET_* value, OutOfMemoryError never.
CachingAllocator& cpu();
// `device` in [0, cuda_devices()); throws std::out_of_range otherwise.
CachingAllocator& cuda(int device);

// The pool of CUDA device `device` where one was made, else nullptr: never makes one (a pool makes
// a CUDA context on its device, hundreds of MiB outside any budget).
CachingAllocator* cuda_if_made(int device);

// Every pool made so far, CPU first.
std::vector<CachingAllocator*> all();

// Reads and checks every MONET_* variable the pools use, so that a bad value fails at start
// rather than at the first allocation. Throws ConfigError.
void validate_environment();

// Writes every pool's statistics to stderr, one block per pool.
void print_stats();

// Arranges for print_stats() at exit as MONET_STATS says: 1 always, 0 never, auto (the default)
// when `by_default` and some pool served an allocation, or when MONET_LOG is info or debug.
// Idempotent; the first call's `by_default` holds.
void report_at_exit(bool by_default);

// Whether any pool served an allocation.
bool any_allocations();

}  // namespace pools
}  // namespace monet
