// Which implementation monet's variant-aware operators run on the calling thread. The planner
// picks a variant per stage (include/monet/planner.h: StagePlan::variant); the runtime runs each
// stage inside an OpModeScope of that variant, and every monet::nn module and monet::ops function
// in the stage follows it. Code that never sets a mode runs the default (torch-equivalent) ops.
//
//   { monet::OpModeScope scope(monet::OpMode::kCompact); y = stage(x); }
#pragma once

#include <cstdint>
#include <string_view>

namespace monet {

// The modes. Each keeps less than the one before it in this order: default, compact, recompute,
// regenerate (the values are not in that order). Chains and plans name a stage's variants by
// these names (a stage's variant index is its position among the modes it has, not the value).
enum class OpMode : int {
  kDefault = 0,     // what torch::nn keeps for backward
  kCompact = 1,     // less kept, same arithmetic: 1-bit ReLU and dropout masks, output-keeping
                    // BatchNorm, compact pooling indices (softmax keeps its output in every mode)
  kRegenerate = 2,  // kRecompute, and dropout keeps only its RNG seed and offset (a different
                    // draw from torch's: the runtime uses it only when allowed)
  kRecompute = 3,   // kCompact, and a fused op recomputes an inner convolution's output in
                    // backward instead of keeping it (one more convolution forward, exact)
};
constexpr int kOpModes = 4;

// "default", "compact", "regenerate" or "recompute": the variant names in chains and plans.
std::string_view op_mode_name(OpMode mode);

// The calling thread's mode (kDefault unless an OpModeScope is active).
OpMode op_mode();

// Sets the calling thread's mode for its lifetime, and restores the previous one after.
class OpModeScope {
 public:
  explicit OpModeScope(OpMode mode);
  ~OpModeScope();
  OpModeScope(const OpModeScope&) = delete;
  OpModeScope& operator=(const OpModeScope&) = delete;

 private:
  OpMode previous_;
};

// How many variant-aware operator calls the calling thread has made (any mode). The runtime
// compares it before and after a stage: a stage that made none has only its default variant.
std::uint64_t variant_op_calls();
// Counts one call; every variant-aware operator calls it. `recomputes`: the op keeps less under
// kRecompute than under kCompact (so that a stage without such an op is not measured in it).
void count_variant_op_call(bool recomputes = false);
// How many of the calling thread's variant-aware calls were of ops that keep less under
// kRecompute than under kCompact.
std::uint64_t recomputing_op_calls();
// Whether `mode` recomputes what kRecompute does (kRecompute and kRegenerate).
constexpr bool recomputes(OpMode mode) {
  return mode == OpMode::kRecompute || mode == OpMode::kRegenerate;
}

}  // namespace monet
