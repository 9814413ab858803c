// The allocation trace (MONET_TRACE=file): one line per allocation and free, written as they
// happen, read back by monet-replay. Format (docs/trace.md):
//
//   # monet-trace 1
//   a <time_ns> <device> <stream> <bytes> <address>
//   f <time_ns> <device> <stream> <bytes> <address>
//
// time_ns counts from the trace's start; device is "cpu" or "cuda:N"; stream is the stream as an
// integer (0 is the default stream); bytes is what the caller asked for (a free repeats the size
// of the allocation it ends); address is hexadecimal with 0x.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <istream>
#include <mutex>
#include <string>
#include <vector>

namespace monet {

struct TraceEvent {
  enum class Op : char { kAlloc = 'a', kFree = 'f' };
  Op op = Op::kAlloc;
  std::uint64_t time_ns = 0;
  std::string device;
  std::uintptr_t stream = 0;
  std::size_t bytes = 0;
  std::uintptr_t address = 0;
};

// Appends events to a file; shared by every pool in the process. Thread-safe.
class TraceWriter {
 public:
  // Opens (truncates) `path`. Throws ConfigError naming MONET_TRACE when it cannot.
  explicit TraceWriter(const std::string& path);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  void record(TraceEvent::Op op, const std::string& device, std::uintptr_t stream,
              std::size_t bytes, const void* address);
  void flush();

  // Around fork() (pools:: registers them with pthread_atfork): the events so far are flushed and
  // the writer held across it, then let go. The child records nothing from then on: the trace is
  // the process's that opened it, and a child's blocks lie at the parent's addresses.
  void lock_for_fork();
  void unlock_after_fork(bool in_child);

 private:
  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

// Reads a whole trace. Throws std::runtime_error naming the line for anything malformed.
std::vector<TraceEvent> read_trace(std::istream& in);

}  // namespace monet
