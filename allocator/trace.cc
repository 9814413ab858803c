#include "allocator/trace.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "monet/errors.h"

namespace monet {
namespace {
constexpr const char* kHeader = "# monet-trace 1";
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
  fmt::print(file_, "{} {} {} {} {} {}\n", static_cast<char>(op), ns, device, stream, bytes,
             address);
}

void TraceWriter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fflush(file_);
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
    char op = 0;
    TraceEvent e;
    std::string address;
    fields >> op >> e.time_ns >> e.device >> e.stream >> e.bytes >> address;
    if (!fields || (op != 'a' && op != 'f') || address.rfind("0x", 0) != 0) {
      throw std::runtime_error(fmt::format(
          "trace line {}: '{}' is not 'a|f time_ns device stream bytes 0xaddress'", number, line));
    }
    e.op = static_cast<TraceEvent::Op>(op);
    e.address = static_cast<std::uintptr_t>(std::stoull(address, nullptr, 16));
    events.push_back(std::move(e));
  }
  return events;
}

}  // namespace monet
