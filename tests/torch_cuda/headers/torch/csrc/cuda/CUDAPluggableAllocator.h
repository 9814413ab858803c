// The part of LibTorch 2.x's torch/csrc/cuda/CUDAPluggableAllocator.h that allocator/install.cc
// calls, with the same signatures, for compiling it against LibTorch 1.13's CUDA headers
// (tests/torch_cuda/CMakeLists.txt). 1.13 has neither this header nor the CUDAAllocator base.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>

namespace c10::cuda::CUDACachingAllocator {
struct CUDAAllocator {
  virtual ~CUDAAllocator() = default;
};
}  // namespace c10::cuda::CUDACachingAllocator

namespace torch::cuda::CUDAPluggableAllocator {

std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> createCustomAllocator(
    std::function<void*(size_t, int, cudaStream_t)> alloc_fn,
    std::function<void(void*, size_t, int, cudaStream_t)> free_fn);

void changeCurrentAllocator(
    const std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator>& allocator);

struct CUDAPluggableAllocator : public c10::cuda::CUDACachingAllocator::CUDAAllocator {
  void set_record_stream_fn(std::function<void(void* ptr, cudaStream_t stream)> record_stream_fn);
};

}  // namespace torch::cuda::CUDAPluggableAllocator
