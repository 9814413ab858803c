#include "planner/simulate.h"

#include <cassert>

#include "planner/chain_model.h"

namespace monet {
namespace {

// The walk of simulate.h, with its running live bytes.
class Walk {
 public:
  Walk(const Chain& chain, const Plan& plan, std::vector<SimStep>* steps)
      : chain_(chain), plan_(plan), steps_(steps), live_(chain.fixed_bytes) {
    sim_.peak_bytes = live_;
    sim_.peak_step = SimStep{SimPhase::kForward, 0, live_};
  }

  Simulation run() {
    const int n = static_cast<int>(chain_.stages.size());
    for (int k = 0; k < n; ++k) forward(k);
    turn(n - 1);
    for (int k = n - 1; k >= 0;) {
      if (!checkpointed(k)) {
        backward(k);
        --k;
        continue;
      }
      int first = k;
      while (continues_segment(plan_, first)) --first;
      for (int j = first; j <= k; ++j) recompute(j);
      live_ -= out(k);  // the recomputed segment output: backward starts from dx(b) instead
      // dx(b) is the segment's own input gradient: autograd holds it until the whole segment's
      // backward has run, not only stage b's.
      for (int j = k; j >= first; --j) backward(j, /*frees_grad=*/j < k);
      live_ -= out(k);
      k = first - 1;
    }
    assert(live_ == chain_.fixed_bytes + grads_);
    return sim_;
  }

 private:
  const VariantCosts& costs(int k) const {
    return chain_.stages[k].variants[plan_.stages[k].variant];
  }
  bool checkpointed(int k) const { return k >= 0 && plan_.stages[k].checkpoint; }
  std::int64_t out(int k) const { return k < 0 ? 0 : costs(k).out_bytes; }

  void high_point(SimPhase phase, int k, std::int64_t bytes) {
    if (steps_ != nullptr) steps_->push_back(SimStep{phase, k, bytes});
    if (bytes > sim_.peak_bytes) {
      sim_.peak_bytes = bytes;
      sim_.peak_step = SimStep{phase, k, bytes};
    }
  }

  void forward(int k) {
    const VariantCosts& c = costs(k);
    live_ += c.out_bytes + (checkpointed(k) ? 0 : c.saved_bytes);
    high_point(SimPhase::kForward, k, live_ + c.fwd_peak);
    // Inside a segment the input is dropped once used: only the segment's first input is kept.
    if (continues_segment(plan_, k)) live_ -= out(k - 1);
    sim_.time += c.fwd_time;
  }

  void turn(int last) { high_point(SimPhase::kTurn, last, live_ + out(last)); }

  void recompute(int k) {
    const VariantCosts& c = costs(k);
    live_ += c.out_bytes + c.saved_bytes;
    high_point(SimPhase::kRecompute, k, live_ + c.fwd_peak);
    sim_.time += c.fwd_time;
  }

  // Entered holding dx(k) (0-based k is stage k + 1), its input x(k-1) and its saved bytes.
  // Frees dx(k) after it unless `frees_grad` is false (the last stage of a segment).
  void backward(int k, bool frees_grad = true) {
    const VariantCosts& c = costs(k);
    live_ += out(k - 1);  // dx of the input
    high_point(SimPhase::kBackward, k, live_ + c.bwd_peak);
    live_ -= c.saved_bytes + out(k - 1) + (frees_grad ? c.out_bytes : 0);  // saved, input, dx(k)
    live_ += chain_.stages[k].grad_bytes;  // its parameters' new gradients stay
    grads_ += chain_.stages[k].grad_bytes;
    sim_.time += c.bwd_time;
  }

  const Chain& chain_;
  const Plan& plan_;
  std::vector<SimStep>* steps_;
  std::int64_t live_;
  std::int64_t grads_ = 0;  // the gradients backward has created so far
  Simulation sim_;
};

}  // namespace

Simulation simulate(const Chain& chain, const Plan& plan, std::vector<SimStep>* steps) {
  check_plan_shape(chain, plan);
  return Walk(chain, plan, steps).run();
}

const char* sim_phase_name(SimPhase phase) {
  switch (phase) {
    case SimPhase::kForward:
      return "forward";
    case SimPhase::kTurn:
      return "turn";
    case SimPhase::kRecompute:
      return "recompute";
    case SimPhase::kBackward:
      return "backward";
  }
  return "?";
}

}  // namespace monet
