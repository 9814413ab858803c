// Where a variant's kernels run: CPU loops, or kernels/cuda/ launchers on LibTorch's current
// stream. The CUDA branch only compiles where LibTorch has CUDA (MONET_TORCH_HAS_CUDA) and nvcc
// built the launchers (MONET_HAVE_CUDA).
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#if defined(MONET_TORCH_HAS_CUDA) && defined(MONET_HAVE_CUDA)
#define MONET_CUDA_KERNELS 1
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/cuda/launchers.h"
#endif

namespace monet::kernels {

// True for data of `type` on the CPU; false for float32 data on a CUDA device, which the
// launchers take; otherwise throws, naming `op` and what would run it.
inline bool on_cpu(c10::Device device, at::ScalarType type, std::string_view op) {
  if (device.is_cpu()) return true;
#ifdef MONET_CUDA_KERNELS
  if (device.is_cuda() && type == at::kFloat) return false;
#endif
  TORCH_CHECK(false, "monet: the compact ", op,
              " runs on CPU tensors, and on float32 CUDA tensors where monet and LibTorch were "
              "both built with CUDA; got a ",
              type, " tensor on ", device, ". Run this stage with OpMode::kDefault.");
}

// True for float32 data on a CUDA device where monet and LibTorch were both built with CUDA: the
// data kernels/cuda/'s launchers take.
inline bool cuda_kernels_take(const at::Tensor& t) {
#ifdef MONET_CUDA_KERNELS
  return t.is_cuda() && t.scalar_type() == at::kFloat;
#else
  (void)t;
  return false;
#endif
}

// True where the 1-bit masks (ReLU's, dropout's) can be kept for `t`'s data: on the CPU (loops,
// any floating dtype), and on a CUDA device where monet and LibTorch were both built with CUDA:
// float32 through kernels/cuda/, other dtypes (float16, bfloat16: a half-precision model, or
// autocast's activations; float64) through ATen operations (kernels/bit_pack.h, `*_aten`).
// Elsewhere relu and dropout run torch's own op in every mode.
inline bool masks_run_on(const at::Tensor& t) {
#ifdef MONET_CUDA_KERNELS
  if (t.is_cuda()) return true;
#endif
  return t.is_cpu();
}

// True where max pooling's 4-bit codes can be kept: CPU tensors of any floating dtype, and float32
// CUDA tensors (cuda_kernels_take). Elsewhere max_pool2d runs torch's own op in every mode.
inline bool pool_codes_run_on(const at::Tensor& t) { return t.is_cpu() || cuda_kernels_take(t); }

// The same for a tensor of the data (not a mask of it).
inline bool on_cpu(const at::Tensor& t, std::string_view op) {
  return on_cpu(t.device(), t.scalar_type(), op);
}

#ifdef MONET_CUDA_KERNELS
inline cudaStream_t stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}
#endif

}  // namespace monet::kernels
