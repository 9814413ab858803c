#include "runtime/executor.h"

#include <stdexcept>

#include "planner/chain_model.h"
#include "runtime/checkpoint.h"

namespace monet {

at::Tensor run_plan(const std::vector<RuntimeStage>& stages, const Plan& plan,
                    const at::Tensor& input, const at::Tensor& anchor) {
  const int n = static_cast<int>(stages.size());
  if (static_cast<int>(plan.stages.size()) != n) {
    throw std::logic_error("monet: a plan for a different number of stages reached run_plan");
  }
  auto mode_of = [&](int k) { return stages[k].modes.at(plan.stages[k].variant); };
  at::Tensor x = input;
  for (int k = 0; k < n;) {
    if (!plan.stages[k].checkpoint) {
      const OpModeScope mode(mode_of(k));
      x = stages[k].fn(x);
      ++k;
      continue;
    }
    const int last = segment_last(plan, k);
    // A segment that no gradient flows through (a frozen prefix, its input needing none) keeps
    // nothing for backward when run plainly: checkpointing it would only recompute it.
    bool trains = x.requires_grad();
    for (int j = k; j <= last; ++j) trains = trains || stages[j].trains();
    if (!trains) {
      for (; k <= last; ++k) {
        const OpModeScope mode(mode_of(k));
        x = stages[k].fn(x);
      }
      continue;
    }
    std::vector<OpMode> modes;
    for (int j = k; j <= last; ++j) modes.push_back(mode_of(j));
    x = run_checkpointed(stages, k, last, modes, x, anchor);
    k = last + 1;
  }
  return x;
}

std::string describe_plan(const Plan& plan) {
  std::string out;
  for (const StagePlan& s : plan.stages) {
    const bool splits = splits_segment(plan, static_cast<int>(out.size()));
    char c = !s.checkpoint ? 'K' : splits ? 'S' : 'C';
    if (s.variant != 0) c = static_cast<char>(c - 'A' + 'a');
    out.push_back(c);
  }
  return out;
}

}  // namespace monet
