// Whole numbers as users write them in flags and MONET_* variables, read strictly: all of the
// text, or nothing. std::stoi alone reads "45.5" as 45, "10%" as 10 and "1e3" as 1, and
// std::stoull reads "-1" as 2^64 - 1; a flag or knob read so runs with a number nobody gave.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

namespace monet {

// Digits with an optional leading minus, all of `text`, within a long long; nullopt for anything
// else ("", " 7", "+7", "45.5", "10%", "1e3", "99999999999999999999").
inline std::optional<long long> parse_whole_number(std::string_view text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Digits only, all of `text`, within 64 bits; nullopt for anything else, a sign included.
inline std::optional<std::uint64_t> parse_unsigned_number(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace monet
