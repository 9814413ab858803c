#include "monet/bytes.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "monet/errors.h"

namespace monet {
namespace {

constexpr double kKi = 1024.0;

[[noreturn]] void reject(std::string_view variable, std::string_view text, std::string_view why) {
  throw ConfigError(fmt::format(
      "{}='{}' is not a budget monet can use ({}). Use bytes (1073741824), a size with a unit "
      "(8GiB, 8G, 7500MB, 512MiB) or a share of the device's memory (60%).",
      variable, text, why));
}

// Multiplier for a unit suffix, or 0 when the suffix is not a unit.
double unit_multiplier(std::string unit) {
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "b") return 1.0;
  if (unit == "k" || unit == "kib") return kKi;
  if (unit == "m" || unit == "mib") return kKi * kKi;
  if (unit == "g" || unit == "gib") return kKi * kKi * kKi;
  if (unit == "t" || unit == "tib") return kKi * kKi * kKi * kKi;
  if (unit == "kb") return 1e3;
  if (unit == "mb") return 1e6;
  if (unit == "gb") return 1e9;
  if (unit == "tb") return 1e12;
  return 0.0;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::size_t parse_budget(std::string_view text, std::size_t device_total_bytes,
                         std::string_view variable) {
  const std::string_view body = trim(text);
  if (body.empty()) reject(variable, text, "it is empty");

  std::size_t digits_end = 0;
  while (digits_end < body.size() &&
         (std::isdigit(static_cast<unsigned char>(body[digits_end])) || body[digits_end] == '.')) {
    ++digits_end;
  }
  const std::string number(body.substr(0, digits_end));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) {
    reject(variable, text, "it does not start with a number");
  }
  const double value = std::strtod(number.c_str(), nullptr);
  const std::string suffix(trim(body.substr(digits_end)));

  double bytes = 0.0;
  if (suffix == "%") {
    if (value <= 0.0 || value > 100.0) reject(variable, text, "a share must be in (0, 100]%");
    if (device_total_bytes == 0) {
      reject(variable, text, "the device's total memory is unknown, so a share cannot be used");
    }
    bytes = std::floor(static_cast<double>(device_total_bytes) * value / 100.0);
  } else {
    const double multiplier = unit_multiplier(suffix);
    if (multiplier == 0.0) reject(variable, text, fmt::format("'{}' is not a unit", suffix));
    bytes = std::floor(value * multiplier);
  }
  if (bytes < 1.0) reject(variable, text, "a budget of zero bytes would fail every allocation");
  // Budgets are signed 64-bit byte counts past here (the runtime's and the planner's).
  if (bytes >= static_cast<double>(std::numeric_limits<std::int64_t>::max())) {
    reject(variable, text, "it is too large");
  }
  return static_cast<std::size_t>(bytes);
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / kKi;
  std::size_t unit = 0;
  while (value >= kKi && unit + 1 < std::size(kUnits)) {
    value /= kKi;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

}  // namespace monet
