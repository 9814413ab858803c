// The Planner of include/monet/planner.h: strategy names, dispatch and the infeasible-budget
// error.
#include "monet/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "common/env.h"
#include "monet/bytes.h"
#include "planner/baseline_strategies.h"
#include "planner/chain_model.h"
#include "planner/checkpoint_dp.h"
#include "planner/joint_planner.h"
#include "planner/simulate.h"

namespace monet {
namespace {

std::string format_budget(std::int64_t bytes) {
  return bytes < 0 ? fmt::format("{} B", bytes) : format_bytes(static_cast<std::size_t>(bytes));
}

StrategyOutcome run(Strategy strategy, const Chain& chain, std::int64_t budget_bytes) {
  switch (strategy) {
    case Strategy::kNone:
      return plan_none(chain, budget_bytes);
    case Strategy::kAll:
      return plan_all(chain, budget_bytes);
    case Strategy::kSqrt:
      return plan_sqrt(chain, budget_bytes);
    case Strategy::kGreedy:
      return plan_greedy(chain, budget_bytes);
    case Strategy::kDp:
      return plan_dp(chain, budget_bytes);
    case Strategy::kMonet:
      return plan_monet(chain, budget_bytes);
  }
  return plan_none(chain, budget_bytes);
}

}  // namespace

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> strategies = {Strategy::kNone, Strategy::kAll,
                                                   Strategy::kSqrt, Strategy::kGreedy,
                                                   Strategy::kDp,   Strategy::kMonet};
  return strategies;
}

std::string_view strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kNone:
      return "none";
    case Strategy::kAll:
      return "all";
    case Strategy::kSqrt:
      return "sqrt";
    case Strategy::kGreedy:
      return "greedy";
    case Strategy::kDp:
      return "dp";
    case Strategy::kMonet:
      return "monet";
  }
  return "?";
}

Strategy parse_strategy(std::string_view text, std::string_view variable) {
  std::string names;
  for (Strategy s : all_strategies()) {
    if (text == strategy_name(s)) return s;
    names += names.empty() ? "" : ", ";
    names += strategy_name(s);
  }
  throw ConfigError(fmt::format(
      "{}='{}' is not a planner strategy. Use one of: {} (default monet).", variable, text, names));
}

Strategy strategy_from_env() {
  const std::optional<std::string> value = env_value("MONET_PLANNER");
  return value ? parse_strategy(*value, "MONET_PLANNER") : Strategy::kMonet;
}

PlanResult Planner::try_plan(const Chain& chain, std::int64_t budget_bytes) const {
  validate_chain(chain);
  const auto start = std::chrono::steady_clock::now();
  // No plan fits below 0 bytes, and the strategies subtract the chain's bytes from the budget,
  // which from a budget near INT64_MIN would overflow: they plan for 0, and the plan's peak,
  // never negative, is then above the budget asked for.
  StrategyOutcome outcome = run(strategy_, chain, std::max<std::int64_t>(budget_bytes, 0));
  const auto stop = std::chrono::steady_clock::now();

  PlanResult result;
  result.strategy = strategy_;
  result.budget_bytes = budget_bytes;
  result.fixed_bytes = chain.fixed_bytes;
  for (const Stage& stage : chain.stages) result.grad_bytes += stage.grad_bytes;
  result.min_feasible_bytes = outcome.min_feasible_bytes;
  result.plan_us = std::chrono::duration<double, std::micro>(stop - start).count();
  const Simulation sim = simulate(chain, outcome.plan);
  result.peak_bytes = sim.peak_bytes;
  result.time = sim.time;
  result.unconstrained_time = simulate(chain, uniform_plan(chain, false)).time;
  result.feasible = outcome.feasible && sim.peak_bytes <= budget_bytes;
  result.plan = std::move(outcome.plan);
  return result;
}

PlanResult Planner::plan(const Chain& chain, std::int64_t budget_bytes) const {
  PlanResult result = try_plan(chain, budget_bytes);
  if (result.feasible) return result;
  const char* hint = strategy_ == Strategy::kMonet
                         ? ""
                         : "; MONET_PLANNER=monet, which also switches operator variants, may "
                           "need less";
  throw InfeasibleBudgetError(
      fmt::format("a budget of {} ({} bytes) is too small for this input shape: the least budget "
                  "the '{}' planner fits in is {} ({} bytes), of which {} are fixed (parameters, "
                  "gradients, optimizer state). Raise MONET_BUDGET to at least that or use "
                  "smaller inputs{}.",
                  format_budget(budget_bytes), budget_bytes, strategy_name(strategy_),
                  format_budget(result.min_feasible_bytes), result.min_feasible_bytes,
                  format_budget(chain.fixed_bytes), hint),
      budget_bytes, result.min_feasible_bytes);
}

}  // namespace monet
