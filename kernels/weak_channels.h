// Which channels of a BatchNorm have a weight too small to invert: an output-keeping BatchNorm
// recovers x_hat = (y - bias) / weight, and y = x_hat * weight + bias is rounded once, so the
// recovered x_hat is off by about eps * (2 |x_hat| + |bias / weight|). Channels with
// |weight| < kInvertibleWeight * max(1, |bias|) keep their input slice instead (a ResNet's
// zero-initialized last BatchNorm is such a case).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace monet::kernels {

inline constexpr double kInvertibleWeight = 1e-2;

// The test as tensor ops on the weight's device: a bool per channel.
at::Tensor weak_channel_mask(const at::Tensor& weight, const at::Tensor& bias);

// The weak channels of BatchNorms' weights, cached until a weight or bias changes: their version
// counters (which every in-place update, an optimizer's step among them, moves) or their storage.
// Reading a device's test on the host waits for the device, and each wait drains the queue the
// host keeps ahead of it, so a weight whose entry is stale refreshes every stale entry of its
// device at once, with one wait: after an optimizer step, the first output-keeping BatchNorm of
// the next forward pays one wait for all of them, and a checkpoint's recomputed forward none.
// Entries hold weak references: a weight that is gone drops its entry at the next refresh.
// Thread-safe.
class WeakChannelCache {
 public:
  // The indices (int64, on the weight's device) of the weight's weak channels, or an undefined
  // tensor when there are none. `bias` may be undefined.
  at::Tensor lookup(const at::Tensor& weight, const at::Tensor& bias);
  // Entries held (weights seen whose tensors may still be alive).
  std::size_t size() const;
  // Batched tests run: each is one wait for its device.
  std::int64_t refreshes() const;

 private:
  using Impl = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Entry {
    WeakImpl weight{Impl()};
    WeakImpl bias{Impl()};
    std::int64_t weight_version = -1, bias_version = -1;
    const void* weight_data = nullptr;
    const void* bias_data = nullptr;
    at::Tensor weak;  // the weak channels' indices on the weight's device, or undefined
  };

  static bool current(const Entry& entry, const at::Tensor& weight, const at::Tensor& bias);
  void refresh(const at::Device& device);

  mutable std::mutex mutex_;
  std::unordered_map<const c10::TensorImpl*, Entry> entries_;
  std::int64_t refreshes_ = 0;
};

// The weak channels of `weight` (and `bias`, which may be undefined), as WeakChannelCache::lookup
// says. On the CPU one pass over the vectors, with no tensor made and nothing cached: six small
// ops would cost a CPU BatchNorm of a CNN's block a quarter of its forward time. On a device,
// from one process-wide WeakChannelCache.
at::Tensor weak_channels(const at::Tensor& weight, const at::Tensor& bias);

}  // namespace monet::kernels
