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

// True for a CPU tensor; false for a float32 CUDA tensor that the launchers take; otherwise
// throws, naming `op` and what would run it.
inline bool on_cpu(const at::Tensor& t, std::string_view op) {
  if (t.device().is_cpu()) return true;
#ifdef MONET_CUDA_KERNELS
  if (t.device().is_cuda() && t.scalar_type() == at::kFloat) return false;
#endif
  TORCH_CHECK(false, "monet: the compact ", op,
              " runs on CPU tensors, and on float32 CUDA tensors where monet and LibTorch were "
              "both built with CUDA; got a ",
              t.scalar_type(), " tensor on ", t.device(),
              ". Run this stage with OpMode::kDefault.");
}

#ifdef MONET_CUDA_KERNELS
inline cudaStream_t stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}
#endif

}  // namespace monet::kernels
