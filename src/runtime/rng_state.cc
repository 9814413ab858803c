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

#ifdef MONET_TORCH_HAS_CUDA
at::Tensor state_of(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}
#endif

// Calls f(generator) on the default CPU generator, holding its lock.
template <typename F>
void with_cpu_generator(F&& f) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  f(*generator.get<at::CPUGeneratorImpl>());
}

}  // namespace

RngState RngState::capture() {
  RngState s;
  with_cpu_generator([&](at::CPUGeneratorImpl& cpu) {
    s.cpu_engine_ = cpu.engine();
    s.cpu_next_float_ = cpu.next_float_normal_sample();
    s.cpu_next_double_ = cpu.next_double_normal_sample();
  });
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
  with_cpu_generator([&](at::CPUGeneratorImpl& cpu) {
    cpu.set_engine(cpu_engine_);
    cpu.set_next_float_normal_sample(cpu_next_float_);
    cpu.set_next_double_normal_sample(cpu_next_double_);
  });
#ifdef MONET_TORCH_HAS_CUDA
  for (std::size_t d = 0; d < cuda_.size(); ++d) {
    set_state(at::cuda::detail::getDefaultCUDAGenerator(static_cast<int>(d)), cuda_[d]);
  }
#endif
}

}  // namespace monet
