// The device's busy time over a stretch of host code, from CUPTI's activity records: the union
// of the intervals in which a kernel, a memset or a copy ran on a CUDA device. The measurement
// pass times stages on CUDA with it, so that a stage's time is what its device work takes, free
// of launch gaps, of host-side dispatch and of the host's other load (docs/runtime.md).
//
// CUPTI is loaded with dlopen when the clock is first asked for (libcupti from the toolkit the
// build found, else the loader's search path), so libmonet.so does not depend on it: where it is
// missing, or another profiler holds CUPTI's activity callbacks, available() is false and says
// why, and the measurement pass times by the wall clock. Plain C++: no LibTorch, no CUDA runtime.
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

class KernelClock {
 public:
  // The process's one clock: CUPTI's activity callbacks are per process.
  static KernelClock& instance();

  // Whether the clock can time: the build has CUPTI's headers, libcupti loads, and CUPTI took
  // monet's activity callbacks. Decided on the first call; later calls are free.
  bool available();
  // One line saying why not (empty when available()).
  const std::string& unavailable_reason();

  // Begins a window: drops the records CUPTI still holds and turns on kernel, memset and copy
  // records. The device should be idle (synchronised), or work queued before may be counted.
  void start();
  // Ends the window; call it after synchronising the device. Seconds in which any device ran
  // work recorded since start(), and turns the records off again (training steps pay nothing).
  // 0 when the clock is not available.
  double stop();

  // Called by CUPTI's buffer callback (kernel_clock.cc) with the intervals of one buffer.
  void add(const std::vector<DeviceInterval>& intervals);

  KernelClock(const KernelClock&) = delete;
  KernelClock& operator=(const KernelClock&) = delete;

 private:
  KernelClock() = default;
  void open();

  std::once_flag opened_;
  bool available_ = false;
  std::string reason_;
  std::uint64_t window_start_ = 0;
  std::mutex mutex_;  // guards intervals_: CUPTI may deliver buffers from a thread of its own
  std::vector<DeviceInterval> intervals_;
};

}  // namespace monet
