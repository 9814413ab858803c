// Host memory as a device: segments from mmap. Serves CPU tensors, the tests of the pool logic,
// and monet-replay (which asks for address space only, so that a trace recorded on a 80 GB GPU
// replays on a laptop).
#pragma once

#include <cstddef>

#include "allocator/backend.h"

namespace monet {

class HostBackend : public Backend {
 public:
  struct Options {
    // Bytes the simulated device has; reserve() fails beyond it. 0: physical RAM, no cap.
    std::size_t capacity_bytes = 0;
    // False: segments are address space only (PROT_NONE, no memory behind them). For replays
    // and tests that never touch the blocks.
    bool backed = true;
    // Commit granule (see Backend): 2 MiB, like CUDA's virtual memory API; 0 holds segments
    // whole, like cudaMalloc.
    std::size_t granularity = std::size_t{2} << 20;
  };

  HostBackend();
  explicit HostBackend(Options options);

  std::string device_name() const override { return "cpu"; }
  std::size_t total_bytes() const override;
  void* reserve(std::size_t bytes) override;
  void release(void* segment, std::size_t bytes) override;
  std::size_t granularity() const override { return options_.granularity; }
  bool commit(void* ptr, std::size_t bytes) override;
  void decommit(void* ptr, std::size_t bytes) override;

  // Host work is synchronous: every event has completed when it is recorded.
  Event record_event(Stream) override { return 0; }
  bool event_done(Event) override { return true; }
  void wait_event(Event) override {}
  void destroy_event(Event) override {}

  // Bytes held against the capacity: whole segments, or committed granules.
  std::size_t held_bytes() const { return held_bytes_; }

 private:
  bool take(std::size_t bytes);

  Options options_;
  std::size_t held_bytes_ = 0;
};

// Physical RAM of this machine in bytes.
std::size_t physical_memory_bytes();

}  // namespace monet
