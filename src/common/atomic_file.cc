#include "common/atomic_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "monet/errors.h"

namespace monet {

namespace {
ConfigError cannot_write(const std::string& tmp, const std::string& who, const std::string& what,
                         int error) {
  return ConfigError(
      fmt::format("{}: cannot write {} to '{}' ({}); check that its folder exists and is writable, "
                  "and that its disk has room",
                  who, what, tmp, std::strerror(error)));
}
}  // namespace

void check_writable(const std::string& path, const std::string& who, const std::string& what) {
  // A folder at `path` takes the temporary file beside it, then refuses the rename over it.
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw ConfigError(
        fmt::format("{}: cannot write {} to '{}': it is a folder; name a file", who, what, path));
  }
  const std::string tmp = path + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "a");
  if (out == nullptr) throw cannot_write(tmp, who, what, errno);
  std::fclose(out);
  std::remove(tmp.c_str());
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& who,
                           const std::string& what) {
  const std::string tmp = path + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "w");
  if (out == nullptr) throw cannot_write(tmp, who, what, errno);
  int error = std::fwrite(text.data(), 1, text.size(), out) == text.size() ? 0 : errno;
  if (std::fclose(out) != 0 && error == 0) error = errno;
  if (error != 0) {
    // A full disk leaves part of the text: nothing half-written stays behind.
    std::remove(tmp.c_str());
    throw cannot_write(tmp, who, what, error);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = errno;
    std::remove(tmp.c_str());
    throw ConfigError(
        fmt::format("{}: cannot rename '{}' to '{}' ({}); check that the folder is "
                    "writable and that '{}' is not a folder",
                    who, tmp, path, std::strerror(error), path));
  }
}

}  // namespace monet
