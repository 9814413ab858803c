// What a strategy hands back to the Planner, which adds simulate()'s peak and time.
#pragma once

#include <cstdint>

#include "monet/planner.h"

namespace monet {

struct StrategyOutcome {
  // The plan: the strategy's choice when feasible, else its plan with the least peak.
  Plan plan;
  bool feasible = false;
  // The least budget (fixed_bytes included) at which the strategy finds a plan.
  std::int64_t min_feasible_bytes = 0;
};

}  // namespace monet
