// A block: a run of bytes inside a segment, either handed out, cached free, or waiting for the
// streams that used it to finish. Blocks of one segment form a doubly linked list in address
// order, so that a freed block can merge with free neighbours in O(1).
#pragma once

#include <boost/intrusive/set_hook.hpp>
#include <boost/intrusive/unordered_set_hook.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/backend.h"
#include "allocator/granule_map.h"

namespace monet {

namespace bi = boost::intrusive;

struct Segment;

enum class BlockState : std::uint8_t {
  kFree,       // in its pool's free set
  kAllocated,  // handed out; in the active index
  kPending,    // freed, but other streams that used it may still be working on it
};

struct Block {
  char* address = nullptr;
  std::size_t size = 0;        // bytes, a multiple of 512
  std::size_t requested = 0;   // bytes the caller asked for (allocated blocks)
  Stream stream = 0;           // the stream the segment was reserved for
  Segment* segment = nullptr;  // the segment the block lies in
  Block* prev = nullptr;       // neighbours in the segment, in address order
  Block* next = nullptr;
  BlockState state = BlockState::kFree;
  bool small = false;                 // belongs to the small pool
  int pending_events = 0;             // events still to complete before a kPending block is free
  std::vector<Stream> other_streams;  // streams besides `stream` that used the block

  bi::set_member_hook<bi::link_mode<bi::safe_link>> free_hook;
  bi::unordered_set_member_hook<bi::link_mode<bi::safe_link>> active_hook;

  bool is_segment() const { return prev == nullptr && next == nullptr; }
};

// A range reserved from the backend. Where the backend commits memory granule by granule, the
// segment records which granules are committed; only those count as reserved bytes.
struct Segment {
  char* base = nullptr;
  std::size_t size = 0;
  Block* head = nullptr;            // the block at `base`; it stays first as blocks split and merge
  GranuleMap committed;             // per granule; empty when the segment is held whole
  std::size_t committed_bytes = 0;  // what the segment counts as reserved
  // The granules given back to keep the reservation under its high-water mark (no budget) and not
  // committed since: committing one again means the mark was too tight (CachingAllocator::commit).
  GranuleMap given_back;
};

// Free sets are ordered by stream, then size, then address: best fit is a lower_bound, and among
// equal sizes the lowest address wins, which keeps the top of segments free to be released.
struct BlockOrder {
  bool operator()(const Block& a, const Block& b) const {
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.size != b.size) return a.size < b.size;
    return a.address < b.address;
  }
};

// The active index finds an allocated block by its address.
struct BlockAddress {
  using type = const char*;
  type operator()(const Block& b) const { return b.address; }
};

struct AddressHash {
  std::size_t operator()(const char* p) const {
    // Addresses are 512-aligned: drop the zero bits, then mix (Fibonacci hashing). The index takes
    // the low bits of the hash (power-of-two buckets), and the low bits of a product depend only
    // on the low bits of the address: the product's high half is what mixes them all. Otherwise
    // blocks at 2 MiB boundaries (where CUDA puts segments) would all share one bucket.
    const std::uint64_t mixed =
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p) >> 9) *
        0x9E3779B97F4A7C15ull;
    return static_cast<std::size_t>(mixed >> 32);
  }
};

}  // namespace monet
