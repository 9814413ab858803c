// Writing a file whole or not at all.
#pragma once

#include <string>

namespace monet {

// Writes `text` to `path`.tmp, then renames it over `path`, so that a job stopped in the middle
// leaves the file as it was. Throws ConfigError when the folder cannot be written, saying
// "`who`: cannot write `what` to ..." and what to check.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& who,
                           const std::string& what);

}  // namespace monet
