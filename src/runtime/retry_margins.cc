#include "runtime/retry_margins.h"

#include <algorithm>

namespace monet {

double RetryMargins::share(const ShapeKey& key, bool learned) const {
  const auto it = extra_.find(key);
  double extra = it == extra_.end() ? 0.0 : it->second;
  if (learned) extra = std::max(extra, learned_extra_);
  return std::min(kMaxShare, options_.margin + extra);
}

std::int64_t RetryMargins::budget_less(double share) const {
  const auto budget = static_cast<double>(options_.budget_bytes);
  return static_cast<std::int64_t>(budget -
                                   std::max(budget * share, static_cast<double>(kFloorBytes)));
}

std::int64_t RetryMargins::unraised_plan_budget() const {
  return budget_less(std::min(kMaxShare, options_.margin));
}

void RetryMargins::ran_out_of_memory(const ShapeKey& key, std::int64_t planned_for) {
  steps_without_retry_ = 0;
  // Above the margin the failed plan left free (a plan made before learned_extra_ rose may have
  // left less than the shape's share now).
  const auto budget = static_cast<double>(options_.budget_bytes);
  const double failed_extra =
      planned_for > 0 ? 1.0 - static_cast<double>(planned_for) / budget - options_.margin : 0.0;
  double& extra = extra_[key];
  extra = std::max(extra, failed_extra) + options_.retry_step;
  learned_extra_ = std::max(learned_extra_, extra);
}

bool RetryMargins::step_ran() {
  if (options_.relax_steps <= 0 || (learned_extra_ <= 0.0 && extra_.empty())) {
    steps_without_retry_ = 0;
    return false;
  }
  if (++steps_without_retry_ < options_.relax_steps) return false;
  steps_without_retry_ = 0;
  const double step = options_.retry_step;
  // What is left below a millionth of the budget is the rounding of plans' bytes: none.
  constexpr double kNone = 1e-6;
  learned_extra_ = learned_extra_ - step > kNone ? learned_extra_ - step : 0.0;
  for (auto it = extra_.begin(); it != extra_.end();) {
    it->second -= step;
    it = it->second <= kNone ? extra_.erase(it) : std::next(it);
  }
  return true;
}

}  // namespace monet
