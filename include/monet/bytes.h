// Sizes as people write them, and the MONET_BUDGET grammar.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace monet {

// Parses a budget as MONET_BUDGET accepts it: "8GiB", "8G", "7500MB", "512MiB", "1073741824"
// (plain bytes) or "60%" of `total_bytes`. Binary units (KiB, MiB, GiB, TiB) and the one-letter
// forms (K, M, G, T) are powers of 1024; KB, MB, GB, TB are powers of 1000. Case and spaces
// between number and unit do not matter; fractions are allowed ("1.5GiB"). A `total_bytes` of 0
// means no total is known, and a share is refused. `share_of` says what the total is, as the
// error message offers a share ("the device's memory"; monet-plan's is a chain's peak).
// Throws ConfigError naming `variable` and the accepted forms for anything else, zero included.
std::size_t parse_budget(std::string_view text, std::size_t total_bytes,
                         std::string_view variable = "MONET_BUDGET",
                         std::string_view share_of = "the device's memory");

// Parses a size as the tools' byte flags take it (monet-plan --fixed, monet-replay
// --granularity): bytes or a size with a unit as parse_budget reads them, zero included ("0",
// "0B"), no share. Throws ConfigError naming `variable` and the accepted forms for anything else.
std::size_t parse_size(std::string_view text, std::string_view variable);

// "1.50 GiB", "512.00 KiB", "17 B": binary units, two decimals.
std::string format_bytes(std::size_t bytes);

}  // namespace monet
