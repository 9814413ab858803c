#include "runtime/rollback.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <unordered_set>
#include <utility>
#include <vector>

namespace monet {

StepRollback::StepRollback(const std::vector<RuntimeStage>& stages)
    : rng_(RngState::capture()), buffers_(stages, 0, static_cast<int>(stages.size()) - 1) {
  std::unordered_set<const void*> seen;  // a parameter shared by two stages is recorded once
  // Which defined gradients are all zero, read for every parameter of a device at once: a count
  // read on the host per parameter would wait for a GPU once per parameter, every step.
  std::vector<std::pair<at::Device, std::vector<std::size_t>>> by_device;  // into params_
  for (const RuntimeStage& s : stages) {
    for (const at::Tensor& p : s.parameters) {
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      const at::Tensor& g = p.grad();
      if (!g.defined()) {
        params_.push_back({p, GradState::kUndefined, {}});
      } else {
        auto it = std::find_if(by_device.begin(), by_device.end(),
                               [&](const auto& d) { return d.first == g.device(); });
        if (it == by_device.end()) it = by_device.insert(by_device.end(), {g.device(), {}});
        it->second.push_back(params_.size());
        params_.push_back({p, GradState::kZero, {}});
      }
    }
  }
  for (const auto& [device, indices] : by_device) {
    std::vector<at::Tensor> counts;
    counts.reserve(indices.size());
    for (std::size_t i : indices) counts.push_back(params_[i].param.grad().count_nonzero());
    const at::Tensor nonzero = at::stack(counts).to(at::kCPU);  // one wait for the device
    const std::int64_t* count = nonzero.data_ptr<std::int64_t>();
    for (std::size_t k = 0; k < indices.size(); ++k) {
      if (count[k] == 0) continue;
      Param& param = params_[indices[k]];
      param.state = GradState::kCopied;
      param.copy = param.param.grad().clone();
    }
  }
}

void StepRollback::restore() const {
  rng_.restore();
  buffers_.restore();
  const c10::NoGradGuard no_grad;
  for (const Param& p : params_) {
    at::Tensor param = p.param;
    switch (p.state) {
      case GradState::kUndefined:
        param.mutable_grad() = at::Tensor();
        break;
      case GradState::kZero:
        if (param.grad().defined()) param.mutable_grad().zero_();
        break;
      case GradState::kCopied:
        if (param.grad().defined()) {
          param.mutable_grad().copy_(p.copy);
        } else {
          param.mutable_grad() = p.copy;
        }
        break;
    }
  }
}

}  // namespace monet
