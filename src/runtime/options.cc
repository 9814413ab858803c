#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>

#include "allocator/device_pools.h"
#include "common/env.h"
#include "common/numbers.h"
#include "monet/allocator.h"
#include "monet/bytes.h"
#include "monet/errors.h"
#include "monet/runtime.h"

namespace monet {
namespace {

double parse_fraction(const std::string& text, const char* variable) {
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  bool percent = used < text.size() && text[used] == '%';
  if (percent) ++used;
  if (used == 0 || used != text.size() || !std::isfinite(value)) {
    throw ConfigError(fmt::format(
        "{}='{}' is not a fraction; write it as 0.15 or 15% (from 0 to 90%)", variable, text));
  }
  return percent ? value / 100.0 : value;
}

}  // namespace

Options Options::from_env() {
  Options o;
  install();  // checks every MONET_* variable the allocator reads, MONET_BUDGET among them
  // From the variable, not from the pool: a Runtime sets its own budget on the pool, which a
  // later from_env() would otherwise take for MONET_BUDGET.
  if (auto budget = env_value("MONET_BUDGET")) {
    CachingAllocator& pool = pools::cuda_devices() > 0 ? pools::cuda(0) : pools::cpu();
    o.budget_bytes =
        static_cast<std::int64_t>(parse_budget(*budget, pool.device_total_bytes(), "MONET_BUDGET"));
  }
  o.strategy = strategy_from_env();
  if (auto margin = env_value("MONET_MARGIN")) {
    o.margin = parse_fraction(*margin, "MONET_MARGIN");
    if (!(o.margin >= 0.0 && o.margin <= 0.9)) {
      throw ConfigError(fmt::format(
          "MONET_MARGIN='{}' is out of range; use 0 to 90% (10% is the default)", *margin));
    }
  }
  if (auto path = env_value("MONET_PREDICTOR_STATE")) o.predictor_state = *path;
  if (auto repeats = env_value("MONET_MEASURE_REPEATS")) {
    const std::optional<long long> value = parse_whole_number(*repeats);
    if (!value || *value < 1 || *value > Options::kMaxMeasureRepeats) {
      throw ConfigError(fmt::format(
          "MONET_MEASURE_REPEATS='{}' is not a count of timings; use a whole number from 1 (the "
          "default) to {} (3 keeps the planner from choosing a mode for one lucky timing)",
          *repeats, Options::kMaxMeasureRepeats));
    }
    o.measure_repeats = static_cast<int>(*value);
  }
  if (auto clock = env_value("MONET_STAGE_CLOCK")) {
    if (*clock == "auto") {
      o.stage_clock = StageClock::kAuto;
    } else if (*clock == "wall") {
      o.stage_clock = StageClock::kWall;
    } else {
      throw ConfigError(fmt::format(
          "MONET_STAGE_CLOCK='{}' is not a stage clock; use auto (CUPTI's kernel times on a GPU "
          "where CUPTI loads, the default) or wall",
          *clock));
    }
  }
  return o;
}

}  // namespace monet
