#include "runtime/rollback.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <unordered_set>

namespace monet {

StepRollback::StepRollback(const std::vector<RuntimeStage>& stages)
    : rng_(RngState::capture()), buffers_(stages, 0, static_cast<int>(stages.size()) - 1) {
  std::unordered_set<const void*> seen;  // a parameter shared by two stages is recorded once
  for (const RuntimeStage& s : stages) {
    for (const at::Tensor& p : s.parameters) {
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      const at::Tensor& g = p.grad();
      if (!g.defined()) {
        params_.push_back({p, GradState::kUndefined, {}});
      } else if (g.count_nonzero().item<std::int64_t>() == 0) {
        params_.push_back({p, GradState::kZero, {}});
      } else {
        params_.push_back({p, GradState::kCopied, g.clone()});
      }
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
