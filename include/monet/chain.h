// The memory model: a training network as a chain of stages, each with one or more operator
// variants and their costs. The predictor produces it for an input shape, the planner plans over
// it, simulate() judges plans by it, and monet-plan reads it as JSON (DESIGN.md, "Formats").
//
// Stage i takes x(i-1) and gives x(i). Bytes are bytes on the training device; times are
// seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace monet {

// The longest time a stage's number may hold, seconds: 1e9 (about 32 years), so that the
// planners' sums of times over stages and recomputations stay finite. The predictor refuses a
// measurement above it, the planner a chain.
inline constexpr double kMaxChainSeconds = 1e9;
// The largest byte count a chain may hold, 1 PiB: far above any device's memory, and low enough
// that adding a stage's few numbers in 64 bits never overflows. The predictor refuses a
// measurement above it, the planner a chain.
inline constexpr std::int64_t kMaxChainBytes = std::int64_t{1} << 50;

struct VariantCosts {
  std::string name = "default";  // the first variant of a stage is its default implementation
  std::int64_t out_bytes = 0;    // size of the stage's output x(i)
  std::int64_t saved_bytes = 0;  // what the stage keeps for backward beyond its input
  std::int64_t fwd_peak = 0;     // transient bytes above what is kept, during forward
  std::int64_t bwd_peak = 0;     // transient bytes above what is kept, during backward
  double fwd_time = 0.0;         // seconds
  double bwd_time = 0.0;         // seconds
};

struct Stage {
  std::string name;
  std::vector<VariantCosts> variants;  // at least one
  // Bytes the stage's backward creates that stay until the iteration ends: the gradients of its
  // parameters that have none when the iteration starts (an optimizer's zero_grad with
  // set_to_none, LibTorch 2.x's default). They are live from the stage's backward on, not during
  // the forward. Gradients that exist at the start are in fixed_bytes instead. Default 0.
  std::int64_t grad_bytes = 0;
};

struct Chain {
  // Bytes live through the whole iteration: parameters, the gradients that exist when it starts,
  // optimizer state, the batch, workspace.
  std::int64_t fixed_bytes = 0;
  std::vector<Stage> stages;
};

}  // namespace monet
