// Autocast (mixed precision: at::autocast's per-thread switches, torch.autocast in Python) as
// monet's ops and checkpoints follow it, on the two device types monet runs on, CPU and CUDA.
// LibTorch 1.13 and 2.x name its switches differently; this header hides which.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "common/torch_compat.h"

namespace monet::kernels {

// The calling thread's autocast switches on CPU and CUDA: whether each is on, and the dtype its
// lower-precision ops (convolutions, matrix products) run in. The defaults are torch's.
struct AutocastState {
  bool cpu = false;
  bool cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
  at::ScalarType cuda_dtype = at::kHalf;

  static AutocastState current();
  bool operator==(const AutocastState& o) const;
  bool operator!=(const AutocastState& o) const { return !(*this == o); }
  // "off", "bfloat16 on cpu", "float16 on cuda", "bfloat16 on cpu, float16 on cuda".
  std::string describe() const;
};

// Sets `state` as the calling thread's for the scope's lifetime and puts back the one before. A
// scope that turns autocast on where it was off counts as an autocast region, as torch.autocast
// does: the casts of parameters autocast cached during it are dropped when it ends.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& state);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState before_;
  bool region_ = false;
};

// Turns autocast's cache of cast parameters off for the scope's lifetime, and puts back what it
// was. A forward without grad inside an autocast region (a checkpointed segment's) must not fill
// it: a parameter's cast made without grad has no path back to the parameter, and the segment's
// recomputation, like every later use of that parameter in the region, would take the cast from
// the cache and leave the parameter without a gradient. Nor the recomputation: its casts would
// stay cached to the region's end, where the memory model frees them with the segment.
class AutocastCacheOff {
 public:
  AutocastCacheOff();
  ~AutocastCacheOff();
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool before_;
};

// The dtype torch's convolutions run in for input `x`: autocast's, where autocast is on for x's
// device type (CPU or CUDA) and x is a floating tensor other than double; none otherwise.
compat::optional<at::ScalarType> autocast_lower_precision(const at::Tensor& x);

// `t` in `dtype` through autocast's cache, as torch's autocast casts the arguments of its
// lower-precision ops (a parameter's cast is made once per autocast region); `t` itself where it
// is undefined or not eligible for `x_device`'s autocast.
at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType dtype, c10::DeviceType x_device);

}  // namespace monet::kernels
