// What people type and what monet-replay reads: MONET_BUDGET's sizes and shares, the tools' byte
// flags and numbers (refused with a ConfigError or read), and allocation traces (refused with a
// std::runtime_error naming the line, or read). An input starting with "T" is a trace.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "allocator/trace.h"
#include "common/numbers.h"
#include "monet/bytes.h"
#include "monet/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text[0] == 'T') {
    std::istringstream in(text.substr(1));
    std::string cut;
    try {
      monet::read_trace(in, &cut);
    } catch (const std::runtime_error&) {
    }
    return 0;
  }
  try {
    monet::format_bytes(monet::parse_budget(text, std::size_t{1} << 40, "MONET_BUDGET"));
  } catch (const monet::ConfigError&) {
  }
  try {
    monet::format_bytes(monet::parse_size(text, "--fixed"));
  } catch (const monet::ConfigError&) {
  }
  monet::parse_whole_number(text);
  monet::parse_unsigned_number(text);
  return 0;
}
