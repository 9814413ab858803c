// How request sizes map to block and segment sizes. The same rules as PyTorch's CUDA caching
// allocator, which the field has tuned for years: requests round up to 512 bytes; requests up to
// 1 MiB share 2 MiB segments (the small pool); requests up to 10 MiB share 20 MiB segments; larger
// ones get a segment of their own, rounded up to 2 MiB.
#pragma once

#include <cstddef>

namespace monet::size_rules {

constexpr std::size_t kMinBlock = 512;
constexpr std::size_t kSmallRequest = 1 << 20;  // largest request served by the small pool
constexpr std::size_t kSmallSegment = 2 << 20;  // segment size of the small pool
constexpr std::size_t kMidRequest = 10 << 20;   // requests below this share kMidSegment
constexpr std::size_t kMidSegment = 20 << 20;
constexpr std::size_t kLargeRounding = 2 << 20;  // larger segments round up to this
// Requests above this (4 EiB, beyond any address space) are refused before they are rounded, so
// that the rounding below cannot wrap around (a size_t of -1 from a caller's negative size).
constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// The block size that serves a request of `requested` bytes (at least one 512-byte unit).
constexpr std::size_t block_size(std::size_t requested) {
  return requested < kMinBlock ? kMinBlock : round_up(requested, kMinBlock);
}

constexpr bool is_small(std::size_t block) { return block <= kSmallRequest; }

// The segment to reserve when no cached block fits a block of `block` bytes.
constexpr std::size_t segment_size(std::size_t block) {
  if (is_small(block)) return kSmallSegment;
  if (block < kMidRequest) return kMidSegment;
  return round_up(block, kLargeRounding);
}

// Whether to cut `remaining` bytes off a block into a free block of their own. The large pool
// keeps tails of 1 MiB or less attached: they could serve only small requests, which the large
// pool does not serve, and they merge back when the block is freed.
constexpr bool should_split(bool small_pool, std::size_t remaining) {
  return small_pool ? remaining >= kMinBlock : remaining > kSmallRequest;
}

}  // namespace monet::size_rules
