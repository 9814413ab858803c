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
// A state that a state of a later start beats, with room to spare at every boundary from here on,
// can never be of use again and leaves the list (sweep()).
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
  // the list at the next sweep(). With `droppable`, points of this start may leave the list for
  // good when a point of a later start beats them (set_bounds()); a start with segments of its
  // own, which a later start does not have, sets it false.
  void add_start(int start, const std::vector<DpState>& front, std::int64_t input, bool droppable);

  // A start's points after the last sweep: none, the least key and the least time.
  bool empty(int start) const { return starts_[start].least == kNone; }
  std::int64_t least_retained(int start) const { return starts_[start].least; }
  double fastest(int start) const { return starts_[start].fastest; }
  // No point of `start` with a larger key can fit at this boundary or any later one: the sweep
  // drops them.
  void set_max_key(int start, std::int64_t key) { starts_[start].max_key = key; }
  // A start with no options at this boundary takes no part; close() drops its points for good.
  void close(int start) {
    starts_[start].count = 0;
    starts_[start].max_key = kClosed;
  }
  // The options of `start` at this boundary, fastest first with rising key limits: fill and set
  // the count.
  Option* options(int start) { return options_.data() + static_cast<std::size_t>(start) * stride_; }
  void set_option_count(int start, int count) { starts_[start].count = count; }

  // Where the points of `start` stop being of use, for the next sweep():
  // - `slow`: a point whose time (before its segment) is at least this cannot beat the cutoff at
  //   this boundary or any later one (the cutoff less the least time any segment of this start
  //   still takes from here on: both grow with every stage, the latter at least as fast);
  // - `gap`: the least time the stages from `start` up to the start just added take in any
  //   segment this start may still end (DpChoices' layers still growing). A point of the start
  //   just added that has no larger key and a time at most a point's time plus `gap` beats that
  //   point at this boundary and every later one.
  void set_bounds(int start, double slow, double gap) {
    starts_[start].slow = slow;
    starts_[start].gap = gap;
  }
  // Appends to `pool` the front of the segments ending at this boundary whose states are faster
  // than `cutoff` seconds there. On the way, merges the added points in and drops those of closed
  // starts, those past their start's largest key, and those too slow to be of use (set_bounds()).
  //
  // It also drops, for good, the droppable points that a point q of the start just added beats:
  // q has no larger key and q.time <= p.time + gap(p's start). Against such a point p, of start a,
  // with q of start a', in any layer l that p's start may still end a segment with and at any
  // boundary from here on: q's segment has at least p's room (it holds fewer stages, and
  // q.key <= p.key), and it is no slower, since q.time <= p.time + T_l(a..a' - 1). Every pair of
  // points is compared once, when the later start is added, at a cost of one comparison per point.
  void sweep(double cutoff, std::vector<DpState>* pool);

 private:
  static constexpr std::int64_t kNone = INT64_MAX;
  static constexpr std::int64_t kClosed = INT64_MIN;  // a max_key no point is under

  // What the sweep knows of one segment start, together, so that a point finds it in one place.
  struct Start {
    std::int64_t max_key;     // points with a larger key are dropped (kClosed: every point)
    double slow;              // points with at least this time are dropped (set_bounds())
    double gap;               // see set_bounds()
    std::int64_t least;       // the least key of the start's points, kNone when it has none
    double fastest;           // the least time of its points
    std::int64_t next_least;  // least and fastest, while a sweep walks the points
    double next_fastest;
    int cursor;  // the first option that may fit the next point, while a sweep walks
    int count;   // options at this boundary
    bool droppable;
  };

  // Buffers with counts of their own (their sizes only grow).
  std::vector<Point> points_;  // sorted by key, points_size_ of them
  std::vector<Point> added_;   // sorted by key, not yet in points_, added_size_ of them
  std::vector<Point> spare_;
  std::size_t points_size_ = 0;
  std::size_t added_size_ = 0;
  std::vector<DpState> front_;  // the front being made, before it joins the pool
  std::vector<Start> starts_;   // per start
  // Starts [live_begin_, live_end_) hold every point: none before (a start that has lost its
  // points gets none again), none after the newest.
  std::size_t live_begin_ = 0;
  std::size_t live_end_ = 0;
  std::size_t stride_ = 0;
  std::vector<Option> options_;  // per start, stride_ of them
};

}  // namespace monet
