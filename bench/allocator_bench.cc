// An allocation and its free, served from monet's cache, against glibc malloc and against
// LibTorch's default CPU allocator, at sizes from a scalar to a large activation.
//
// Run: build/bench/allocator_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
// The target is a median under 100 ns for monet's cached pair.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "allocator/caching_allocator.h"
#include "allocator/host_backend.h"

#ifdef MONET_BENCH_TORCH
#include <c10/core/CPUAllocator.h>

#include "allocator/torch_cpu_allocator.h"
#endif

namespace {

void sizes(benchmark::internal::Benchmark* b) {
  for (long n : {64L, 4L << 10, 256L << 10, 4L << 20, 64L << 20}) b->Arg(n);
}

// Times the cached pair of state.range(0) bytes in a fresh pool over `backend`.
void time_cached_pairs(benchmark::State& state, monet::Backend& backend) {
  monet::CachingAllocator pool(backend, {});
  const auto n = static_cast<std::size_t>(state.range(0));
  pool.free(pool.allocate(n));  // warm the cache: the segment is reserved once
  for (auto _ : state) {
    void* p = pool.allocate(n);
    benchmark::DoNotOptimize(p);
    pool.free(p);
  }
}

void BM_MonetPool(benchmark::State& state) {
  monet::HostBackend backend;
  time_cached_pairs(state, backend);
}
BENCHMARK(BM_MonetPool)->Apply(sizes);

// The pool as monet's CPU pool holds memory: committed by 64 KiB granule (madvise), so that
// cached granules can be given back without giving back their segment.
void BM_MonetGranularPool(benchmark::State& state) {
  monet::HostBackend::Options host;
  host.granularity = std::size_t{64} << 10;
  monet::HostBackend backend(host);
  time_cached_pairs(state, backend);
}
BENCHMARK(BM_MonetGranularPool)->Apply(sizes);

void BM_GlibcMalloc(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(n);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_GlibcMalloc)->Apply(sizes);

#ifdef MONET_BENCH_TORCH
// Through c10::Allocator, as LibTorch calls it for every CPU tensor.
void BM_LibTorchDefaultCpu(benchmark::State& state) {
  c10::Allocator* allocator = c10::GetDefaultCPUAllocator();
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    c10::DataPtr p = allocator->allocate(n);
    benchmark::DoNotOptimize(p.get());
  }
}
BENCHMARK(BM_LibTorchDefaultCpu)->Apply(sizes);

void BM_MonetThroughC10(benchmark::State& state) {
  monet::install_cpu_allocator();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  const auto n = static_cast<std::size_t>(state.range(0));
  { c10::DataPtr warm = allocator->allocate(n); }
  for (auto _ : state) {
    c10::DataPtr p = allocator->allocate(n);
    benchmark::DoNotOptimize(p.get());
  }
}
BENCHMARK(BM_MonetThroughC10)->Apply(sizes);
#endif

}  // namespace
