// Whole numbers on a tool's command line, read whole (common/numbers.h): 45.5, 10%, 1e3 and, for
// a seed, -1 are refused rather than read as 45, 10, 1 or 2^64 - 1. A refusal is a FlagError
// whose message is the line to show the user; each tool catches it and prints its usage.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/numbers.h"

namespace monet::tools {

class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `text` as a whole number from `least` to `most` for `flag`; `range` says the range to a user
// ("--steps must be positive").
inline int int_flag(const std::string& flag, const std::string& text, int least, int most,
                    const std::string& range) {
  const std::optional<long long> value = monet::parse_whole_number(text);
  if (!value) throw FlagError("bad number '" + text + "' for " + flag + "; give a whole number");
  if (*value < std::numeric_limits<int>::min() || *value > std::numeric_limits<int>::max()) {
    throw FlagError("bad number '" + text + "' for " + flag + ": it is outside " +
                    std::to_string(least) + " to " + std::to_string(most));
  }
  if (*value < least || *value > most) throw FlagError(range);
  return static_cast<int>(*value);
}

// A seed: every digit of `text`, no sign.
inline std::uint64_t seed_flag(const std::string& flag, const std::string& text) {
  const std::optional<std::uint64_t> value = monet::parse_unsigned_number(text);
  if (!value) {
    throw FlagError("bad seed '" + text + "' for " + flag +
                    "; give a whole number from 0 to 2^64 - 1");
  }
  return *value;
}

}  // namespace monet::tools
