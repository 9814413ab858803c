// Pareto fronts of the states of CheckpointDp: the states that reach a block boundary, kept when
// no other state there beats them on both retained bytes (P) and time.
//
// A front is a run of DpStates in the DP's pool, sorted by P with time falling. FrontMerge builds
// the fronts that kept stages reach: the front of both sides of a boundary (unite), then, for a
// kept stage, one run of candidates per variant, that front extended by the variant's block,
// merged into the next front (append_front). The segments' fronts come from SegmentSweep. A front
// larger than max_front states is cut (thin; DpOptions in checkpoint_dp.h): to the fastest state
// per P bucket, or to the leanest state per time bucket.
//
// The merges avoid branches on the data: the processor cannot predict them, and mispredictions
// used to take half of the planning time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace monet {

// One way to reach a block boundary: what the blocks so far retain and how long they take.
struct DpState {
  std::int64_t retained;  // P, bytes
  double time;            // seconds
  std::int32_t parent;    // index in the pool of the state this block starts from; -1 at the start
  std::int32_t from;      // the parent's boundary: the block covers stages from + 1 .. boundary
  std::int16_t choice;    // what the block is (CheckpointDp::Kind says how to read it)
  std::uint8_t kind;
};

// States [begin, end) of one front, each extended by one block.
struct StateRun {
  std::int32_t begin;
  std::int32_t end;
  std::int64_t retained;  // bytes the block adds
  double time;            // seconds the block takes
  std::int32_t from;
  std::int16_t choice;
  std::uint8_t kind;
};

class FrontMerge {
 public:
  // max_front: 0 keeps every front whole (exact); otherwise a front with more states keeps the
  // fastest state of each of max_front buckets of P, plus the state with the least P.
  explicit FrontMerge(int max_front = 0) : max_front_(max_front) {}
  void set_max_front(int max_front) { max_front_ = max_front; }
  // With `by_time`, thin() cuts the front's time range into max_front buckets instead and keeps
  // the leanest state of each, plus the fastest state: every state it drops has a kept one with no
  // more P and at most one bucket's width more time.
  void set_thin_by_time(bool by_time) { thin_by_time_ = by_time; }

  // The front of pool states [x_begin, x_end) and [y_begin, y_end), two fronts of one boundary,
  // into *united, each state's parent set to its index in the pool.
  static void unite(const std::vector<DpState>& pool, std::int32_t x_begin, std::int32_t x_end,
                    std::int32_t y_begin, std::int32_t y_end, std::vector<DpState>* united);

  // Appends to `pool` the front of the candidates of `runs`, over states of `source` whose
  // `parent` holds their index in the pool (what unite() gives), then thins it. Returns false
  // when it had to be cut.
  bool append_front(const std::vector<DpState>& source, const std::vector<StateRun>& runs,
                    std::vector<DpState>* pool);
  // append_front() without the thinning, for callers that prune the front first.
  void append_merged(const std::vector<DpState>& source, const std::vector<StateRun>& runs,
                     std::vector<DpState>* pool);

  // Cuts the front that starts at pool[first] (and ends the pool) to about max_front states,
  // keeping the fastest of each P bucket and the least P (or, by time, the leanest of each time
  // bucket and the fastest). True when it cut.
  bool thin(std::size_t first, std::vector<DpState>* pool) const;

 private:
  // The front of a few runs, merged at once: each step takes the run whose next candidate has
  // the least P.
  void merge_few(const DpState* states, const std::vector<StateRun>& runs, std::size_t candidates,
                 std::vector<DpState>* pool);
  // The front of more runs, by merging their fronts in pairs, round after round.
  void merge_pairs(const DpState* states, const std::vector<StateRun>& runs, std::size_t candidates,
                   std::vector<DpState>* pool);

  int max_front_;
  bool thin_by_time_ = false;
  std::vector<DpState> scratch_;     // candidates written out
  std::vector<DpState> spare_;       // the fronts of a round of merges
  std::vector<std::size_t> bounds_;  // where each front of the current round starts and ends
};

}  // namespace monet
