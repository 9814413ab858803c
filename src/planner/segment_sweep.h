// The segments of CheckpointDp that end at one boundary, all in one pass.
//
// A segment a..b takes a state of boundary a - 1 (P, time), after a kept stage or a segment, to
// (P + o(a-1), time + its time). Call P + o(a-1) the state's key: it does not depend on where the
// segment ends. So the states of every open segment start are kept in one list sorted by key, and
// the front of the segments that end at boundary b is a single walk down that list: each state
// takes the fastest segment option of its start that its room admits (options are fastest first
// with rising limits on the key, so a cursor per start moves forward only), and is kept when it is
// faster than every state before it. This replaces merging one run of candidates per start, which
// cost several times as much.
//
// A state whose candidate a state of a later start beats, with room to spare at every boundary
// from here on, can never be of use again and leaves the list (drop_beaten).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/front_merge.h"

namespace monet {

class SegmentSweep {
 public:
  // A state of a segment start.
  struct Point {
    std::int64_t key;    // P + o(start - 1), bytes: P after the segment
    double time;         // seconds before the segment
    std::int32_t start;  // the segment's first stage
    std::int32_t state;  // index of the state in the pool
  };
  // A way to end a segment of one start at the current boundary.
  struct Option {
    std::int64_t key_limit;  // the largest key that fits
    double time;             // seconds the segment takes
    std::int16_t choice;
    std::uint8_t kind;
  };

  // Forgets every start, for a chain of `stages` stages and at most `options` options per start.
  void reset(int stages, int options);
  // Adds the states of `front`, the front of boundary start - 1 (both sides, sorted by P, each
  // state's `parent` its index in the pool: FrontMerge::unite), as `start`'s points; they join
  // the list at the next sweep().
  void add_start(int start, const std::vector<DpState>& front, std::int64_t input);

  // A start's points after the last sweep: none, the least key and the least time.
  bool empty(int start) const { return least_retained_[start] == kNone; }
  std::int64_t least_retained(int start) const { return least_retained_[start]; }
  double fastest(int start) const { return fastest_[start]; }
  // No point of `start` with a larger key can fit at this boundary or any later one: the sweep
  // drops them.
  void set_max_key(int start, std::int64_t key) { max_key_[start] = key; }
  // A start with no options at this boundary takes no part; close() drops its points for good.
  void close(int start) {
    option_count_[start] = 0;
    closed_[start] = 1;
  }
  // The options of `start` at this boundary, fastest first with rising key limits: fill and set
  // the count.
  Option* options(int start) { return options_.data() + static_cast<std::size_t>(start) * stride_; }
  void set_option_count(int start, int count) { option_count_[start] = count; }

  // Appends to `pool` the front of the segments ending at this boundary whose states are faster
  // than `cutoff` seconds there. On the way, merges the added points in and drops those of
  // closed starts, beaten ones and those past their start's largest key.
  void sweep(double cutoff, std::vector<DpState>* pool);

  // Marks points beaten for good. `rival_before(front_state)` gives the time before its segment
  // of a state of front(b, 1); `allowance(start, rival_start)` the least a segment of `start`
  // spends on stages start..rival_start - 1. A point is beaten when the fastest front state with
  // no larger P comes from a later start and is no slower before its segment, by that allowance.
  template <typename RivalBefore, typename Allowance>
  void drop_beaten(const DpState* front, const DpState* front_end, RivalBefore rival_before,
                   Allowance allowance);

 private:
  static constexpr std::int64_t kNone = INT64_MAX;

  std::vector<Point> points_;  // sorted by key
  std::vector<Point> added_;   // sorted by key, not yet in points_
  std::vector<Point> spare_;
  std::vector<std::int64_t> least_retained_;  // per start
  std::vector<double> fastest_;               // per start
  std::vector<std::int64_t> next_least_;      // per start, during a sweep
  std::vector<double> next_fastest_;          // per start, during a sweep
  std::vector<std::int64_t> max_key_;         // per start
  std::vector<std::uint8_t> closed_;          // per start
  std::vector<std::uint8_t> beaten_;          // per point
  std::size_t stride_ = 0;
  std::vector<Option> options_;    // per start, stride_ of them
  std::vector<int> option_count_;  // per start
  std::vector<int> cursor_;        // per start, during a sweep
};

template <typename RivalBefore, typename Allowance>
void SegmentSweep::drop_beaten(const DpState* front, const DpState* front_end,
                               RivalBefore rival_before, Allowance allowance) {
  // Both lists are sorted by P: one walk down each. The front's fastest state with P <= a key is
  // the last one with P <= the key.
  const DpState* rival = nullptr;
  beaten_.assign(points_.size(), 0);
  for (std::size_t k = 0; k < points_.size(); ++k) {
    const Point& p = points_[k];
    while (front != front_end && front->retained <= p.key) rival = front++;
    if (rival == nullptr || rival->from + 1 <= p.start) continue;
    if (rival_before(*rival) <= p.time + allowance(p.start, rival->from + 1)) beaten_[k] = 1;
  }
}

}  // namespace monet
