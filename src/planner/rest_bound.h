// A lower bound on the time the rest of a chain takes, given the memory a DP state leaves it.
//
// CheckpointDp drops a state when it cannot finish faster than a known plan (the incumbent). The
// plain bound, the sum of each later stage's fastest variant, ignores memory: it is the time of
// keeping everything, which a tight budget never allows, so it pruned little. This one knows that
// what the rest of the chain retains must fit under the turn: P + (what stages b+1..L retain) +
// 2 o(L) <= headroom (block_costs.h). Each later stage has a few options, each retaining some
// bytes and taking some time (kept with a variant: o(j-1) + s(j, v) bytes, fwd + bwd seconds;
// checkpointed: at least 0 bytes, 2 fwd + bwd seconds); choosing one per stage with the least
// time and at most a given total of retained bytes is a multiple-choice knapsack, and its linear
// relaxation (each stage's options on their lower convex hull, hull steps taken cheapest per byte
// first, the last one in part) is a lower bound on every plan of the rest, whatever its variants
// and segments. It ignores the other blocks' high points and that a segment retains its input,
// which only makes it lower. Bytes saved and seconds spent are relative to each stage's fastest
// option.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/block_costs.h"
#include "planner/front_merge.h"

namespace monet {

class RestBound {
 public:
  // Over every variant of every stage of `costs`, which must outlive this object.
  explicit RestBound(const BlockCosts& costs);

  // The least time (seconds) stages boundary+1..L take when what they retain may be at most
  // `room` bytes; +infinity when no choice fits (a relaxation: no plan of the rest is faster).
  double least_time(int boundary, std::int64_t room) const;

  // Removes, from the front [begin, end) at `boundary` (sorted by P, time falling), the states
  // that cannot finish in less than `bound` seconds with `headroom` bytes above fixed_bytes.
  // Returns the new end; the states kept stay in order.
  DpState* prune(int boundary, std::int64_t headroom, double bound, DpState* begin,
                 DpState* end) const;

 private:
  // One step along a stage's hull: `saves` bytes fewer retained for `costs` more seconds.
  struct Step {
    std::int64_t saves;
    double costs;
    int stage;
  };

  int stages_;
  std::int64_t turn_;
  std::vector<Step> steps_;              // every stage's, cheapest per byte first
  std::vector<double> base_time_;        // per boundary b: the fastest options of stages > b
  std::vector<std::int64_t> base_kept_;  // per boundary b: what those fastest options retain
};

}  // namespace monet
