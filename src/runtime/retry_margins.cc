#include "runtime/retry_margins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "monet/errors.h"

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

namespace {

constexpr const char* kFormat = "monet-retry-margins";
constexpr int kVersion = 1;

[[noreturn]] void malformed(const std::string& path, const std::string& what) {
  throw ConfigError(fmt::format(
      "monet: the retry margins in '{}' are malformed: {}; delete the file to start from the "
      "margin alone",
      path, what));
}

// A share added to the margin: a finite number from 0 to 1.
double extra_share(const nlohmann::json& v, const std::string& path, const std::string& field) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0.0 ||
      v.get<double>() > 1.0) {
    malformed(path, fmt::format("{} is {}, not a share from 0 to 1", field, v.dump()));
  }
  return v.get<double>();
}

}  // namespace

void RetryMargins::save(const std::string& path) const {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& [key, extra] : extra_) {
    shapes.push_back({{"dims", key.dims()}, {"extra", extra}});
  }
  const nlohmann::json state = {{"format", kFormat},
                                {"version", kVersion},
                                {"budget_bytes", options_.budget_bytes},
                                {"margin", options_.margin},
                                {"learned_extra", learned_extra_},
                                {"shapes", shapes}};
  write_file_atomically(path, state.dump(1) + "\n", "monet", "the retry margins");
}

bool RetryMargins::load(const std::string& path) {
  if (!std::filesystem::exists(path)) return false;
  std::ifstream in(path);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    malformed(path, fmt::format("not valid JSON ({})", e.what()));
  }
  const auto format = state.find("format");  // end() where state is not an object
  if (format == state.end() || *format != kFormat) {
    malformed(path, fmt::format("its format is not \"{}\"", kFormat));
  }
  const auto version = state.find("version");
  if (version == state.end() || !version->is_number_integer() ||
      version->get<std::int64_t>() != kVersion) {
    malformed(path, fmt::format("version {} is not {}",
                                version == state.end() ? "(none)" : version->dump(), kVersion));
  }
  const auto budget = state.find("budget_bytes");
  const auto margin = state.find("margin");
  const auto learned = state.find("learned_extra");
  const auto shapes = state.find("shapes");
  if (budget == state.end() || !budget->is_number_integer() || margin == state.end() ||
      !margin->is_number() || learned == state.end() || shapes == state.end() ||
      !shapes->is_array()) {
    malformed(path, "it needs budget_bytes, margin, learned_extra and shapes");
  }
  std::unordered_map<ShapeKey, double, ShapeKeyHash> extra;
  for (const nlohmann::json& s : *shapes) {
    const auto dims = s.find("dims");
    if (!s.is_object() || dims == s.end() || !dims->is_array() || !s.contains("extra")) {
      malformed(path, fmt::format("shape {} needs dims and extra", s.dump()));
    }
    std::vector<std::int64_t> d;
    for (const nlohmann::json& v : *dims) {
      if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) {
        malformed(path, fmt::format("shape {} has a dim that is not a positive integer", s.dump()));
      }
      d.push_back(v.get<std::int64_t>());
    }
    extra[ShapeKey(d)] = extra_share(s["extra"], path, "a shape's extra");
  }
  const double learned_extra = extra_share(*learned, path, "learned_extra");
  // Shares of another budget, or above another margin, are not this one's.
  if (budget->get<std::int64_t>() != options_.budget_bytes ||
      margin->get<double>() != options_.margin) {
    return false;
  }
  extra_ = std::move(extra);
  learned_extra_ = learned_extra;
  steps_without_retry_ = 0;
  return true;
}

}  // namespace monet
