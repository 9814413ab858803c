// monet's CUDA kernels on raw device pointers: no LibTorch here, so they build and are tested
// against any CUDA toolkit, whatever LibTorch the project uses. Every launcher enqueues on
// `stream` and returns at once; errors surface through cudaGetLastError or the next sync.
//
// Bit masks are packed 32 to a word: element i is bit (i % 32) of word i / 32, as on the CPU
// (kernels/bit_pack.h). Pooling codes are packed two to a byte: output element i is the low
// nibble of byte i / 2 when i is even, the high nibble when odd.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace monet::cuda {

// Words needed for n bits.
inline std::int64_t mask_words(std::int64_t n) { return (n + 31) / 32; }

// y = relu(x) (NaN stays NaN) and mask bit i = !(y[i] <= 0) (1 for NaN, as torch's ReLU backward
// passes the gradient there), for n elements.
void launch_relu_pack(const float* x, float* y, std::uint32_t* mask, std::int64_t n,
                      cudaStream_t stream);
// grad_x[i] = mask bit i ? grad_y[i] : 0 (ReLU's and fused BatchNorm-ReLU's backward).
void launch_mask_select(const float* grad_y, const std::uint32_t* mask, float* grad_x,
                        std::int64_t n, cudaStream_t stream);
// mask bit i = (t[i] != 0).
void launch_pack_nonzero(const float* t, std::uint32_t* mask, std::int64_t n, cudaStream_t stream);
// mask bit i = (t[i] != 0) for bytes (a bool tensor's, as torch's CUDA dropout returns its mask).
void launch_pack_bytes(const std::uint8_t* t, std::uint32_t* mask, std::int64_t n,
                       cudaStream_t stream);
// ReLU's mask read off its output: bit i = !(t[i] <= 0), 1 for NaN.
void launch_pack_relu_mask(const float* t, std::uint32_t* mask, std::int64_t n,
                           cudaStream_t stream);
// out[i] = x[i] * (mask bit i ? scale : 0) (dropout's masking, one pass).
void launch_scale_by_mask(const float* x, const std::uint32_t* mask, float scale, float* out,
                          std::int64_t n, cudaStream_t stream);
// out[i] = mask bit i ? 1 : 0.
void launch_unpack(const std::uint32_t* mask, float* out, std::int64_t n, cudaStream_t stream);
// Regenerating dropout's keep mask: bit i = counter_bits(seed, offset + i) >= threshold
// (kernels/counter_rng.h; threshold = drop_threshold(p)).
void launch_dropout_keep_mask(std::uint64_t seed, std::uint64_t offset, std::uint64_t threshold,
                              std::uint32_t* mask, std::int64_t n, cudaStream_t stream);

// The geometry of a 2-d max pooling over `planes` planes of height x width, NCHW-contiguous.
struct PoolGeometry {
  std::int64_t planes, height, width, out_height, out_width;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};
// y = max pool of x, and codes[o] = the argmax's position within its window (dh * kernel_w + dw),
// 4 bits per output (kernel_h * kernel_w <= 16). The first maximum in window order wins, and a
// NaN wins over numbers and over an earlier NaN: torch's `val > maxval || isnan(val)`.
void launch_max_pool2d_compact(const float* x, float* y, std::uint8_t* codes,
                               const PoolGeometry& geometry, cudaStream_t stream);
// grad_x (planes x height x width, every element written) receives grad_y at each window's
// argmax, summed where windows overlap in torch's order (output rows, then columns): the same
// numbers as torch's CUDA op, on every run.
void launch_max_pool2d_compact_backward(const float* grad_y, const std::uint8_t* codes,
                                        float* grad_x, const PoolGeometry& geometry,
                                        cudaStream_t stream);

}  // namespace monet::cuda
