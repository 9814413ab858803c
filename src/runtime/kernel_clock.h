// The device's busy time over a stretch of host code, from CUPTI's activity records: the union
// of the intervals in which a kernel, a memset or a copy ran on a CUDA device. The measurement
// pass times stages on CUDA with it, so that a stage's time is what its device work takes, free
// of launch gaps, of host-side dispatch and of the host's other load (docs/runtime.md).
//
// CUPTI is loaded with dlopen when the clock is first asked for (libcupti from the toolkit the
// build found, else the loader's search path), so libmonet.so does not depend on it: where it is
// missing, another profiler holds CUPTI's activity callbacks, or CUPTI will not record (no
// driver), available() is false and says why, and the measurement pass times by the wall clock.
// A window CUPTI could not time whole (it refused to record, or dropped records) says so, and the
// pass times that window by the wall clock. Plain C++: no LibTorch, no CUDA runtime.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace monet {

// One interval of device work, in CUPTI's timestamps (nanoseconds).
using DeviceInterval = std::pair<std::uint64_t, std::uint64_t>;

// Nanoseconds covered by the union of `intervals`, counting only what lies at or after `from`
// (work that ran before a window began is not the window's). Empty and reversed intervals count 0.
// Sorts `intervals`.
std::uint64_t busy_nanoseconds(std::vector<DeviceInterval>& intervals, std::uint64_t from);

// What a window of the clock measured.
struct DeviceTime {
  double seconds = 0.0;     // the device's busy time; 0 unless timed()
  std::size_t records = 0;  // records of device work CUPTI delivered in the window
  std::string error;        // why the window has no time; empty when it has one

  bool timed() const { return error.empty(); }
};

class KernelClock {
 public:
  // The process's one clock: CUPTI's activity callbacks are per process.
  static KernelClock& instance();

  // Loads CUPTI from `path` before anywhere else: for a libcupti outside the loader's path, and
  // for tests. Has effect only before the first available().
  void prefer_library(std::string path);

  // Whether the clock can time: the build has CUPTI's headers, libcupti loads, CUPTI took monet's
  // activity callbacks and turns its records on. Decided on the first call; later calls are free.
  bool available();
  // One line saying why not (empty when available()).
  const std::string& unavailable_reason();

  // Begins a window: drops the records CUPTI still holds and turns on kernel, memset and copy
  // records. The device should be idle (synchronised), or work queued before may be counted.
  void start();
  // Ends the window; call it after synchronising the device. The seconds in which any device ran
  // work recorded since start(), and turns the records off again (training steps pay nothing).
  // No time (an error) where the clock is not available, CUPTI refused to turn a record kind on
  // at start(), or dropped records in the window (they would read the time low).
  DeviceTime stop();

  // Called by CUPTI's buffer callback (kernel_clock.cc) with the intervals of one buffer, and the
  // records CUPTI dropped since it last said.
  void add(const std::vector<DeviceInterval>& intervals, std::size_t dropped);

  KernelClock(const KernelClock&) = delete;
  KernelClock& operator=(const KernelClock&) = delete;

 private:
  KernelClock() = default;
  void open();

  std::once_flag opened_;
  std::string preferred_library_;
  bool available_ = false;
  std::string reason_;
  std::uint64_t window_start_ = 0;
  std::string window_error_;  // why the window open now cannot be timed
  // Guards intervals_ and dropped_: CUPTI may deliver buffers from a thread of its own.
  std::mutex mutex_;
  std::vector<DeviceInterval> intervals_;
  std::size_t dropped_ = 0;
};

}  // namespace monet
