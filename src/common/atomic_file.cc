#include "common/atomic_file.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "monet/errors.h"

namespace monet {

namespace {
ConfigError cannot_write(const std::string& tmp, const std::string& who, const std::string& what) {
  return ConfigError(fmt::format(
      "{}: cannot write {} to '{}'; check that its folder exists and is writable", who, what, tmp));
}
}  // namespace

void check_writable(const std::string& path, const std::string& who, const std::string& what) {
  const std::string tmp = path + ".tmp";
  if (!std::ofstream(tmp, std::ios::app)) throw cannot_write(tmp, who, what);
  std::remove(tmp.c_str());
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& who,
                           const std::string& what) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw cannot_write(tmp, who, what);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw ConfigError(fmt::format(
        "{}: cannot rename '{}' to '{}'; check that the folder is writable", who, tmp, path));
  }
}

}  // namespace monet
