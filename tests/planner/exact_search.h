// The true optimum, for judging the planner: the fastest plan within a budget over every plan
// (every checkpoint choice, every way to split checkpointed runs into segments and, unless
// default_only, every variant of every stage).
#pragma once

#include <cstdint>

#include "monet/chain.h"
#include "monet/planner.h"

namespace monet::testing {

struct Optimum {
  bool feasible = false;
  double time = 0.0;  // simulate()'s time of `plan`
  Plan plan;
};

// Tries every plan through simulate() (kept, checkpointed, or checkpointed starting a new segment,
// times every variant, per stage): the plain definition, for small chains.
Optimum brute_force_optimum(const Chain& chain, std::int64_t budget_bytes, bool default_only);

// The same optimum, faster: a depth-first search over blocks (block_costs.h) that keeps, for each
// segment, the fastest variant assignment that fits, bounded by the time of the best plan found.
// Needs every variant of a stage to agree on out_bytes, so that the block form is exact. Checked
// against brute_force_optimum on small chains.
Optimum block_search_optimum(const Chain& chain, std::int64_t budget_bytes, bool default_only);

// The least budget (fixed_bytes included) any plan fits in, by the same search.
std::int64_t exact_least_budget(const Chain& chain, bool default_only);

}  // namespace monet::testing
