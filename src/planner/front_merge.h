// The inner step of CheckpointDp: the Pareto front of the states that reach one block boundary.
//
// Every state at a boundary is a state of an earlier front extended by one block (its retained
// bytes and its time). The candidates arrive as runs: consecutive states of one source front,
// all extended by the same block. FrontMerge keeps those that no other candidate beats on both
// retained bytes (P) and time, sorted by P with time falling, and appends them to the pool that
// holds every front. A front larger than max_front states is cut to the fastest state per P
// bucket (DpOptions in checkpoint_dp.h).
//
// The work is linear in the candidates. A few runs are merged pairwise. Many runs go through P
// buckets: each bucket keeps its fastest candidate, and a walk over the buckets in order gives
// the front, once the rare candidates that are slower than their bucket's fastest but hold less P
// are walked in too (only needed when the front is small enough to be kept whole).
#pragma once

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

// States [begin, end) of one front, sorted by retained bytes, each extended by one block.
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
  explicit FrontMerge(int max_front) : max_front_(max_front) {}
  void set_max_front(int max_front) { max_front_ = max_front; }

  // Appends to `pool` the front of the candidates of `runs`, over states of `source` whose
  // `parent` holds their index in the pool (what unite() gives). Returns false when the front had
  // to be cut to max_front states.
  bool append_front(const std::vector<DpState>& source, const std::vector<StateRun>& runs,
                    std::vector<DpState>* pool);

  // Cuts the front that starts at pool[first] (and ends the pool) to max_front states, keeping
  // the fastest of each P bucket and the least P. True when it cut.
  bool thin(std::size_t first, std::vector<DpState>* pool) const;

  // The front of pool states [x_begin, x_end) and [y_begin, y_end), two fronts of one boundary,
  // into *united, each state's parent set to its index in the pool.
  static void unite(const std::vector<DpState>& pool, std::int32_t x_begin, std::int32_t x_end,
                    std::int32_t y_begin, std::int32_t y_end, std::vector<DpState>* united);

 private:
  // The fastest candidate of one P bucket.
  struct Bucket {
    double time;
    std::int64_t retained;
    std::int32_t run;
    std::int32_t index;
    double below;  // the least time of the buckets below, once walked
  };

  // append_front() for either kind of source: candidate k of a run has parent parents[k], or k
  // when parents is null.
  bool append(const DpState* states, bool indirect, const std::vector<StateRun>& runs,
              std::vector<DpState>* pool);
  // The front of a few runs, merged at once.
  void merge_few(const DpState* states, bool indirect, const std::vector<StateRun>& runs,
                 std::size_t candidates, std::vector<DpState>* pool);
  // The front of the runs, by merging their fronts in pairs, round after round.
  void merge_runs(const DpState* states, bool indirect, const std::vector<StateRun>& runs,
                  std::size_t candidates, std::vector<DpState>* pool);
  // How many P buckets bucket_runs() uses for this many candidates.
  std::size_t bucket_count(std::size_t candidates) const;
  // The front of many runs, through P buckets.
  void bucket_runs(const DpState* states, bool indirect, const std::vector<StateRun>& runs,
                   std::size_t candidates, std::vector<DpState>* pool);
  int max_front_;
  std::vector<DpState> scratch_;     // candidates written out
  std::vector<DpState> spare_;       // the fronts of a round of merges
  std::vector<std::size_t> bounds_;  // where each front of the current round starts and ends
  std::vector<DpState> walked_;      // a bucket walk's states, each kept or written over
  std::vector<Bucket> buckets_;
};

}  // namespace monet
