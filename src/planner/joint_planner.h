// The `monet` strategy: checkpoints and operator variants chosen jointly.
//
// MONeT solves this jointly with an integer program (minutes to hours); monet does it in well
// under a millisecond by splitting the choice the way the block form (block_costs.h) splits the
// memory:
//   1. A kept stage's variant only changes its own block and what it retains, so CheckpointDp
//      chooses it exactly, among the variants no other variant beats on every number.
//   2. A segment's variants only change that segment's block. CheckpointDp offers each segment
//      a few whole-segment layers: default variants (so monet is never worse than `dp`, and so
//      never worse than `greedy`), the fastest variants, and the leanest.
//   3. The plan is then polished: every segment's variants are re-chosen stage by stage by a
//      bounded branch and bound (the fastest assignment that fits the room the segment has), and
//      kept stages switch to faster variants where every later block has the slack.
//   4. The polished segment variants become one more layer and 2-3 repeat, while the time
//      improves (at most kRounds times).
// Every plan is checked against simulate(); the result never exceeds the budget.
#pragma once

#include <cstdint>

#include "monet/chain.h"
#include "planner/strategy_outcome.h"

namespace monet {

StrategyOutcome plan_monet(const Chain& chain, std::int64_t budget_bytes);

}  // namespace monet
