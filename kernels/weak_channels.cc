#include "kernels/weak_channels.h"

#include <ATen/Dispatch.h>
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace monet::kernels {

at::Tensor weak_channel_mask(const at::Tensor& weight, const at::Tensor& bias) {
  const at::Tensor floor =
      bias.defined() ? bias.abs().clamp_min(1.0).to(weight.scalar_type()) : at::ones_like(weight);
  return weight.abs() < floor * kInvertibleWeight;
}

at::Tensor WeakChannelCache::lookup(const at::Tensor& weight, const at::Tensor& bias) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[weight.unsafeGetTensorImpl()];
  // An entry's weak reference keeps its TensorImpl's memory, so no other tensor can have this
  // address while the entry holds it: an entry found here is this weight's, or a new one.
  if (entry.weight.expired()) {
    entry = Entry{};
    entry.weight = WeakImpl(weight.getIntrusivePtr());
  }
  entry.bias = bias.defined() ? WeakImpl(bias.getIntrusivePtr()) : WeakImpl(Impl());
  if (!current(entry, weight, bias)) refresh(weight.device());
  return entry.weak;
}

std::size_t WeakChannelCache::size() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

std::int64_t WeakChannelCache::refreshes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return refreshes_;
}

bool WeakChannelCache::current(const Entry& entry, const at::Tensor& weight,
                               const at::Tensor& bias) {
  return entry.weight_version == static_cast<std::int64_t>(weight._version()) &&
         entry.weight_data == weight.data_ptr() &&
         entry.bias_version == (bias.defined() ? static_cast<std::int64_t>(bias._version()) : -1) &&
         entry.bias_data == (bias.defined() ? bias.data_ptr() : nullptr);
}

void WeakChannelCache::refresh(const at::Device& device) {
  struct Stale {
    Entry* entry;
    at::Tensor weight, bias;
  };
  std::vector<Stale> stale;
  std::vector<at::Tensor> masks;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Impl w = it->second.weight.lock();
    if (!w) {
      it = entries_.erase(it);
      continue;
    }
    at::Tensor weight(std::move(w));
    Impl b = it->second.bias.lock();
    at::Tensor bias = b ? at::Tensor(std::move(b)) : at::Tensor();
    if (weight.device() == device && !current(it->second, weight, bias)) {
      masks.push_back(weak_channel_mask(weight, bias));
      stale.push_back(Stale{&it->second, std::move(weight), std::move(bias)});
    }
    ++it;
  }
  if (stale.empty()) return;
  ++refreshes_;
  const at::Tensor all = at::cat(masks).to(at::kCPU);  // the one wait
  const bool* weak = all.data_ptr<bool>();
  std::int64_t offset = 0;
  for (Stale& s : stale) {
    std::vector<std::int64_t> indices;
    const std::int64_t channels = s.weight.numel();
    for (std::int64_t c = 0; c < channels; ++c) {
      if (weak[offset + c]) indices.push_back(c);
    }
    offset += channels;
    Entry& entry = *s.entry;
    entry.weak = indices.empty()
                     ? at::Tensor()
                     : at::tensor(indices, at::TensorOptions().dtype(at::kLong)).to(device);
    entry.weight_version = static_cast<std::int64_t>(s.weight._version());
    entry.weight_data = s.weight.data_ptr();
    entry.bias_version = s.bias.defined() ? static_cast<std::int64_t>(s.bias._version()) : -1;
    entry.bias_data = s.bias.defined() ? s.bias.data_ptr() : nullptr;
  }
}

at::Tensor weak_channels(const at::Tensor& weight, const at::Tensor& bias) {
  if (weight.is_cpu() && (!bias.defined() || bias.is_cpu())) {
    std::vector<std::int64_t> weak;
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, weight.scalar_type(), "monet_weak_channels", [&] {
          const at::Tensor w = weight.contiguous();
          const at::Tensor b = bias.defined() ? bias.contiguous().to(weight.scalar_type()) : bias;
          const scalar_t* wp = w.data_ptr<scalar_t>();
          const scalar_t* bp = b.defined() ? b.data_ptr<scalar_t>() : nullptr;
          for (std::int64_t c = 0; c < w.numel(); ++c) {
            const double floor =
                bp != nullptr ? std::max(1.0, std::abs(static_cast<double>(bp[c]))) : 1.0;
            if (std::abs(static_cast<double>(wp[c])) < floor * kInvertibleWeight) weak.push_back(c);
          }
        });
    if (weak.empty()) return {};
    return at::tensor(weak, at::TensorOptions().dtype(at::kLong));
  }
  static WeakChannelCache* const cache = new WeakChannelCache();  // never destroyed: used at exit
  return cache->lookup(weight, bias);
}

}  // namespace monet::kernels
