#include "kernels/autocast.h"

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <torch/version.h>

#include "kernels/dtype_name.h"

namespace monet::kernels {
namespace {

// LibTorch 2.4 took a device type in each switch; 1.13 has one function per device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
at::ScalarType dtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set(c10::DeviceType d, bool on, at::ScalarType t) {
  at::autocast::set_autocast_enabled(d, on);
  at::autocast::set_autocast_dtype(d, t);
}
#else
bool enabled(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
at::ScalarType dtype(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                   : at::autocast::get_autocast_gpu_dtype();
}
void set(c10::DeviceType d, bool on, at::ScalarType t) {
  if (d == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(on);
    at::autocast::set_autocast_cpu_dtype(t);
  } else {
    at::autocast::set_enabled(on);
    at::autocast::set_autocast_gpu_dtype(t);
  }
}
#endif

bool eligible(const at::Tensor& t, c10::DeviceType d) {
  return t.defined() && t.device().type() == d && t.is_floating_point() &&
         t.scalar_type() != at::kDouble;
}

}  // namespace

AutocastState AutocastState::current() {
  AutocastState s;
  s.cpu = enabled(c10::DeviceType::CPU);
  s.cuda = enabled(c10::DeviceType::CUDA);
  s.cpu_dtype = dtype(c10::DeviceType::CPU);
  s.cuda_dtype = dtype(c10::DeviceType::CUDA);
  return s;
}

bool AutocastState::operator==(const AutocastState& o) const {
  // A switch that is off casts nothing, whatever its dtype.
  return cpu == o.cpu && cuda == o.cuda && (!cpu || cpu_dtype == o.cpu_dtype) &&
         (!cuda || cuda_dtype == o.cuda_dtype);
}

std::string AutocastState::describe() const {
  std::string out;
  if (cpu) out = dtype_name(cpu_dtype) + " on cpu";
  if (cuda) out += (out.empty() ? "" : ", ") + dtype_name(cuda_dtype) + " on cuda";
  return out.empty() ? "off" : out;
}

AutocastScope::AutocastScope(const AutocastState& state) : before_(AutocastState::current()) {
  region_ = (state.cpu || state.cuda) && !before_.cpu && !before_.cuda;
  if (region_) at::autocast::increment_nesting();
  set(c10::DeviceType::CPU, state.cpu, state.cpu_dtype);
  set(c10::DeviceType::CUDA, state.cuda, state.cuda_dtype);
}

AutocastScope::~AutocastScope() {
  set(c10::DeviceType::CPU, before_.cpu, before_.cpu_dtype);
  set(c10::DeviceType::CUDA, before_.cuda, before_.cuda_dtype);
  if (region_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

AutocastCacheOff::AutocastCacheOff() : before_(at::autocast::is_autocast_cache_enabled()) {
  at::autocast::set_autocast_cache_enabled(false);
}

AutocastCacheOff::~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(before_); }

compat::optional<at::ScalarType> autocast_lower_precision(const at::Tensor& x) {
  if (!x.defined()) return compat::nullopt;
  const c10::DeviceType d = x.device().type();
  if (d != c10::DeviceType::CPU && d != c10::DeviceType::CUDA) return compat::nullopt;
  if (!eligible(x, d) || !enabled(d)) return compat::nullopt;
  return dtype(d);
}

at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType to, c10::DeviceType x_device) {
  if (!eligible(t, x_device)) return t;
  return at::autocast::cached_cast(to, t, x_device);
}

}  // namespace monet::kernels
