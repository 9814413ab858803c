// A chain as JSON, the input format of monet-plan (DESIGN.md, "Formats"):
//
//   {"fixed_bytes": 0,
//    "stages": [{"name": "block0",
//                "variants": [{"name": "default", "out_bytes": 0, "saved_bytes": 0,
//                              "fwd_peak": 0, "bwd_peak": 0, "fwd_time": 0.0,
//                              "bwd_time": 0.0}]}]}
//
// A stage may also have "grad_bytes" (Stage::grad_bytes; 0 when absent, and written only when not
// 0). Bytes are non-negative integers, times non-negative seconds; every other field is required
// and no other field is allowed (a misspelt field is an error, not a silent zero).
#pragma once

#include <string>
#include <string_view>

#include "monet/chain.h"

namespace monet {

// Parses and validates (validate_chain) a chain. Throws ConfigError starting with `source` (a
// file name) and naming the stage, variant and field at fault, e.g.
// "chain.json: stages[3] "layer3": variants[1] "mask": "saved_bytes" must be a non-negative
// integer (bytes), got -5".
Chain parse_chain_json(std::string_view text, std::string_view source = "chain");

// Reads and parses the file at `path`; ConfigError when it cannot be read.
Chain read_chain_file(const std::string& path);

// The chain in the format above, indented by 2.
std::string chain_to_json(const Chain& chain);

}  // namespace monet
