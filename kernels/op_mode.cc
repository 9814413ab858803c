#include "monet/op_mode.h"

namespace monet {
namespace {

thread_local OpMode current_mode = OpMode::kDefault;
thread_local std::uint64_t calls = 0;
thread_local std::uint64_t recomputing_calls = 0;

}  // namespace

std::string_view op_mode_name(OpMode mode) {
  switch (mode) {
    case OpMode::kDefault:
      return "default";
    case OpMode::kCompact:
      return "compact";
    case OpMode::kRegenerate:
      return "regenerate";
    case OpMode::kRecompute:
      return "recompute";
  }
  return "default";
}

OpMode op_mode() { return current_mode; }

OpModeScope::OpModeScope(OpMode mode) : previous_(current_mode) { current_mode = mode; }

OpModeScope::~OpModeScope() { current_mode = previous_; }

std::uint64_t variant_op_calls() { return calls; }

void count_variant_op_call(bool recomputes) {
  ++calls;
  if (recomputes) ++recomputing_calls;
}

std::uint64_t recomputing_op_calls() { return recomputing_calls; }

}  // namespace monet
