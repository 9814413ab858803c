#include "runtime/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>

#ifdef MONET_TORCH_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

namespace monet {
namespace {

at::Tensor state_of(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

RngState RngState::capture() {
  RngState s;
  s.cpu_ = state_of(at::detail::getDefaultCPUGenerator());
#ifdef MONET_TORCH_HAS_CUDA
  if (at::globalContext().hasCUDA()) {
    const int devices = static_cast<int>(at::cuda::getNumGPUs());
    for (int d = 0; d < devices; ++d) {
      s.cuda_.push_back(state_of(at::cuda::detail::getDefaultCUDAGenerator(d)));
    }
  }
#endif
  return s;
}

void RngState::restore() const {
  set_state(at::detail::getDefaultCPUGenerator(), cpu_);
#ifdef MONET_TORCH_HAS_CUDA
  for (std::size_t d = 0; d < cuda_.size(); ++d) {
    set_state(at::cuda::detail::getDefaultCUDAGenerator(static_cast<int>(d)), cuda_[d]);
  }
#endif
}

}  // namespace monet
