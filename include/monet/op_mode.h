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

// A stage's variant index in a chain is the OpMode's value: 0 default, 1 compact, 2 regenerate.
enum class OpMode : int {
  kDefault = 0,     // what torch::nn keeps for backward
  kCompact = 1,     // less kept, same arithmetic: 1-bit ReLU and dropout masks, output-keeping
                    // BatchNorm, compact pooling indices, output-only softmax
  kRegenerate = 2,  // kCompact, and what can be recomputed cheaply is: dropout keeps only its RNG
                    // seed and offset, GELU recomputes from a compact input
};
constexpr int kOpModes = 3;

// "default", "compact" or "regenerate": the variant names in chains and plans.
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
// Counts one call; every variant-aware operator calls it.
void count_variant_op_call();

}  // namespace monet
