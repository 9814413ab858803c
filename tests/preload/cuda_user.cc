// A library that allocates device memory, as a framework's does, for the preload's tests: from
// several threads at once, and from its constructor (before libmonet_preload.so's own constructor
// has run) where FAKE_CUDA_ALLOCATE_EARLY is set.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

// Allocates, checks and frees on four threads; prints what cudaMemGetInfo says, and the first
// error where a call failed. 0 when every call succeeded.
int allocate_and_free(const char* when) {
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<int> failures(kThreads, 0);
  std::vector<cudaError_t> first_error(kThreads, cudaSuccess);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures, &first_error] {
      const auto failed = [&](cudaError_t status) {
        if (status == cudaSuccess) return false;
        if (first_error[t] == cudaSuccess) first_error[t] = status;
        return true;
      };
      for (int r = 0; r < kRounds; ++r) {
        void* p = nullptr;
        const size_t bytes = static_cast<size_t>((t * kRounds + r) % 7 + 1) << 18;
        const cudaError_t status = cudaMalloc(&p, bytes);
        if (failed(status) || p == nullptr) ++failures[t];
        if (status != cudaSuccess && p != nullptr) ++failures[t];  // a failure leaves no pointer
        if (p != nullptr) static_cast<volatile char*>(p)[bytes - 1] = 1;
        if (failed(cudaFree(p))) ++failures[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int failed = 0;
  cudaError_t first = cudaSuccess;
  for (int t = 0; t < kThreads; ++t) {
    failed += failures[t];
    if (first == cudaSuccess) first = first_error[t];
  }
  size_t free = 0, total = 0;
  const cudaError_t info = cudaMemGetInfo(&free, &total);
  if (failed != 0) {
    std::printf("%s: %d of %d calls failed (first error %d); cudaMemGetInfo %d\n", when, failed,
                2 * kThreads * kRounds, static_cast<int>(first), static_cast<int>(info));
  } else {
    std::printf("%s: %d of %d calls failed; cudaMemGetInfo %d, total %zu\n", when, failed,
                2 * kThreads * kRounds, static_cast<int>(info), total);
  }
  std::fflush(stdout);
  return failed == 0 && info == cudaSuccess ? 0 : 1;
}

__attribute__((constructor)) void allocate_early() {
  if (std::getenv("FAKE_CUDA_ALLOCATE_EARLY") != nullptr) allocate_and_free("early");
}

}  // namespace

// Where FAKE_CUDA_FREE_TWICE is set: a block freed twice, as CUDA answers it (the second free is
// cudaErrorInvalidValue), and a block allocated after it, freed once.
int free_twice() {
  void* p = nullptr;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess) return 1;
  const cudaError_t first = cudaFree(p);
  const cudaError_t second = cudaFree(p);
  void* q = nullptr;
  const cudaError_t again = cudaMalloc(&q, 1 << 20);
  const cudaError_t last = cudaFree(q);
  std::printf("free twice: first %d, second %d, then malloc %d, free %d\n", static_cast<int>(first),
              static_cast<int>(second), static_cast<int>(again), static_cast<int>(last));
  std::fflush(stdout);
  return 0;
}

extern "C" __attribute__((visibility("default"))) int fake_cuda_user_run() {
  if (std::getenv("FAKE_CUDA_FREE_TWICE") != nullptr && free_twice() != 0) return 1;
  return allocate_and_free("run");
}
