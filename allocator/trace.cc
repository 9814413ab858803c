#include "allocator/trace.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

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
}  // namespace

TraceWriter::TraceWriter(const std::string& path) : start_(std::chrono::steady_clock::now()) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    throw ConfigError(
        fmt::format("MONET_TRACE='{}' cannot be written ({}). Name a file in a "
                    "folder that exists and that you can write to.",
                    path, std::strerror(errno)));
  }
  std::fprintf(file_, "%s\n", kHeader);
}

TraceWriter::~TraceWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TraceWriter::record(TraceEvent::Op op, const std::string& device, std::uintptr_t stream,
                         std::size_t bytes, const void* address) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start_)
                      .count();
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  fmt::print(file_, "{} {} {} {} {} {}\n", static_cast<char>(op), ns, device, stream, bytes,
             address);
}

void TraceWriter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ != nullptr) std::fflush(file_);
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

std::vector<TraceEvent> read_trace(std::istream& in) {
  std::vector<TraceEvent> events;
  std::string line;
  std::size_t number = 0;
  bool header_seen = false;
  while (std::getline(in, line)) {
    ++number;
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
    std::string op, time, stream, bytes, address;
    TraceEvent e;
    fields >> op >> time >> e.device >> stream >> bytes >> address;
    std::uint64_t t = 0, s = 0, b = 0, a = 0;
    if (!fields || (op != "a" && op != "f") || !parse_unsigned(time, 10, &t) ||
        !parse_unsigned(stream, 10, &s) || !parse_unsigned(bytes, 10, &b) ||
        !parse_unsigned(address, 16, &a)) {
      throw std::runtime_error(fmt::format(
          "trace line {}: '{}' is not 'a|f time_ns device stream bytes 0xaddress' (whole numbers "
          "without a sign)",
          number, line));
    }
    e.op = static_cast<TraceEvent::Op>(op[0]);
    e.time_ns = t;
    e.stream = static_cast<std::uintptr_t>(s);
    e.bytes = static_cast<std::size_t>(b);
    e.address = static_cast<std::uintptr_t>(a);
    events.push_back(std::move(e));
  }
  return events;
}

}  // namespace monet
