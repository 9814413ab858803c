// The planner: given a chain (include/monet/chain.h) predicted for one input shape and a memory
// budget, it picks for every stage whether to keep its activations or checkpoint it, and which
// operator variant to run, so that the iteration fits the budget with the least recomputation.
//
//   monet::Planner planner(monet::strategy_from_env());
//   monet::PlanResult r = planner.plan(chain, budget_bytes);  // throws InfeasibleBudgetError
//   for (const monet::StagePlan& s : r.plan.stages) ...       // s.checkpoint, s.variant
//
// A plan's peak and time come from simulate() (src/planner/simulate.h), the single memory model
// (DESIGN.md, "The memory model"); docs/planner.md describes the model and the strategies.
// Planning is deterministic and thread-safe: a Planner holds no mutable state. Each thread that
// plans keeps the planner's working memory (typically tens to hundreds of KiB, a few MiB at most)
// for its next plan.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "monet/chain.h"
#include "monet/errors.h"

namespace monet {

// How a plan is chosen. The names are what MONET_PLANNER and `monet-plan --strategy` accept.
enum class Strategy {
  kNone,    // "none": keep every stage, default variants (the unbudgeted baseline)
  kAll,     // "all": checkpoint every stage, each stage a segment of its own (keeps only inputs)
  kSqrt,    // "sqrt": Chen et al. 2016, adjacent segments of about sqrt(L) stages, budget-oblivious
  kGreedy,  // "greedy": Mimose-style, checkpoint the largest stages until the plan fits
  kDp,      // "dp": the fastest checkpoint-only plan that fits (exact dynamic program)
  kMonet,   // "monet": checkpoints and operator variants chosen jointly (the default)
};

// Every strategy, in the order above.
const std::vector<Strategy>& all_strategies();
// "none", "all", "sqrt", "greedy", "dp" or "monet".
std::string_view strategy_name(Strategy strategy);
// The strategy named `text` (exact, lower case). Throws ConfigError naming `variable` and the
// accepted names otherwise.
Strategy parse_strategy(std::string_view text, std::string_view variable = "MONET_PLANNER");
// MONET_PLANNER, or kMonet when it is unset. Throws ConfigError for an unknown name.
Strategy strategy_from_env();

// What one stage does in a plan.
struct StagePlan {
  bool checkpoint = false;  // false: keep what the stage saves for backward; true: recompute it
  int variant = 0;          // index into the stage's variants; 0 is the default implementation
  // Only for a checkpointed stage that follows a checkpointed stage: true starts a new segment
  // here instead of continuing the one before. Ignored (and left false by the planner) elsewhere.
  bool segment_start = false;
};

// One StagePlan per stage of the chain, in order. A segment is a run of consecutive checkpointed
// stages, up to the next kept stage or the next segment_start: it keeps only its input during
// forward and recomputes the whole run during backward. Adjacent segments (Chen et al.'s sqrt(L)
// plan, or every stage its own segment) keep each segment's input.
struct Plan {
  std::vector<StagePlan> stages;
};

// A plan and how it fares under simulate(). When no plan of the strategy fits, `feasible` is
// false and `plan` is the strategy's plan with the least peak (whose peak_bytes is then
// min_feasible_bytes, or above it for the budget-oblivious strategies).
struct PlanResult {
  Strategy strategy = Strategy::kMonet;
  std::int64_t budget_bytes = 0;        // the budget planned for, fixed_bytes included
  std::int64_t fixed_bytes = 0;         // the chain's fixed_bytes the plan was made with
  std::int64_t grad_bytes = 0;          // the sum of its stages' grad_bytes
  bool feasible = false;                // peak_bytes <= budget_bytes
  std::int64_t min_feasible_bytes = 0;  // the least budget at which this strategy finds a plan
  std::int64_t peak_bytes = 0;          // simulate(chain, plan).peak_bytes
  double time = 0.0;                    // simulate(chain, plan).time, seconds per iteration
  // simulate()'s time of keeping every stage with its default variant (the run without a
  // budget), seconds: time / unconstrained_time - 1 is the recomputation the plan adds (a little
  // below zero where a variant the plan chose was measured faster than the default).
  double unconstrained_time = 0.0;
  double plan_us = 0.0;  // microseconds the strategy took to plan
  Plan plan;
};

// The budget is below the least budget any plan of the strategy fits in, for this input shape.
// what() says both numbers and what to do.
class InfeasibleBudgetError : public ConfigError {
 public:
  InfeasibleBudgetError(const std::string& message, std::int64_t budget_bytes,
                        std::int64_t min_feasible_bytes)
      : ConfigError(message), budget_bytes(budget_bytes), min_feasible_bytes(min_feasible_bytes) {}

  std::int64_t budget_bytes;        // what was asked for
  std::int64_t min_feasible_bytes;  // the least budget that would have worked
};

class Planner {
 public:
  explicit Planner(Strategy strategy = Strategy::kMonet) : strategy_(strategy) {}

  Strategy strategy() const { return strategy_; }

  // Plans `chain` (checked as validate_chain does; ConfigError names the stage and field) for a
  // budget of `budget_bytes`, fixed_bytes included. Never throws for a budget that is too small,
  // a negative one included: the result says feasible = false and gives min_feasible_bytes.
  PlanResult try_plan(const Chain& chain, std::int64_t budget_bytes) const;

  // The same, but a budget that is too small throws InfeasibleBudgetError.
  PlanResult plan(const Chain& chain, std::int64_t budget_bytes) const;

 private:
  Strategy strategy_;
};

}  // namespace monet
