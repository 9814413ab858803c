// monet's messages on stderr, filtered by MONET_LOG (error, warn, info, debug; default warn).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace monet {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// The level from MONET_LOG, read once. A value that is not a level is a ConfigError.
LogLevel log_level();

// Parses "error", "warn", "info" or "debug"; throws ConfigError otherwise.
LogLevel parse_log_level(std::string_view text);

// Writes "monet: <message>\n" to stderr in one write, so lines from threads do not interleave
// (a message that begins with "monet:" already, an error's, is written as it is).
void write_log_line(std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (static_cast<int>(level) > static_cast<int>(log_level())) return;
  write_log_line(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace monet
