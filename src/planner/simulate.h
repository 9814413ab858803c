// simulate(): the single oracle for a plan's peak memory and time (DESIGN.md, "The memory
// model"). Every strategy is judged by it, the runtime compares its peak with the allocator's
// measured peak, and the planner's dynamic programs are exact with respect to it (block_costs.h).
//
// The model. Stages are numbered 1..L here (index i - 1 in Chain::stages and Plan::stages).
// x(i) is stage i's output and x(0) the input batch, which the chain does not count (the runtime
// includes it in fixed_bytes). For stage i running its planned variant: o(i) = out_bytes,
// s(i) = saved_bytes, f(i) = fwd_peak, b(i) = bwd_peak; o(0) = 0. dx(i) is the gradient of x(i),
// o(i) bytes. A segment is a run a..b of consecutive checkpointed stages (Plan: it ends before a
// kept stage or a segment_start); every other stage is kept. Live bytes always include fixed_bytes.
//
// What each stage retains from its forward until its backward:
//   kept stage i                      x(i-1) and its saved bytes          o(i-1) + s(i)
//   first stage a of a segment        x(a-1), the segment's stored input  o(a-1)
//   other stages of a segment         nothing
//
// Forward, i = 1..L. Before stage i: what stages 1..i-1 retain, plus x(i-1).
//   Stage i allocates x(i), and s(i) if kept (a checkpointed stage runs without saving anything);
//   its high point is that plus f(i). Then x(i-1) is freed unless stage i retains it.
// Turn. dx(L) is allocated while x(L) is live (the high point), then x(L) is freed.
// Backward, i = L..1, holding dx(i), what stages 1..i retain, and g(i+1) + ... + g(L), the
// gradients the backward of the stages after i created (g(i) = Stage::grad_bytes).
//   Kept stage i: allocates dx(i-1); its high point is that plus b(i); then frees s(i), x(i-1) and
//   dx(i), and keeps g(i) (b(i) already counts it at the high point).
//   Segment a..b, reached at i = b: recomputes stages a..b from x(a-1), each allocating x(j) and
//   s(j) with high point plus f(j), like a kept stage's forward; frees the recomputed x(b), which
//   backward does not need; then runs the backward of stages b..a as for kept stages, except
//   that dx(b) stays until stage a's backward has run: autograd hands the segment's backward its
//   gradient and holds it until that backward returns.
// Time: fwd_time + bwd_time of every stage, plus fwd_time once more for each checkpointed stage.
//
// The peak is the highest of the high points above (fixed_bytes included). Sizes are exact
// integers; nothing is rounded.
#pragma once

#include <cstdint>
#include <vector>

#include "monet/chain.h"
#include "monet/planner.h"

namespace monet {

enum class SimPhase { kForward, kTurn, kRecompute, kBackward };

// One high point of the walk.
struct SimStep {
  SimPhase phase = SimPhase::kForward;
  int stage = 0;                // 0-based stage index (the last stage for the turn)
  std::int64_t live_bytes = 0;  // bytes live at the high point, fixed_bytes included
};

struct Simulation {
  std::int64_t peak_bytes = 0;  // the highest live bytes of the iteration, fixed_bytes included
  double time = 0.0;            // seconds for one iteration: forward, recomputation, backward
  SimStep peak_step;            // the first high point that reached peak_bytes
};

// Walks `plan` over `chain` as described above. When `steps` is given, every high point is
// appended to it in order (3 per kept stage and 4 per checkpointed stage, at most). Throws
// std::invalid_argument when the plan does not match the chain (check_plan_shape).
Simulation simulate(const Chain& chain, const Plan& plan, std::vector<SimStep>* steps = nullptr);

// "forward", "turn", "recompute" or "backward".
const char* sim_phase_name(SimPhase phase);

}  // namespace monet
