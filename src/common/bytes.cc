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

// What a text is read as: a budget (no zero, a share of a total where one is known) or a size
// (zero allowed, no share).
struct Reading {
  std::string_view variable;
  bool budget;
  bool shares;                // a share ("60%") is a form it takes
  std::string_view share_of;  // what a share is of, as the message says it
};

[[noreturn]] void reject(const Reading& r, std::string_view text, std::string_view why) {
  throw ConfigError(fmt::format(
      "{}='{}' is not a {} monet can use ({}). Use bytes (1073741824){} a size with a unit "
      "(8GiB, 8G, 7500MB, 512MiB){}.",
      r.variable, text, r.budget ? "budget" : "size", why, r.shares ? "," : " or",
      r.shares ? fmt::format(" or a share of {} (60%)", r.share_of) : std::string()));
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

// Bytes from `text` as `r` reads it; `total` is what a share is of.
std::size_t parse(std::string_view text, std::size_t total, const Reading& r) {
  const std::string_view body = trim(text);
  if (body.empty()) reject(r, text, "it is empty");

  std::size_t digits_end = 0;
  while (digits_end < body.size() &&
         (std::isdigit(static_cast<unsigned char>(body[digits_end])) || body[digits_end] == '.')) {
    ++digits_end;
  }
  const std::string number(body.substr(0, digits_end));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) {
    reject(r, text, "it does not start with a number");
  }
  const double value = std::strtod(number.c_str(), nullptr);
  const std::string suffix(trim(body.substr(digits_end)));

  double bytes = 0.0;
  if (suffix == "%") {
    if (!r.budget) reject(r, text, "a size is not a share");
    if (total == 0) {
      reject(r, text, "the total a share would be of is unknown here, so a share cannot be used");
    }
    if (value <= 0.0 || value > 100.0) reject(r, text, "a share must be in (0, 100]%");
    bytes = std::floor(static_cast<double>(total) * value / 100.0);
  } else {
    const double multiplier = unit_multiplier(suffix);
    if (multiplier == 0.0) reject(r, text, fmt::format("'{}' is not a unit", suffix));
    bytes = std::floor(value * multiplier);
  }
  if (r.budget && bytes < 1.0) {
    reject(r, text, "a budget of zero bytes would fail every allocation");
  }
  // Byte counts are signed 64-bit past here (the runtime's and the planner's).
  if (bytes >= static_cast<double>(std::numeric_limits<std::int64_t>::max())) {
    reject(r, text, "it is too large");
  }
  return static_cast<std::size_t>(bytes);
}

}  // namespace

std::size_t parse_budget(std::string_view text, std::size_t total_bytes, std::string_view variable,
                         std::string_view share_of) {
  return parse(text, total_bytes, Reading{variable, true, total_bytes > 0, share_of});
}

std::size_t parse_size(std::string_view text, std::string_view variable) {
  return parse(text, 0, Reading{variable, false, false, {}});
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / kKi;
  std::size_t unit = 0;
  // A value that two decimals would round up to 1024 goes on to the next unit: 1,048,575 bytes is
  // "1.00 MiB", not "1024.00 KiB".
  while (value >= kKi - 0.005 && unit + 1 < std::size(kUnits)) {
    value /= kKi;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

}  // namespace monet
