// 2-d max pooling with 4-bit argmax codes, and its backward, on raw device pointers
// (launchers.h). Forward: one thread per pair of outputs, so that each byte of codes has one
// writer. Backward: one thread per output, atomicAdd where windows overlap.
#include <cstdint>

#include "kernels/cuda/launchers.h"

namespace monet::cuda {
namespace {

constexpr int kThreads = 256;

__device__ std::uint8_t pool_one(const float* x, float* y, const PoolGeometry& g, std::int64_t o) {
  const std::int64_t per_plane = g.out_height * g.out_width;
  const std::int64_t p = o / per_plane, r = o % per_plane;
  const std::int64_t oh = r / g.out_width, ow = r % g.out_width;
  const float* plane = x + p * g.height * g.width;
  float best = 0.0f;
  int best_code = -1;
  for (int i = 0; i < g.kernel_h; ++i) {
    const std::int64_t h = oh * g.stride_h - g.pad_h + i * g.dilation_h;
    if (h < 0 || h >= g.height) continue;
    for (int j = 0; j < g.kernel_w; ++j) {
      const std::int64_t w = ow * g.stride_w - g.pad_w + j * g.dilation_w;
      if (w < 0 || w >= g.width) continue;
      const float v = plane[h * g.width + w];
      // The first maximum wins; a NaN beats every number (PyTorch's rule).
      if (best_code < 0 || v > best || (v != v && best == best)) {
        best = v;
        best_code = i * g.kernel_w + j;
      }
    }
  }
  y[o] = best;
  return static_cast<std::uint8_t>(best_code < 0 ? 0 : best_code);
}

__global__ void max_pool_kernel(const float* x, float* y, std::uint8_t* codes, PoolGeometry g,
                                std::int64_t n) {
  const std::int64_t b = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (2 * b >= n) return;
  std::uint8_t byte = pool_one(x, y, g, 2 * b);
  if (2 * b + 1 < n) byte |= static_cast<std::uint8_t>(pool_one(x, y, g, 2 * b + 1) << 4);
  codes[b] = byte;
}

__global__ void max_pool_backward_kernel(const float* gy, const std::uint8_t* codes, float* gx,
                                         PoolGeometry g, std::int64_t n) {
  const std::int64_t o = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (o >= n) return;
  const std::int64_t per_plane = g.out_height * g.out_width;
  const std::int64_t p = o / per_plane, r = o % per_plane;
  const std::int64_t oh = r / g.out_width, ow = r % g.out_width;
  const int code = (codes[o / 2] >> ((o & 1) * 4)) & 0xF;
  const std::int64_t h = oh * g.stride_h - g.pad_h + (code / g.kernel_w) * g.dilation_h;
  const std::int64_t w = ow * g.stride_w - g.pad_w + (code % g.kernel_w) * g.dilation_w;
  atomicAdd(gx + (p * g.height + h) * g.width + w, gy[o]);
}

}  // namespace

void launch_max_pool2d_compact(const float* x, float* y, std::uint8_t* codes,
                               const PoolGeometry& geometry, cudaStream_t stream) {
  const std::int64_t n = geometry.planes * geometry.out_height * geometry.out_width;
  if (n == 0) return;
  const std::int64_t pairs = (n + 1) / 2;
  max_pool_kernel<<<static_cast<unsigned>((pairs + kThreads - 1) / kThreads), kThreads, 0,
                    stream>>>(x, y, codes, geometry, n);
}

void launch_max_pool2d_compact_backward(const float* grad_y, const std::uint8_t* codes,
                                        float* grad_x, const PoolGeometry& geometry,
                                        cudaStream_t stream) {
  const std::int64_t n = geometry.planes * geometry.out_height * geometry.out_width;
  cudaMemsetAsync(
      grad_x, 0,
      static_cast<std::size_t>(geometry.planes * geometry.height * geometry.width) * sizeof(float),
      stream);
  if (n == 0) return;
  max_pool_backward_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
                             stream>>>(grad_y, codes, grad_x, geometry, n);
}

}  // namespace monet::cuda
