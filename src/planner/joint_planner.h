// The `monet` strategy: checkpoints and operator variants chosen jointly.
//
// MONeT solves this with an integer program (minutes to hours). monet splits the choice the way
// the block form (block_costs.h) splits the memory, and lets CheckpointDp do the rest:
//   1. A kept stage's variant only changes its own block and what it retains, so the DP chooses
//      it exactly, among the variants no other variant beats on every number.
//   2. A segment's variants only change that segment's block. The DP offers each segment a few
//      whole-segment layers: default variants, the fastest, the leanest, and "price" layers in
//      between (each stage taking the variant with the least time + price * bytes), more of them
//      for short chains, which are cheap to plan.
//   3. The least feasible budget is exact over every mix of segment variants (DpChoices::lean),
//      and the least-peak plan's segments are choices too, so any budget from there up fits.
//   4. The joint search is bounded by an incumbent: greedy's plan with its variants polished, or
//      the checkpoint-only optimum (`dp`) where that is faster. dp is the answer where nothing
//      beats it, so monet is never worse than `dp`, nor than `greedy` (checked directly when dp's
//      own fronts had to be discretized). dp searches only for plans faster than the others,
//      with RestBound's memory-aware bound on the rest of the chain, which makes it nearly free
//      where variants save much; there it runs after the joint search, bounded by its plan.
//   5. The plan is polished: each segment's variants are re-chosen stage by stage by a bounded
//      branch and bound (the fastest mix that fits the segment's room), and kept stages move to
//      faster variants where every later block has the slack. For short chains the polished
//      segment variants become one more layer, with each of its one-stage deviations, and the DP
//      runs again.
// Every plan fits the budget under simulate().
#pragma once

#include <cstdint>

#include "monet/chain.h"
#include "planner/strategy_outcome.h"

namespace monet {

StrategyOutcome plan_monet(const Chain& chain, std::int64_t budget_bytes);

// The same with the joint search's fronts of at most `max_front` states (DpOptions::max_front; 0
// keeps them whole, which is exact and slow), for judging the default against whole fronts.
StrategyOutcome plan_monet(const Chain& chain, std::int64_t budget_bytes, int max_front);

}  // namespace monet
