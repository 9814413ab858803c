// A library that allocates device memory, as a framework's does, for the preload's tests: from
// several threads at once, and from its constructor (before libmonet_preload.so's own constructor
// has run) where FAKE_CUDA_ALLOCATE_EARLY is set.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

// Allocates, checks and frees on four threads; prints what cudaMemGetInfo says. 0 when every call
// succeeded.
int allocate_and_free(const char* when) {
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      for (int r = 0; r < kRounds; ++r) {
        void* p = nullptr;
        const size_t bytes = static_cast<size_t>((t * kRounds + r) % 7 + 1) << 18;
        if (cudaMalloc(&p, bytes) != cudaSuccess || p == nullptr) ++failures[t];
        if (p != nullptr) static_cast<volatile char*>(p)[bytes - 1] = 1;
        if (cudaFree(p) != cudaSuccess) ++failures[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int failed = 0;
  for (int f : failures) failed += f;
  size_t free = 0, total = 0;
  const cudaError_t info = cudaMemGetInfo(&free, &total);
  std::printf("%s: %d of %d calls failed; cudaMemGetInfo %d, total %zu\n", when, failed,
              2 * kThreads * kRounds, static_cast<int>(info), total);
  std::fflush(stdout);
  return failed == 0 && info == cudaSuccess ? 0 : 1;
}

__attribute__((constructor)) void allocate_early() {
  if (std::getenv("FAKE_CUDA_ALLOCATE_EARLY") != nullptr) allocate_and_free("early");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int fake_cuda_user_run() {
  return allocate_and_free("run");
}
