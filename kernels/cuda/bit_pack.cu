// ReLU, mask packing and regenerating dropout's mask on raw device pointers (launchers.h).
// One thread per 32-bit word: it reads its 32 elements and writes one word, no atomics.
#include <cstdint>

#include "kernels/counter_rng.h"
#include "kernels/cuda/launchers.h"

namespace monet::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t work) {
  return static_cast<unsigned>((work + kThreads - 1) / kThreads);
}

__global__ void relu_pack_kernel(const float* x, float* y, std::uint32_t* mask, std::int64_t n) {
  const std::int64_t w = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t first = w * 32;
  if (first >= n) return;
  const std::int64_t count = n - first < 32 ? n - first : 32;
  std::uint32_t word = 0;
  for (std::int64_t b = 0; b < count; ++b) {
    const float v = x[first + b];
    const float r = v > 0.0f ? v : (v != v ? v : 0.0f);  // NaN propagates, as torch's relu
    y[first + b] = r;
    word |= static_cast<std::uint32_t>(r > 0.0f) << b;
  }
  mask[w] = word;
}

__global__ void pack_nonzero_kernel(const float* t, std::uint32_t* mask, std::int64_t n) {
  const std::int64_t w = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t first = w * 32;
  if (first >= n) return;
  const std::int64_t count = n - first < 32 ? n - first : 32;
  std::uint32_t word = 0;
  for (std::int64_t b = 0; b < count; ++b) {
    word |= static_cast<std::uint32_t>(t[first + b] != 0.0f) << b;
  }
  mask[w] = word;
}

__global__ void mask_select_kernel(const float* g, const std::uint32_t* mask, float* out,
                                   std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = ((mask[i / 32] >> (i % 32)) & 1u) ? g[i] : 0.0f;
}

__global__ void unpack_kernel(const std::uint32_t* mask, float* out, std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = ((mask[i / 32] >> (i % 32)) & 1u) ? 1.0f : 0.0f;
}

__global__ void dropout_keep_kernel(std::uint64_t seed, std::uint64_t offset,
                                    std::uint64_t threshold, std::uint32_t* mask, std::int64_t n) {
  const std::int64_t w = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t first = w * 32;
  if (first >= n) return;
  const std::int64_t count = n - first < 32 ? n - first : 32;
  std::uint32_t word = 0;
  for (std::int64_t b = 0; b < count; ++b) {
    const std::uint64_t index = offset + static_cast<std::uint64_t>(first + b);
    word |= static_cast<std::uint32_t>(monet::kernels::counter_bits(seed, index) >= threshold) << b;
  }
  mask[w] = word;
}

}  // namespace

void launch_relu_pack(const float* x, float* y, std::uint32_t* mask, std::int64_t n,
                      cudaStream_t stream) {
  if (n == 0) return;
  relu_pack_kernel<<<blocks_for(mask_words(n)), kThreads, 0, stream>>>(x, y, mask, n);
}

void launch_mask_select(const float* grad_y, const std::uint32_t* mask, float* grad_x,
                        std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  mask_select_kernel<<<blocks_for(n), kThreads, 0, stream>>>(grad_y, mask, grad_x, n);
}

void launch_pack_nonzero(const float* t, std::uint32_t* mask, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  pack_nonzero_kernel<<<blocks_for(mask_words(n)), kThreads, 0, stream>>>(t, mask, n);
}

void launch_unpack(const std::uint32_t* mask, float* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  unpack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(mask, out, n);
}

void launch_dropout_keep_mask(std::uint64_t seed, std::uint64_t offset, std::uint64_t threshold,
                              std::uint32_t* mask, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dropout_keep_kernel<<<blocks_for(mask_words(n)), kThreads, 0, stream>>>(seed, offset, threshold,
                                                                          mask, n);
}

}  // namespace monet::cuda
