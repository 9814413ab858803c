#include "planner/simulate.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace monet {
namespace {

// Three stages with small numbers, so that each live byte count below can be checked by hand
// against the model in simulate.h. Columns: out, saved, fwd_peak, bwd_peak, fwd_time, bwd_time.
Chain three_stages() {
  Chain chain;
  chain.fixed_bytes = 100;
  const auto stage = [](const char* name, std::int64_t out, std::int64_t saved,
                        std::int64_t fwd_peak, std::int64_t bwd_peak) {
    VariantCosts c;
    c.out_bytes = out;
    c.saved_bytes = saved;
    c.fwd_peak = fwd_peak;
    c.bwd_peak = bwd_peak;
    c.fwd_time = 1.0;
    c.bwd_time = 2.0;
    return Stage{name, {c}};
  };
  chain.stages = {stage("a", 10, 20, 5, 7), stage("b", 30, 40, 0, 0), stage("c", 5, 10, 3, 4)};
  return chain;
}

Plan plan_of(std::vector<bool> checkpoint) {
  Plan plan;
  for (bool c : checkpoint) plan.stages.push_back(StagePlan{c, 0});
  return plan;
}

std::vector<std::int64_t> live_of(const std::vector<SimStep>& steps) {
  std::vector<std::int64_t> live;
  for (const SimStep& s : steps) live.push_back(s.live_bytes);
  return live;
}

TEST(Simulate, KeepEverything) {
  std::vector<SimStep> steps;
  const Simulation sim = simulate(three_stages(), plan_of({false, false, false}), &steps);
  // Forward: 100 + 10 + 20 (+5 transient); + 30 + 40; + 5 + 10 (+3). Turn: + dx(3).
  // Backward of c: + dx(b) 30 (+4), then frees 10 + 30 + 5; b: + dx(a) 10; a: + 0 (+7).
  EXPECT_EQ(live_of(steps), (std::vector<std::int64_t>{135, 200, 218, 220, 249, 210, 137}));
  EXPECT_EQ(sim.peak_bytes, 249);
  EXPECT_EQ(sim.peak_step.phase, SimPhase::kBackward);
  EXPECT_EQ(sim.peak_step.stage, 2);
  EXPECT_DOUBLE_EQ(sim.time, 9.0);
}

// Gradients created in backward (Stage::grad_bytes) are live from their stage's backward on:
// never in the forward or the turn, in every later backward and recomputation.
TEST(Simulate, GradientsStayFromTheirStagesBackward) {
  Chain chain = three_stages();
  chain.stages[0].grad_bytes = 50;
  chain.stages[1].grad_bytes = 60;
  chain.stages[2].grad_bytes = 70;
  std::vector<SimStep> steps;
  Simulation sim = simulate(chain, plan_of({false, false, false}), &steps);
  // As KeepEverything, with c's 70 from b's backward on and b's 60 at a's.
  EXPECT_EQ(live_of(steps), (std::vector<std::int64_t>{135, 200, 218, 220, 249, 280, 267}));
  EXPECT_EQ(sim.peak_bytes, 280);
  EXPECT_EQ(sim.peak_step.stage, 1);
  steps.clear();
  sim = simulate(chain, plan_of({false, true, false}), &steps);
  // As OneStageSegmentRecomputesInBackward: b's recomputation and backward hold c's 70.
  EXPECT_EQ(live_of(steps), (std::vector<std::int64_t>{135, 160, 178, 180, 209, 300, 280, 267}));
  EXPECT_EQ(sim.peak_step.phase, SimPhase::kRecompute);
  EXPECT_EQ(sim.peak_bytes, 300);
}

TEST(Simulate, OneStageSegmentRecomputesInBackward) {
  std::vector<SimStep> steps;
  const Simulation sim = simulate(three_stages(), plan_of({false, true, false}), &steps);
  // b keeps only its input x(a) (already live): forward 135, 160, 178; turn 180; backward of c
  // 209; recompute of b 230; backward of b 210; backward of a 137.
  EXPECT_EQ(live_of(steps), (std::vector<std::int64_t>{135, 160, 178, 180, 209, 230, 210, 137}));
  EXPECT_EQ(sim.peak_bytes, 230);
  EXPECT_EQ(sim.peak_step.phase, SimPhase::kRecompute);
  EXPECT_EQ(sim.peak_step.stage, 1);
  EXPECT_DOUBLE_EQ(sim.time, 10.0);
}

TEST(Simulate, SegmentDropsItsInnerOutputs) {
  std::vector<SimStep> steps;
  const Simulation sim = simulate(three_stages(), plan_of({false, true, true}), &steps);
  // Forward: 135; b 160; c 165 (+3) then x(b) is dropped: 135. Turn 140. Recompute b 205,
  // c 223, drop the recomputed x(c): 215. Backward c 249; b 215, with dx(c), which the segment
  // holds until its whole backward has run (210 without); a 137, after dx(c) is freed.
  EXPECT_EQ(live_of(steps),
            (std::vector<std::int64_t>{135, 160, 168, 140, 205, 223, 249, 215, 137}));
  EXPECT_EQ(sim.peak_bytes, 249);
  EXPECT_DOUBLE_EQ(sim.time, 11.0);
}

TEST(Simulate, AdjacentSegmentsEachKeepTheirInput) {
  std::vector<SimStep> steps;
  Plan plan = plan_of({false, true, true});
  plan.stages[2].segment_start = true;  // b and c: two segments, not one
  const Simulation sim = simulate(three_stages(), plan, &steps);
  // Forward: 135; b 160; c 168, keeping x(b) as its segment's input: 165. Turn 170. Segment c:
  // recompute 183, drop the recomputed x(c), backward 209, then 160. Segment b: recompute 230,
  // backward 210. Backward a 137.
  EXPECT_EQ(live_of(steps),
            (std::vector<std::int64_t>{135, 160, 168, 170, 183, 209, 230, 210, 137}));
  EXPECT_EQ(sim.peak_bytes, 230);
  EXPECT_EQ(sim.peak_step.phase, SimPhase::kRecompute);
  EXPECT_EQ(sim.peak_step.stage, 1);
  EXPECT_DOUBLE_EQ(sim.time, 11.0);
  // segment_start on a stage that follows a kept stage, or on a kept stage, changes nothing.
  Plan same = plan_of({false, true, false});
  same.stages[1].segment_start = true;
  same.stages[2].segment_start = true;
  EXPECT_EQ(simulate(three_stages(), same).peak_bytes, 230);
}

TEST(Simulate, WholeChainSegment) {
  const Simulation sim = simulate(three_stages(), plan_of({true, true, true}));
  // Forward holds only the current tensors (115, 140, 138), turn 110; then the whole chain is
  // recomputed (140, 205, 223) and backward sees the same bytes as when everything is kept.
  EXPECT_EQ(sim.peak_bytes, 249);
  EXPECT_DOUBLE_EQ(sim.time, 12.0);
}

TEST(Simulate, FixedBytesAloneForAnEmptyStage) {
  Chain chain;
  chain.fixed_bytes = 7;
  chain.stages = {Stage{"only", {VariantCosts{}}}};
  EXPECT_EQ(simulate(chain, plan_of({false})).peak_bytes, 7);
  EXPECT_EQ(simulate(chain, plan_of({true})).peak_bytes, 7);
}

TEST(Simulate, UsesThePlannedVariant) {
  Chain chain = three_stages();
  VariantCosts lean = chain.stages[1].variants[0];
  lean.name = "lean";
  lean.saved_bytes = 0;
  lean.bwd_time = 5.0;
  chain.stages[1].variants.push_back(lean);
  Plan plan = plan_of({false, false, false});
  plan.stages[1].variant = 1;
  const Simulation sim = simulate(chain, plan);
  EXPECT_EQ(sim.peak_bytes, 249 - 40);
  EXPECT_DOUBLE_EQ(sim.time, 12.0);
}

TEST(Simulate, RejectsAPlanOfTheWrongShape) {
  EXPECT_THROW(simulate(three_stages(), plan_of({false})), std::invalid_argument);
  Plan bad_variant = plan_of({false, false, false});
  bad_variant.stages[2].variant = 1;
  EXPECT_THROW(simulate(three_stages(), bad_variant), std::invalid_argument);
}

}  // namespace
}  // namespace monet
