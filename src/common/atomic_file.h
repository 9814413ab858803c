// Writing a file whole or not at all.
#pragma once

#include <string>

namespace monet {

// Writes `text` to a temporary file beside `path` (`path`.tmp.<pid>.<n>, this call's own), syncs
// it to the disk and renames it over `path`, so that a job stopped in the middle, a power loss,
// or another process saving the same path at the same time leaves `path` whole: as it was, or
// one writer's text. Throws ConfigError when the folder cannot be written, saying "`who`: cannot
// write `what` to `path` (why)" and what to check; nothing half-written stays behind.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& who,
                           const std::string& what);

// Throws the ConfigError write_file_atomically(path, ...) would for a folder that cannot be
// written, now: for a job that writes `path` later and should not fail then.
void check_writable(const std::string& path, const std::string& who, const std::string& what);

}  // namespace monet
