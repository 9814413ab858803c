// The reference strategies monet is measured against: none, all, sqrt and greedy. Each takes a
// valid chain and a budget (bytes, fixed_bytes included) and uses default variants only.
#pragma once

#include <cstdint>

#include "monet/chain.h"
#include "planner/strategy_outcome.h"

namespace monet {

// Keep every stage: no recomputation, the most memory.
StrategyOutcome plan_none(const Chain& chain, std::int64_t budget_bytes);

// Checkpoint every stage, each a segment of its own (what checkpointing every layer does in
// PyTorch): forward keeps only each stage's input, backward recomputes one stage at a time.
StrategyOutcome plan_all(const Chain& chain, std::int64_t budget_bytes);

// Chen et al. 2016: with k = ceil(sqrt(L)), checkpoint every stage in adjacent segments of k
// stages, each keeping its input. Ignores the budget.
StrategyOutcome plan_sqrt(const Chain& chain, std::int64_t budget_bytes);

// Mimose-style: checkpoint stages one by one, largest retained bytes (input plus saved) first,
// until simulate() says the plan fits. Its least feasible budget is the lowest peak along that
// order.
StrategyOutcome plan_greedy(const Chain& chain, std::int64_t budget_bytes);

}  // namespace monet
