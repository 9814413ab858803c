// "What was the peak since mark m": how the runtime measures the bytes one stage of a network
// needs. Each mark opens an interval; the allocator raises the open interval's peak on every
// allocation (one comparison), and peak_since() takes the largest peak of the intervals since m.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace monet {

struct Mark {
  std::uint64_t id = 0;
  std::size_t allocated_bytes = 0;  // allocated bytes when the mark was made
  std::size_t requested_bytes = 0;  // requested bytes then (CachingAllocator::mark fills it)
};

class PeakMarks {
 public:
  // At most this many marks are remembered; older ones are forgotten and asking about them is a
  // std::out_of_range. The runtime clears marks every iteration, far below this.
  static constexpr std::size_t kMaxMarks = 1 << 16;

  Mark mark(std::size_t allocated_bytes);

  void on_allocated(std::size_t allocated_bytes) {
    if (!peaks_.empty() && allocated_bytes > peaks_.back()) peaks_.back() = allocated_bytes;
  }

  // The most bytes allocated at any moment since `m` was made.
  std::size_t peak_since(const Mark& m) const;

  void clear();

 private:
  std::deque<std::size_t> peaks_;  // peaks_[i] is the peak of interval first_id_ + i
  std::uint64_t first_id_ = 0;
};

}  // namespace monet
