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
  std::size_t line = 0;  // the trace's line it was read from (read_trace); 0 where not read
};

// Appends events to a file; shared by every pool in the process. Thread-safe.
class TraceWriter {
 public:
  // Opens `path` and empties it, unless it is a regular file that another TraceWriter holds open
  // (in any process: a program the traced job starts inherits MONET_TRACE): then `path` is left
  // as it is and this writer writes `path.<pid>`. Throws ConfigError naming MONET_TRACE when it
  // cannot open the file it chose.
  explicit TraceWriter(const std::string& path);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // The file this writer writes.
  const std::string& path() const { return path_; }

  // Never throws, so that an allocation or a free never fails for its trace: a write or flush
  // that fails (a full disk) is said once in monet's log and ends the trace, and the pools go on.
  void record(TraceEvent::Op op, const std::string& device, std::uintptr_t stream,
              std::size_t bytes, const void* address) noexcept;
  void flush() noexcept;

  // Around fork() (pools:: registers them with pthread_atfork): the events so far are flushed and
  // the writer held across it, then let go. The child records nothing from then on: the trace is
  // the process's that opened it, and a child's blocks lie at the parent's addresses.
  void lock_for_fork();
  void unlock_after_fork(bool in_child);

 private:
  // Closes the file after a failed write: said once in monet's log, nothing recorded after it.
  void fail(const char* why) noexcept;

  std::mutex mutex_;
  std::string path_;
  std::FILE* file_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

// Throws ConfigError naming MONET_TRACE where `path` could not be written: a folder, a file that is
// there and not writable, or a folder it would go in that is missing or not writable. Opens
// nothing, so that checking the environment at start leaves a trace another process is writing as
// it is.
void check_trace_path(const std::string& path);

// Reads a whole trace. Throws std::runtime_error naming the line for anything malformed, a device
// that is not "cpu" or "cuda:N" among them. Every
// event TraceWriter writes ends with a newline: where `cut_last_line` is given, a last line
// without one (its writer stopped while writing it: killed, crashed, its disk full) is left out
// and put there, "" where the trace ends whole; without it, that line is read as any other.
std::vector<TraceEvent> read_trace(std::istream& in, std::string* cut_last_line = nullptr);

}  // namespace monet
