// Where a pool's memory comes from. The pool logic (CachingAllocator) calls nothing else, so it
// runs unchanged over host memory in tests and over device memory in training.
//
// A backend hands out segments: large, contiguous ranges that the pool splits into blocks. It
// also provides events, which let the pool learn that work queued on a stream before some point
// has finished, so that a block used on several streams is reused only once that is safe.
//
// A backend may also hold a segment's address range without all of its memory: with a nonzero
// granularity(), reserve() takes address space only, and the pool commits and decommits the
// memory behind it granule by granule, as blocks are handed out and as free ones are given back.
// Reserved bytes are then committed bytes, and free holes in a segment stop counting against the
// budget once decommitted: this is what keeps fragmentation low when input shapes change. The
// host backend does this with madvise; on CUDA it is the virtual memory API (cuMemAddressReserve,
// cuMemCreate, cuMemMap), as PyTorch's expandable segments use it.
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

  // Bytes per commit granule (a power of two, at least 512), or 0 when segments are held whole.
  virtual std::size_t granularity() const { return 0; }

  // Makes [ptr, ptr + bytes) of a reserved segment usable. Both are granule multiples from the
  // segment's start. Returns false when the device has no room.
  virtual bool commit(void* ptr, std::size_t bytes) { return true; }

  // Gives the memory behind [ptr, ptr + bytes) back; the addresses stay reserved.
  virtual void decommit(void* ptr, std::size_t bytes) {}

  // Between hold_decommitted(true) and hold_decommitted(false), a backend may keep the memory that
  // decommit() gives back and map it again at the next commit(), rather than return it to the
  // device and create it anew; hold_decommitted(false) returns what was not used again. The pool
  // brackets a give-back that makes room for a commit with it, so what is kept never exceeds what
  // the pool counted as reserved a moment before.
  virtual void hold_decommitted(bool hold) {}

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
