#include "runtime/checkpoint.h"

#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <utility>

#include "kernels/autocast.h"
#include "monet/errors.h"
#include "runtime/rng_state.h"

namespace monet {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// What backward needs besides the input: the stages, their modes, and the RNG and autocast state
// of forward.
struct Segment : torch::CustomClassHolder {
  std::vector<RuntimeStage> stages;
  std::vector<OpMode> modes;
  RngState rng;
  kernels::AutocastState autocast;
  // The buffers the forward wrote (BatchNorm's running statistics), as they were before it: the
  // recomputation runs from them, as the forward did (a module may read what it updates).
  BufferSnapshot before_forward;

  at::Tensor run(at::Tensor x) const {
    for (std::size_t k = 0; k < stages.size(); ++k) {
      OpModeScope mode(modes[k]);
      x = stages[k].fn(x);
    }
    return x;
  }
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Runs with grad disabled (as every custom Function's forward does): nothing is kept but `x`.
  static Variable forward(AutogradContext* ctx, Variable x, Variable anchor,
                          c10::intrusive_ptr<Segment> segment) {
    segment->rng = RngState::capture();
    segment->autocast = kernels::AutocastState::current();
    segment->before_forward =
        BufferSnapshot(segment->stages, 0, static_cast<int>(segment->stages.size()) - 1,
                       BufferSnapshot::Copies::kOutsidePools);
    at::Tensor y;
    {
      // Under autocast, the parameters' casts made here (without grad) stay out of its cache.
      const kernels::AutocastCacheOff no_cache;
      y = segment->run(x);
    }
    segment->before_forward.drop_unchanged();
    // No gradient for the output (a later stage detached it, or took its argmax): backward gets an
    // undefined one, not zeros, and gives none, so that the parameters before keep no gradient, as
    // in a plain step, rather than a zero one (which SGD's weight decay and momentum, and Adam,
    // would act on).
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x});
    ctx->saved_data["segment"] = at::IValue::make_capsule(std::move(segment));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    if (!grad_outputs[0].defined()) return {Variable(), Variable(), Variable()};
    // Autograd runs a backward with grad mode on exactly when it was asked to create a graph.
    if (c10::GradMode::is_enabled()) {
      throw UnsupportedError(
          "monet: backward(create_graph=true) reached a checkpointed segment, whose recomputation "
          "cannot record a graph of its gradients; take gradients of gradients outside "
          "monet::Runtime, or run without a budget (no stage is then checkpointed)");
    }
    if (!torch::autograd::Engine::get_default_engine().is_checkpoint_valid()) {
      throw UnsupportedError(
          "monet: torch::autograd::grad(), or backward() with `inputs`, reached a checkpointed "
          "segment, whose recomputation adds its parameters' gradients to .grad; call backward() "
          "without `inputs` (Runtime::step does), or run without a budget");
    }
    const auto segment =
        c10::static_intrusive_pointer_cast<Segment>(ctx->saved_data["segment"].toCapsule());
    const Variable x = ctx->get_saved_variables()[0];
    const BufferSnapshot buffers(segment->stages, 0, static_cast<int>(segment->stages.size()) - 1);
    segment->before_forward.restore();
    Variable leaf = x.detach();
    if (x.requires_grad()) leaf.requires_grad_(true);
    at::Tensor y;
    {
      const ForkedRng rng(segment->rng);
      // A backward may run outside the autocast region its forward ran in (AMP's usual loop).
      const kernels::AutocastScope autocast(segment->autocast);
      // Casts made here go with the segment's saved tensors when its backward has run, as the
      // memory model counts a recomputation; cached, they would stay to the region's end.
      const kernels::AutocastCacheOff no_cache;
      const at::AutoGradMode grad(true);
      y = segment->run(leaf);
    }
    if (y.requires_grad() && grad_outputs[0].defined()) {
      // From y's graph, not y: the engine holds the edge, so the recomputed output is freed here,
      // as the memory model frees a stage's output before its backward, unless its graph keeps it
      // (a ReLU's), which the stage's bwd_peak then counts. Held through the segment's backward,
      // it stood above every stage's prediction there by its size.
      const torch::autograd::edge_list roots{torch::autograd::impl::gradient_edge(y)};
      y = at::Tensor();
      torch::autograd::Engine::get_default_engine().execute(
          roots, {grad_outputs[0]}, /*keep_graph=*/false, /*create_graph=*/false,
          /*accumulate_grad=*/true);
    } else if (y.requires_grad()) {
      torch::autograd::backward({y}, {grad_outputs[0]});
    }
    y = at::Tensor();
    // After backward: BatchNorm's backward checks that the statistics it saved are unchanged.
    buffers.restore();
    return {x.requires_grad() ? leaf.grad() : Variable(), Variable(), Variable()};
  }
};

}  // namespace

at::Tensor run_checkpointed(const std::vector<RuntimeStage>& stages, int first, int last,
                            const std::vector<OpMode>& modes, const at::Tensor& input,
                            const at::Tensor& anchor) {
  auto segment = c10::make_intrusive<Segment>();
  segment->stages.assign(stages.begin() + first, stages.begin() + last + 1);
  segment->modes = modes;
  return CheckpointFunction::apply(input, anchor, std::move(segment));
}

}  // namespace monet
