// Checks on a chain and on a plan's shape, and the small plans every strategy starts from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "monet/chain.h"
#include "monet/planner.h"

namespace monet {

// The most bytes a chain may hold in all: fixed_bytes plus, for each stage, its grad_bytes and its
// variants' largest out_bytes, saved_bytes, fwd_peak and bwd_peak. 256 PiB (2^58 bytes): a peak
// counts each of these numbers at most twice, so every sum the planners make stays below their
// mark of what no plan reaches (2^61), however many stages share the bytes. 2,047 stages of 1 PiB
// reached that mark, and the checkpoint DP then found no way to the chain's end.
inline constexpr std::int64_t kMaxChainTotalBytes = std::int64_t{1} << 58;
// kMaxChainBytes and kMaxChainSeconds, the most bytes and seconds a chain's number may hold, are
// monet/chain.h's.

// Throws ConfigError, prefixed with `source` and naming the stage (index and name), the variant
// and the field, for: a chain without stages, a stage without variants, an empty or repeated
// stage or variant name, a byte count (fixed_bytes and grad_bytes included) that is negative or
// above kMaxChainBytes, byte counts that sum to more than kMaxChainTotalBytes, or a time that is
// negative, not finite or above kMaxChainSeconds. Variants of a stage may disagree on out_bytes
// (predictions are noisy); the planner then plans with the largest.
void validate_chain(const Chain& chain, std::string_view source = "chain");

// Raises each stage's variants' fwd_time and bwd_time to at least its first variant's. For chains
// whose other variants do the first's work and more (the runtime's: the default operator mode
// first, then lean modes that also pack masks, recover inputs or recompute), where a lean variant
// timed below the first is noise: a planner choosing among variants by time would take it where
// no memory is short, and run slower than without it. Ties go to the first variant.
void no_variant_faster_than_the_first(Chain* chain);

// Throws std::invalid_argument unless `plan` has one entry per stage of `chain` and every variant
// index names a variant of its stage.
void check_plan_shape(const Chain& chain, const Plan& plan);

// Whether stage `index` (0-based) is checkpointed and begins a segment: the first stage, one after
// a kept stage, or one marked segment_start.
inline bool starts_segment(const Plan& plan, int index) {
  const StagePlan& s = plan.stages[static_cast<std::size_t>(index)];
  return s.checkpoint &&
         (index == 0 || !plan.stages[static_cast<std::size_t>(index) - 1].checkpoint ||
          s.segment_start);
}
// Whether stage `index` starts a new segment right after a checkpointed stage: a segment_start
// that splits a run of checkpointed stages (the only place the flag changes anything).
inline bool splits_segment(const Plan& plan, int index) {
  return index > 0 && plan.stages[static_cast<std::size_t>(index) - 1].checkpoint &&
         starts_segment(plan, index);
}
// Whether stage `index` is checkpointed and in the same segment as the stage before it.
inline bool continues_segment(const Plan& plan, int index) {
  return plan.stages[static_cast<std::size_t>(index)].checkpoint && !starts_segment(plan, index);
}
// The last stage of the segment that starts at or contains stage `index` (0-based, checkpointed).
inline int segment_last(const Plan& plan, int index) {
  const int n = static_cast<int>(plan.stages.size());
  while (index + 1 < n && continues_segment(plan, index + 1)) ++index;
  return index;
}

// Every stage kept (checkpoint = false) or every stage checkpointed, default variants; every
// stage checkpointed is one segment of the whole chain.
Plan uniform_plan(const Chain& chain, bool checkpoint);

// What stage `index` (0-based) holds from its forward until its backward under `plan`, in bytes:
// a kept stage its input and saved bytes, the first stage of a segment its input, any other
// checkpointed stage nothing. simulate.h gives the whole model.
std::int64_t retained_bytes(const Chain& chain, const Plan& plan, int index);

// Stages checkpointed in `plan`, and stages that run a variant other than the default.
int checkpointed_stages(const Plan& plan);
int non_default_variants(const Plan& plan);

}  // namespace monet
