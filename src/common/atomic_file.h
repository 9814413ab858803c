// Writing a file whole or not at all.
#pragma once

#include <string>

namespace monet {

// Writes `text` to `path`.tmp, then renames it over `path`, so that a job stopped in the middle
// leaves the file as it was. Throws ConfigError when the folder cannot be written, saying
// "`who`: cannot write `what` to ..." and what to check.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& who,
                           const std::string& what);

// Throws the ConfigError write_file_atomically(path, ...) would for a folder that cannot be
// written, now: for a job that writes `path` later and should not fail then.
void check_writable(const std::string& path, const std::string& who, const std::string& what);

}  // namespace monet
