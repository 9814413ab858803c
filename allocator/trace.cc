#include "allocator/trace.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "common/log.h"
#include "monet/errors.h"

namespace monet {
namespace {
constexpr const char* kHeader = "# monet-trace 1";

// `text` as an unsigned number in `base` (10, or 16 after "0x"), or false where it is not one
// whole: no sign (an unsigned read would wrap "-5" round), nothing after it, no overflow.
bool parse_unsigned(const std::string& text, int base, std::uint64_t* value) {
  const std::size_t start = base == 16 ? 2 : 0;
  if (text.size() <= start || (base == 16 && text.compare(0, 2, "0x") != 0)) return false;
  for (std::size_t i = start; i < text.size(); ++i) {
    const bool digit = base == 16 ? std::isxdigit(static_cast<unsigned char>(text[i])) != 0
                                  : std::isdigit(static_cast<unsigned char>(text[i])) != 0;
    if (!digit) return false;
  }
  errno = 0;
  *value = std::strtoull(text.c_str() + start, nullptr, base);
  return errno == 0;
}

// "cpu" or "cuda:N", as the pools name their devices.
bool is_device(const std::string& device) {
  if (device == "cpu") return true;
  std::uint64_t index = 0;
  return device.compare(0, 5, "cuda:") == 0 && parse_unsigned(device.substr(5), 10, &index);
}

ConfigError unwritable(const std::string& path, int error) {
  return ConfigError(
      fmt::format("MONET_TRACE='{}' cannot be written ({}). Name a file in a folder that exists "
                  "and that you can write to.",
                  path, std::strerror(error)));
}
}  // namespace

void check_trace_path(const std::string& path) {
  // A folder passes access(W_OK) and fails only when the first pool opens it, with no trace then.
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw ConfigError(fmt::format(
        "MONET_TRACE='{}' is a folder. Name a file, a new one in that folder for instance.", path));
  }
  if (::access(path.c_str(), F_OK) == 0) {
    if (::access(path.c_str(), W_OK) != 0) throw unwritable(path, errno);
    return;
  }
  const auto slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  if (::access(folder.c_str(), W_OK | X_OK) != 0) throw unwritable(path, errno);
}

TraceWriter::TraceWriter(const std::string& path)
    : path_(path), start_(std::chrono::steady_clock::now()) {
  // Opened without truncating: the file may be another process's trace, which only the lock tells.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) throw unwritable(path, errno);
  struct stat st {};
  // Devices and pipes (/dev/stderr) are written as they are: there is nothing to truncate.
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    // Held until this process closes the file (a forked child's copy included); a file system
    // without locks leaves every process the owner, as before.
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      ::close(fd);
      path_ = fmt::format("{}.{}", path, ::getpid());
      fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
      if (fd < 0) throw unwritable(path_, errno);
      log(LogLevel::kInfo, "MONET_TRACE: another process writes {}; this one writes {}", path,
          path_);
    } else if (::ftruncate(fd, 0) != 0) {
      const int error = errno;
      ::close(fd);
      throw unwritable(path, error);
    }
  }
  file_ = ::fdopen(fd, "w");
  if (file_ == nullptr) {
    const int error = errno;
    ::close(fd);
    throw unwritable(path_, error);
  }
  std::fprintf(file_, "%s\n", kHeader);
}

TraceWriter::~TraceWriter() {
  if (file_ != nullptr && std::fclose(file_) != 0) {
    file_ = nullptr;
    fail(std::strerror(errno));
  }
}

void TraceWriter::record(TraceEvent::Op op, const std::string& device, std::uintptr_t stream,
                         std::size_t bytes, const void* address) noexcept {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start_)
                      .count();
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  try {
    fmt::print(file_, "{} {} {} {} {} {}\n", static_cast<char>(op), ns, device, stream, bytes,
               address);
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void TraceWriter::flush() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ != nullptr && std::fflush(file_) != 0) fail(std::strerror(errno));
}

void TraceWriter::fail(const char* why) noexcept {
  if (file_ != nullptr) {
    std::fclose(file_);  // what is still buffered cannot be written either
    file_ = nullptr;
  }
  try {
    log(LogLevel::kWarn, "MONET_TRACE: writing {} failed ({}); the trace ends here, incomplete",
        path_, why);
  } catch (...) {
    // The warning could not be formatted (no memory): the trace still ends, and quietly.
  }
}

void TraceWriter::lock_for_fork() {
  mutex_.lock();
  if (file_ != nullptr) std::fflush(file_);
}

void TraceWriter::unlock_after_fork(bool in_child) {
  if (in_child && file_ != nullptr) {
    std::fclose(file_);  // flushed before the fork: closes the child's copy of the descriptor
    file_ = nullptr;
  }
  mutex_.unlock();
}

std::vector<TraceEvent> read_trace(std::istream& in, std::string* cut_last_line) {
  std::vector<TraceEvent> events;
  std::string line;
  std::size_t number = 0;
  bool header_seen = false;
  if (cut_last_line != nullptr) cut_last_line->clear();
  while (std::getline(in, line)) {
    ++number;
    // getline stops at the end of the input, not at a newline: the line was cut short.
    if (cut_last_line != nullptr && in.eof() && !line.empty()) {
      *cut_last_line = line;
      break;
    }
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (!header_seen && line.rfind("# monet-trace", 0) == 0 && line != kHeader) {
        throw std::runtime_error(fmt::format(
            "trace line {}: '{}' is a version this monet-replay does not read", number, line));
      }
      header_seen = true;
      continue;
    }
    std::istringstream fields(line);
    std::string op, time, stream, bytes, address, rest;
    TraceEvent e;
    fields >> op >> time >> e.device >> stream >> bytes >> address;
    // Nothing may follow the address: two events run together on one line would lose the second.
    const bool whole = fields && !(fields >> rest);
    std::uint64_t t = 0, s = 0, b = 0, a = 0;
    if (!whole || (op != "a" && op != "f") || !parse_unsigned(time, 10, &t) ||
        !parse_unsigned(stream, 10, &s) || !parse_unsigned(bytes, 10, &b) ||
        !parse_unsigned(address, 16, &a)) {
      throw std::runtime_error(fmt::format(
          "trace line {}: '{}' is not 'a|f time_ns device stream bytes 0xaddress' (whole numbers "
          "without a sign)",
          number, line));
    }
    if (!is_device(e.device)) {
      throw std::runtime_error(
          fmt::format("trace line {}: '{}' names device '{}', which is not cpu or cuda:N", number,
                      line, e.device));
    }
    e.op = static_cast<TraceEvent::Op>(op[0]);
    e.time_ns = t;
    e.stream = static_cast<std::uintptr_t>(s);
    e.bytes = static_cast<std::size_t>(b);
    e.address = static_cast<std::uintptr_t>(a);
    e.line = number;
    events.push_back(std::move(e));
  }
  return events;
}

}  // namespace monet
