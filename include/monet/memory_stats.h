// What monet's allocator has done on one device: what it holds, what is in use, peaks, counts.
// Cheap to read at any time (monet::memory_stats()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace monet {

struct MemoryStats {
  std::string device;  // "cpu" or "cuda:N"

  // Bytes in blocks handed out (rounded up to 512-byte multiples; a block may carry an unsplit
  // tail of up to 1 MiB in the large pool), now and at the peak.
  std::size_t allocated_bytes = 0;
  std::size_t peak_allocated_bytes = 0;
  // Bytes the callers asked for, before rounding.
  std::size_t requested_bytes = 0;
  std::size_t peak_requested_bytes = 0;
  // Bytes held from the device in segments, in use or cached; never above budget_bytes.
  std::size_t reserved_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  // The cap on reserved bytes (MONET_BUDGET); 0 means no cap.
  std::size_t budget_bytes = 0;

  std::uint64_t allocations = 0;       // calls that returned memory
  std::uint64_t frees = 0;             // blocks given back
  std::uint64_t cache_hits = 0;        // allocations served from cached blocks, no new segment
  std::uint64_t segments = 0;          // segments held now
  std::uint64_t segment_reserves = 0;  // segments taken from the device
  std::uint64_t segment_releases = 0;  // segments given back to the device
  std::uint64_t cache_flushes = 0;     // times cached segments were given back to make room
  std::uint64_t out_of_memory = 0;     // requests refused
  // Of those, the requests the budget had room for: the bytes in use plus the request were within
  // it, but no cached block held the request and no new segment fitted beside the cached ones
  // that are partly in use (the free memory was in pieces). Counted only under a budget, and not
  // where the device itself had no room, nor where, committed by granule, the granules the
  // request takes passed the budget.
  std::uint64_t out_of_memory_in_pieces = 0;
  // Where segments are committed by granule (MONET_CUDA_SEGMENTS=expandable, host pools): bytes
  // committed behind reserved address space and given back from free holes, in all. Each byte
  // that goes back and comes again costs the device's mapping calls, and on CUDA a wait for the
  // device before the unmapping; 0 where segments are held whole.
  std::uint64_t committed_bytes_total = 0;
  std::uint64_t decommitted_bytes_total = 0;
  // Times granules were given back, each time as many as were wanted at once: on CUDA each of
  // these waits for the device (cudaDeviceSynchronize) before it unmaps, so this, not the bytes,
  // is what giving memory back costs a training step there. 0 where segments are held whole.
  std::uint64_t decommits = 0;

  std::size_t active_blocks = 0;  // blocks in use
  std::size_t free_blocks = 0;    // cached free blocks
  // The largest cached free block; where segments are committed by granule, its longest run with
  // memory behind it (address space alone is not free memory).
  std::size_t largest_free_bytes = 0;

  // 1 - peak allocated / peak reserved: the share of the peak reservation that never held live
  // data. 0 when nothing was reserved.
  double fragmentation() const {
    return peak_reserved_bytes == 0 ? 0.0
                                    : 1.0 - static_cast<double>(peak_allocated_bytes) /
                                                static_cast<double>(peak_reserved_bytes);
  }
};

// A small table of the numbers above, one per line, for people.
std::string format_stats(const MemoryStats& stats);

}  // namespace monet
