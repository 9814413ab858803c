#include "common/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "monet/errors.h"

namespace monet {

namespace {
ConfigError cannot_write(const std::string& path, const std::string& who, const std::string& what,
                         int error) {
  return ConfigError(
      fmt::format("{}: cannot write {} to '{}' ({}); check that its folder exists and is writable, "
                  "and that its disk has room",
                  who, what, path, std::strerror(error)));
}

// A temporary file beside `path` that no other writer uses: this process's, numbered, so that
// two processes (or threads) saving one path at once each rename a whole file of their own over
// it, rather than write into, or rename away, the other's.
int open_temporary(const std::string& path, std::string* tmp) {
  static std::atomic<unsigned long> counter{0};
  for (;;) {
    *tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter.fetch_add(1));
    // 0666 less the umask, as a file made by fopen is.
    const int fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;  // EEXIST: left by a process of this pid before
  }
}

int write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

// After the rename, so that the new name survives a power loss too. Best effort: a file system
// that cannot sync a folder has still renamed the file.
void sync_folder_of(const std::string& path) {
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) folder = ".";
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}
}  // namespace

void check_writable(const std::string& path, const std::string& who, const std::string& what) {
  // A folder at `path` takes the temporary file beside it, then refuses the rename over it.
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw ConfigError(
        fmt::format("{}: cannot write {} to '{}': it is a folder; name a file", who, what, path));
  }
  std::string tmp;
  const int fd = open_temporary(path, &tmp);
  if (fd < 0) throw cannot_write(path, who, what, errno);
  ::close(fd);
  std::remove(tmp.c_str());
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& who,
                           const std::string& what) {
  std::string tmp;
  const int fd = open_temporary(path, &tmp);
  if (fd < 0) throw cannot_write(path, who, what, errno);
  // On the disk before the rename: a power loss then leaves the old file or the new one whole,
  // not an empty one under the new name.
  int error = write_all(fd, text);
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    // A full disk leaves part of the text: nothing half-written stays behind.
    std::remove(tmp.c_str());
    throw cannot_write(path, who, what, error);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = errno;
    std::remove(tmp.c_str());
    throw ConfigError(
        fmt::format("{}: cannot rename '{}' to '{}' ({}); check that the folder is "
                    "writable and that '{}' is not a folder",
                    who, tmp, path, std::strerror(error), path));
  }
  sync_folder_of(path);
}

}  // namespace monet
