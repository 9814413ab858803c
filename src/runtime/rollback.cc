#include "runtime/rollback.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <algorithm>
#include <unordered_set>
#include <utility>
#include <vector>

namespace monet {

StepRollback::StepRollback(const std::vector<RuntimeStage>& stages)
    : rng_(RngState::capture()), buffers_(stages, 0, static_cast<int>(stages.size()) - 1) {
  // Which defined gradients are all zero, read for every parameter of a device at once: a count
  // read on the host per parameter would wait for a GPU once per parameter, every step.
  std::vector<std::pair<at::Device, std::vector<std::size_t>>> by_device;  // into params_
  for (const RuntimeStage& s : stages) {
    for (const at::Tensor& p : s.parameters) {
      if (!seen_.insert(p.unsafeGetTensorImpl()).second) continue;  // shared by two stages
      const at::Tensor& g = p.grad();
      if (!g.defined()) {
        params_.push_back({p, GradState::kUndefined, {}});
      } else if (g.is_sparse()) {
        // An embedding's sparse gradient: no count_nonzero, and few values. Copied as it is.
        params_.push_back({p, GradState::kCopied, g.clone()});
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

void StepRollback::record_loss_leaves(const at::Tensor& loss, const at::Tensor& output) {
  if (!loss.defined() || !loss.grad_fn()) return;
  // `output` itself is a leaf where the loss stage starts a segment, or is measured alone:
  // monet's own, whose gradient no retry finds.
  record_leaves_from(loss.grad_fn().get(), output.defined() ? output.grad_fn().get() : nullptr,
                     output);
}

void StepRollback::record_input_leaves(const at::Tensor& input) {
  if (!input.defined() || !input.requires_grad()) return;
  if (input.grad_fn()) {
    record_leaves_from(input.grad_fn().get(), nullptr, at::Tensor());
  } else {
    record_leaf(input);
  }
}

void StepRollback::record_leaves_from(torch::autograd::Node* from,
                                      const torch::autograd::Node* stop, const at::Tensor& skip) {
  using torch::autograd::Node;
  std::vector<Node*> todo = {from};
  std::unordered_set<const Node*> visited;
  while (!todo.empty()) {
    Node* node = todo.back();
    todo.pop_back();
    if (node == stop || !visited.insert(node).second) continue;
    if (auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      const at::Tensor& v = leaf->variable;
      if (v.defined() && !(skip.defined() && v.is_same(skip))) record_leaf(v);
      continue;
    }
    for (const torch::autograd::Edge& e : node->next_edges()) {
      if (e.function) todo.push_back(e.function.get());
    }
  }
}

void StepRollback::record_leaf(const at::Tensor& leaf) {
  if (!seen_.insert(leaf.unsafeGetTensorImpl()).second) return;
  const at::Tensor& g = leaf.grad();
  // Few and small (a loss's weights, a batch's input): copied without asking whether they are
  // zero.
  if (!g.defined()) {
    params_.push_back({leaf, GradState::kUndefined, {}});
  } else {
    params_.push_back({leaf, GradState::kCopied, g.clone()});
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
        if (p.copy.is_sparse()) {
          // Autograd may add to a sparse gradient in place: the copy must not become it.
          param.mutable_grad() = p.copy.clone();
        } else if (param.grad().defined()) {
          param.mutable_grad().copy_(p.copy);
        } else {
          param.mutable_grad() = p.copy;
        }
        break;
    }
  }
}

}  // namespace monet
