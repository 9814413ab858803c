#include "common/log.h"

#include <unistd.h>

#include <string>

#include "common/env.h"
#include "monet/errors.h"

namespace monet {

LogLevel parse_log_level(std::string_view text) {
  if (text == "error") return LogLevel::kError;
  if (text == "warn") return LogLevel::kWarn;
  if (text == "info") return LogLevel::kInfo;
  if (text == "debug") return LogLevel::kDebug;
  throw ConfigError(
      fmt::format("MONET_LOG='{}' is not a log level. Use error, warn, info or debug.", text));
}

LogLevel log_level() {
  static const LogLevel level = [] {
    const auto value = env_value("MONET_LOG");
    return value ? parse_log_level(*value) : LogLevel::kWarn;
  }();
  return level;
}

void write_log_line(std::string_view message) {
  // Errors' messages already begin with "monet: ".
  std::string line = message.substr(0, 6) == "monet:" ? "" : "monet: ";
  line.append(message);
  line.push_back('\n');
  // One write(2) per line: stdio buffering would reorder lines against the program's own output.
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace monet
