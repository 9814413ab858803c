#include "planner/plan_json.h"

#include <nlohmann/json.hpp>

#include "planner/chain_model.h"

namespace monet {
namespace {

nlohmann::ordered_json plan_object(const Chain& chain, const PlanResult& result) {
  nlohmann::ordered_json j;
  j["strategy"] = std::string(strategy_name(result.strategy));
  j["budget_bytes"] = result.budget_bytes;
  j["feasible"] = result.feasible;
  j["min_feasible_bytes"] = result.min_feasible_bytes;
  j["peak_bytes"] = result.peak_bytes;
  j["time"] = result.time;
  j["plan_us"] = result.plan_us;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < result.plan.stages.size(); ++i) {
    const StagePlan& s = result.plan.stages[i];
    nlohmann::ordered_json stage;
    stage["name"] = chain.stages[i].name;
    stage["checkpoint"] = s.checkpoint;
    // Only where a checkpointed stage starts a new segment right after another checkpointed
    // stage; absent elsewhere, so that plans without adjacent segments read as DESIGN.md shows.
    if (splits_segment(result.plan, static_cast<int>(i))) stage["segment_start"] = true;
    stage["variant"] = chain.stages[i].variants[s.variant].name;
    stages.push_back(std::move(stage));
  }
  j["stages"] = std::move(stages);
  return j;
}

}  // namespace

std::string plan_to_json(const Chain& chain, const PlanResult& result) {
  return plan_object(chain, result).dump(2) + "\n";
}

std::string plans_to_json(const Chain& chain, const std::vector<PlanResult>& results) {
  nlohmann::ordered_json array = nlohmann::ordered_json::array();
  for (const PlanResult& r : results) array.push_back(plan_object(chain, r));
  return array.dump(2) + "\n";
}

}  // namespace monet
