// Where a pool's memory comes from. The pool logic (CachingAllocator) calls nothing else, so it
// runs unchanged over host memory in tests and over device memory in training.
//
// A backend hands out segments: large, contiguous ranges that the pool splits into blocks. It
// also provides events, which let the pool learn that work queued on a stream before some point
// has finished, so that a block used on several streams is reused only once that is safe.
//
// Expandable segments (CUDA's cuMemCreate/cuMemMap) fit behind this seam as a backend whose
// reserve() maps physical pages into a large reserved virtual range at the end of the previous
// segment; the pool then sees adjacent segments and needs only to merge across them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace monet {

// A stream or queue on the device, as the device's API names it (cudaStream_t cast to an
// integer); 0 is the default stream. Host memory has only stream 0.
using Stream = std::uintptr_t;

// An event recorded on a stream; opaque to the pool.
using Event = std::uintptr_t;

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda:N": how messages and traces name the device.
  virtual std::string device_name() const = 0;

  // Bytes of memory the device has in all (RAM for the host): the base for "60%" budgets.
  virtual std::size_t total_bytes() const = 0;

  // Reserves a segment of exactly `bytes` (a multiple of 512), aligned to at least 512 bytes.
  // Returns nullptr when the device has no room; throws only for errors that are not a lack of
  // memory (a broken driver, say).
  virtual void* reserve(std::size_t bytes) = 0;

  // Gives a segment from reserve() back to the device. May wait for the device to be idle.
  virtual void release(void* segment, std::size_t bytes) = 0;

  // Records an event on `stream` that completes when the work queued there so far completes.
  virtual Event record_event(Stream stream) = 0;

  // True once the event has completed. Does not block.
  virtual bool event_done(Event event) = 0;

  // Blocks until the event has completed.
  virtual void wait_event(Event event) = 0;

  // Frees the event; it is not used again.
  virtual void destroy_event(Event event) = 0;
};

}  // namespace monet
