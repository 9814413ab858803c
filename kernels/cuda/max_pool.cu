// 2-d max pooling with 4-bit argmax codes, and its backward, on raw device pointers
// (launchers.h). Forward: one thread per pair of outputs, so that each byte of codes has one
// writer. Backward: one thread per input element, gathering from the windows that hold it.
#include <algorithm>
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
      // torch's rule (`val > maxval || isnan(val)`): the first maximum wins, and every NaN
      // beats what came before it, an earlier NaN included, so the last NaN wins.
      if (best_code < 0 || v > best || v != v) {
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

// The output rows (or columns) whose windows hold input row (or column) h: [first, last).
// extent is the window's span, dilation * (kernel - 1) + 1. Two divisions, where testing each
// window position cost two each (64-bit divisions, a dozen a thread, ran the backward at 1.7x
// torch's time on an H200).
// Index: the type of a row or column (int where a plane's positions fit in it).
template <class Index>
struct Range {
  Index first, last;
};
template <class Index>
__device__ Range<Index> windows_holding(Index h, Index pad, Index extent, Index stride, Index out) {
  const Index from = h + pad;  // >= 0
  const Index first = from < extent ? 0 : (from - extent) / stride + 1;
  const Index last = min(from / stride + 1, out);
  return {first, last};
}

// One thread per input element of a plane, planes strided over the grid's y: it adds the
// gradients of the windows whose code picks it, in torch's order (output rows, then columns,
// ascending), so that where windows overlap the sum is torch's, bit for bit, and the same on
// every run (no atomics). Index: the type of a position within one plane, and of its rows and
// columns (a plane of 2^31 positions or more may have that many rows).
template <class Index>
__global__ void max_pool_backward_kernel(const float* gy, const std::uint8_t* codes, float* gx,
                                         PoolGeometry g) {
  const Index per_plane = static_cast<Index>(g.height * g.width);
  const Index r = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) +
                  static_cast<Index>(threadIdx.x);
  if (r >= per_plane) return;
  const Index width = static_cast<Index>(g.width), out_width = static_cast<Index>(g.out_width);
  const Index h = r / width, w = r % width;
  const Range<Index> rows = windows_holding<Index>(h, g.pad_h, g.dilation_h * (g.kernel_h - 1) + 1,
                                                   g.stride_h, static_cast<Index>(g.out_height));
  const Range<Index> cols = windows_holding<Index>(w, g.pad_w, g.dilation_w * (g.kernel_w - 1) + 1,
                                                   g.stride_w, out_width);
  const std::int64_t out_plane = g.out_height * g.out_width;
  for (std::int64_t p = blockIdx.y; p < g.planes; p += gridDim.y) {
    const std::int64_t base = p * out_plane;
    float sum = 0.0f;
    for (Index oh = rows.first; oh < rows.last; ++oh) {
      const int di = static_cast<int>(h + g.pad_h - oh * g.stride_h);  // in [0, extent)
      if (di % g.dilation_h != 0) continue;
      const int i = di / g.dilation_h;
      for (Index ow = cols.first; ow < cols.last; ++ow) {
        const int dj = static_cast<int>(w + g.pad_w - ow * g.stride_w);
        if (dj % g.dilation_w != 0) continue;
        const int j = dj / g.dilation_w;
        const std::int64_t o = base + static_cast<std::int64_t>(oh) * out_width + ow;
        const int code = (codes[o / 2] >> ((o & 1) * 4)) & 0xF;
        if (code == i * g.kernel_w + j) sum += gy[o];
      }
    }
    gx[p * static_cast<std::int64_t>(per_plane) + r] = sum;
  }
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
  const std::int64_t per_plane = geometry.height * geometry.width;
  if (per_plane == 0 || geometry.planes == 0) return;
  const dim3 grid(static_cast<unsigned>((per_plane + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<std::int64_t>(geometry.planes, 65535)));
  // 32-bit positions (and divisions) where a plane's positions fit in them.
  if (per_plane < (std::int64_t{1} << 31) - kThreads) {
    max_pool_backward_kernel<int><<<grid, kThreads, 0, stream>>>(grad_y, codes, grad_x, geometry);
  } else {
    max_pool_backward_kernel<std::int64_t>
        <<<grid, kThreads, 0, stream>>>(grad_y, codes, grad_x, geometry);
  }
}

}  // namespace monet::cuda
