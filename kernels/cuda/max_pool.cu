// 2-d max pooling with 4-bit argmax codes, and its backward, on raw device pointers
// (launchers.h). Forward: one thread per pair of outputs, so that each byte of codes has one
// writer. Backward: one thread per input element, gathering from the windows that hold it.
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

// One thread per input element: it adds the gradients of the windows whose code picks it, in
// torch's order (output rows, then columns, ascending), so that where windows overlap the sum is
// torch's, bit for bit, and the same on every run (no atomics).
__global__ void max_pool_backward_kernel(const float* gy, const std::uint8_t* codes, float* gx,
                                         PoolGeometry g, std::int64_t n) {
  const std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n) return;
  const std::int64_t per_plane = g.height * g.width;
  const std::int64_t p = e / per_plane, r = e % per_plane;
  const std::int64_t h = r / g.width, w = r % g.width;
  float sum = 0.0f;
  // Window row i of output row oh holds h where oh * stride = h + pad - i * dilation: the larger
  // i, the smaller oh.
  for (int i = g.kernel_h - 1; i >= 0; --i) {
    const std::int64_t top = h + g.pad_h - static_cast<std::int64_t>(i) * g.dilation_h;
    if (top < 0 || top % g.stride_h != 0 || top / g.stride_h >= g.out_height) continue;
    const std::int64_t row = (p * g.out_height + top / g.stride_h) * g.out_width;
    for (int j = g.kernel_w - 1; j >= 0; --j) {
      const std::int64_t left = w + g.pad_w - static_cast<std::int64_t>(j) * g.dilation_w;
      if (left < 0 || left % g.stride_w != 0 || left / g.stride_w >= g.out_width) continue;
      const std::int64_t o = row + left / g.stride_w;
      const int code = (codes[o / 2] >> ((o & 1) * 4)) & 0xF;
      if (code == i * g.kernel_w + j) sum += gy[o];
    }
  }
  gx[e] = sum;
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
  const std::int64_t n = geometry.planes * geometry.height * geometry.width;
  if (n == 0) return;
  max_pool_backward_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
                             stream>>>(grad_y, codes, grad_x, geometry, n);
}

}  // namespace monet::cuda
