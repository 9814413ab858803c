// A plan as JSON, what `monet-plan --json` prints (DESIGN.md, "Formats"):
//
//   {"strategy": "monet", "budget_bytes": 0, "feasible": true, "min_feasible_bytes": 0,
//    "peak_bytes": 0, "time": 0.0, "plan_us": 0.0,
//    "stages": [{"name": "block0", "checkpoint": false, "variant": "default"}]}
//
// Bytes are integers, time is seconds per iteration, plan_us microseconds.
#pragma once

#include <string>
#include <vector>

#include "monet/chain.h"
#include "monet/planner.h"

namespace monet {

// One plan as an object, indented by 2. `result` must be a plan for `chain`.
std::string plan_to_json(const Chain& chain, const PlanResult& result);

// Several plans (monet-plan --compare --json) as an array of such objects.
std::string plans_to_json(const Chain& chain, const std::vector<PlanResult>& results);

}  // namespace monet
