#include "runtime/stage.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Type.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <stdexcept>

#include "monet/errors.h"

namespace monet {
namespace {

// "torch::nn::BatchNorm2dImpl" -> "BatchNorm2d".
std::string short_name(const std::string& full) {
  std::string name = full;
  const auto colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) {
    name.resize(name.size() - 4);
  }
  return name;
}

void open(const torch::nn::Sequential& model, std::vector<torch::nn::AnyModule>* out) {
  for (const auto& child : *model) {
    auto nested = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(child.ptr());
    if (nested) {
      open(torch::nn::Sequential(nested), out);
    } else {
      out->push_back(child);
    }
  }
}

}  // namespace

std::vector<nn::Substitution> substitute_lean_modules(
    const std::vector<torch::nn::AnyModule>& modules);

std::vector<RuntimeStage> cut_stages(const torch::nn::Sequential& model, bool substitute) {
  std::vector<torch::nn::AnyModule> modules;
  if (model.is_empty()) {
    throw ConfigError("monet::Runtime needs a model: the Sequential given is empty (null)");
  }
  open(model, &modules);
  if (modules.empty()) {
    throw ConfigError(
        "monet::Runtime needs a Sequential with at least one module: each child is a stage");
  }
  std::vector<nn::Substitution> substitutions;
  if (substitute) {
    substitutions = substitute_lean_modules(modules);
  } else {
    for (const auto& m : modules) substitutions.push_back({m, {m.ptr()}});
  }
  std::vector<RuntimeStage> stages;
  stages.reserve(substitutions.size() + 1);
  for (std::size_t i = 0; i < substitutions.size(); ++i) {
    RuntimeStage s;
    torch::nn::AnyModule module = substitutions[i].module;
    s.name = fmt::format("{}:{}", i, short_name(module.ptr()->name()));
    s.fn = [module, name = s.name](const at::Tensor& x) mutable {
      torch::nn::AnyValue out = module.any_forward(x);
      if (at::Tensor* y = out.try_get<at::Tensor>()) return std::move(*y);
      // A Sequential passes any value from child to child; monet's stages pass one tensor.
      throw ConfigError(fmt::format(
          "monet::Runtime: stage {} gives a {}, not a tensor; monet runs each child of the "
          "Sequential as a stage from one tensor to one tensor: put the child and the children "
          "that take its output in one module that returns a tensor",
          name, c10::demangle(out.type_info().name())));
    };
    if (substitutions[i].substituted()) s.substitutions.push_back(substitutions[i]);
    for (const auto& b : module.ptr()->buffers()) s.buffers.push_back(b);
    for (const auto& p : module.ptr()->parameters()) s.parameters.push_back(p);
    stages.push_back(std::move(s));
  }
  return stages;
}

std::vector<RuntimeStage> merge_stages(std::vector<RuntimeStage> stages,
                                       const std::vector<bool>& joins_previous) {
  if (joins_previous.size() != stages.size() || (!stages.empty() && joins_previous[0])) {
    throw std::invalid_argument("merge_stages: one flag per stage, the first one false");
  }
  std::vector<RuntimeStage> merged;
  for (std::size_t k = 0; k < stages.size(); ++k) {
    RuntimeStage& s = stages[k];
    if (!joins_previous[k]) {
      merged.push_back(std::move(s));
      continue;
    }
    RuntimeStage& into = merged.back();
    into.name += "+" + s.name;
    into.fn = [first = std::move(into.fn), then = std::move(s.fn)](const at::Tensor& x) {
      return then(first(x));
    };
    into.buffers.insert(into.buffers.end(), s.buffers.begin(), s.buffers.end());
    into.parameters.insert(into.parameters.end(), s.parameters.begin(), s.parameters.end());
    into.substitutions.insert(into.substitutions.end(), s.substitutions.begin(),
                              s.substitutions.end());
    into.modes = {OpMode::kDefault};
  }
  return merged;
}

int RuntimeStage::trained_count() const {
  return static_cast<int>(std::count_if(parameters.begin(), parameters.end(),
                                        [](const at::Tensor& p) { return p.requires_grad(); }));
}

std::vector<at::Tensor> RuntimeStage::trained_parameters() const {
  std::vector<at::Tensor> trained;
  for (const at::Tensor& p : parameters) {
    if (p.requires_grad()) trained.push_back(p);
  }
  return trained;
}

namespace {

// A copy of `t` in host memory that no pool of monet's serves: CPU memory of its own, or the
// device's pinned host memory, copied without waiting for the device.
at::Tensor copy_outside_pools(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  if (c.is_cpu()) {
    auto* data = new std::uint8_t[std::max<std::size_t>(c.nbytes(), 1)];
    at::Tensor copy = at::from_blob(
        data, c.sizes(), [](void* p) { delete[] static_cast<std::uint8_t*>(p); }, c.options());
    copy.copy_(c);
    return copy;
  }
  at::Tensor copy = at::empty(c.sizes(), c.options().device(at::kCPU).pinned_memory(true));
  copy.copy_(c, /*non_blocking=*/true);
  return copy;
}

}  // namespace

BufferSnapshot::BufferSnapshot(const std::vector<RuntimeStage>& stages, int first, int last,
                               Copies copies) {
  for (int k = first; k <= last; ++k) {
    for (const at::Tensor& b : stages[k].buffers) {
      if (!b.defined()) continue;
      live_.push_back(b);
      saved_.push_back(copies == Copies::kInPools ? b.clone() : copy_outside_pools(b));
      versions_.push_back(b._version());
    }
  }
}

void BufferSnapshot::drop_unchanged() {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < live_.size(); ++i) {
    if (live_[i]._version() == versions_[i]) continue;
    live_[kept] = std::move(live_[i]);
    saved_[kept] = std::move(saved_[i]);
    versions_[kept] = versions_[i];
    ++kept;
  }
  live_.resize(kept);
  saved_.resize(kept);
  versions_.resize(kept);
}

void BufferSnapshot::restore() const {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < live_.size(); ++i) live_[i].copy_(saved_[i], /*non_blocking=*/true);
}

}  // namespace monet
