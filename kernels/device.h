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

// True where the variants' own kernels (the masks, the pooling codes) take `t`'s data: every
// floating dtype on the CPU; float32 on a CUDA device, where monet and LibTorch were both built
// with CUDA. Elsewhere (float16, bfloat16 or float64 on CUDA: a half-precision model, autocast's
// activations; other devices) relu, dropout and max_pool2d run torch's own op in every mode, and
// keep what torch's keeps.
inline bool has_kernels(const at::Tensor& t) {
  if (t.device().is_cpu()) return true;
#ifdef MONET_CUDA_KERNELS
  return t.device().is_cuda() && t.scalar_type() == at::kFloat;
#else
  return false;
#endif
}

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
