// The dynamic program over the chain (Rotor-style), exact for simulate()'s model.
//
// A plan is a path through blocks (block_costs.h): from boundary a - 1 either a kept stage a
// (any allowed variant) or a segment a..b; a segment that follows a segment starts a new one
// (StagePlan::segment_start), so the fronts after a kept stage and after a segment (the two
// sides of a boundary) go on alike, and are kept apart only to tell the plan apart. Whether the
// rest of a plan fits depends only on P, what the blocks so far retain, so P is the DP's memory
// axis. Rotor rounds P to fixed slots, which costs optimality. Here the axis is discretized at the
// values P actually takes: each boundary keeps the states that no other state beats on both P and
// time (the Pareto front), minus those from which the rest of the chain cannot fit. Nothing is
// rounded, so the result is the fastest plan of the choice space, exactly, and the tests check it
// against every plan of small chains.
//
// Long chains can have fronts of hundreds of states, so a front larger than
// DpOptions::max_front keeps its fastest state per P bucket (Rotor's discretization, used only
// there); exact() says whether that happened.
//
// need(i), the least headroom the stages after boundary i need, is computed first; it gives the
// least feasible budget and prunes states that cannot finish. A known plan (the incumbent) prunes
// states that cannot finish faster than it.
//
// Where the time goes, and how it is kept small (a plan is wanted in well under a millisecond):
// a kept stage's front is its variants' runs over the front of both sides of the boundary before,
// merged at once (FrontMerge); the segments that end at a boundary come from every open segment
// start, found in one walk over their states (SegmentSweep), which also drops, for good, states
// that a later start beats. The working memory is kept by the thread from one solve to the next.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "monet/chain.h"
#include "monet/planner.h"
#include "planner/block_costs.h"
#include "planner/front_merge.h"
#include "planner/rest_bound.h"
#include "planner/segment_sweep.h"
#include "planner/strategy_outcome.h"

namespace monet {

// What the DP may choose, per stage i (index i - 1).
struct DpChoices {
  // keep[i - 1]: the variants stage i may run when kept; none empty. Empty: variant 0 only, at
  // every stage.
  std::vector<std::vector<int>> keep;
  // segment[l][i - 1]: the variant stage i runs inside a segment planned with layer l. A segment
  // uses one layer for all its stages; at least one layer.
  std::vector<std::vector<int>> segment;
  // When not empty, lean[i - 1] lists the variants stage i may run inside a segment for the
  // least-peak search: need() is then the least peak over every such mix of variants, not only
  // over the layers, and the segments of a least-peak plan are offered to solve() as well, so
  // that every budget from the least feasible one up has a plan.
  std::vector<std::vector<int>> lean;

  // Variant 0 only: the checkpoint-only space of the `dp` strategy.
  static DpChoices defaults(int stages);
};

struct DpOptions {
  // Most states a boundary keeps; 0 keeps every Pareto front whole (exact). A larger front has
  // its P range cut into max_front buckets, each keeping its fastest state (with its exact P,
  // so every plan still fits), plus the state with the least P, so that the least feasible
  // budget stays reachable: Rotor's discretization of the memory axis, used only where a front
  // outgrows it.
  int max_front = 64;
  // Cut a large front by time instead (FrontMerge::set_thin_by_time): the leanest state of each
  // of max_front time buckets. Every state dropped then has a kept one with no more P and at most
  // a bucket's width more time, which on chains of repeated layers (a transformer's) finds plans
  // closer to the optimum than P buckets do.
  bool thin_by_time = false;
};

// Options for a chain of `stages` stages: fronts of up to 64 states while the chain is short,
// fewer as it grows (the work grows with stages^2 * max_front), at least 32.
DpOptions dp_options(int stages);

struct DpSolution {
  bool feasible = false;
  // The least budget with a plan in the choice space, fixed_bytes included.
  std::int64_t min_feasible_bytes = 0;
  // The fastest plan within the budget; when infeasible, a plan whose block-form peak is
  // min_feasible_bytes.
  Plan plan;
  std::int64_t peak_bytes = 0;  // block-form peak of `plan` (simulate()'s when costs.exact())
  double time = 0.0;            // seconds
};

class CheckpointDp {
 public:
  // `costs` must outlive this object.
  CheckpointDp(const BlockCosts& costs, DpChoices choices, DpOptions options = {});

  const BlockCosts& costs() const { return costs_; }

  // Adds a segment layer for later solve() calls. With `lean` choices, need() already covers
  // every mix of segment variants, so nothing is recomputed.
  void add_layer(std::vector<int> layer);

  // The least budget (fixed_bytes included) at which solve() is feasible.
  std::int64_t min_feasible_bytes() const { return costs_.fixed_bytes() + need_[0]; }

  // The fastest plan whose block-form peak is at most `budget_bytes`. An `incumbent`, a plan
  // known to fit, bounds the search: states that cannot finish faster than it are dropped
  // early, and it is the answer when nothing faster is found.
  DpSolution solve(std::int64_t budget_bytes, const Plan* incumbent = nullptr);
  // The fastest plan within the budget that takes less than `seconds` (by more than rounding),
  // or none. A bound close to the optimum makes this far cheaper than solve(): states that cannot
  // finish in time are dropped as soon as RestBound says so. It stops as soon as a front would be
  // cut (DpOptions::max_front), with none and exact() false: the answer would then be neither
  // exact nor solve()'s.
  std::optional<DpSolution> solve_faster_than(std::int64_t budget_bytes, double seconds);

  // Whether the last solve() kept every front exact, so that its plan is the exact optimum.
  bool exact() const { return !bucketed_; }

 private:
  enum Kind : std::uint8_t { kKept, kLayer, kLean };

  // A segment with its own variant mix, from the least-peak search.
  struct LeanSegment {
    int first;
    int last;
    std::vector<int> variants;  // for stages first..last
    std::int64_t local;
    double time;
  };
  // A way to end a segment at a boundary: its local(), time and what it is.
  struct SegmentOption {
    std::int64_t local;
    double time;
    Kind kind;
    int choice;
  };
  // What stage j adds to a segment of one layer (SegmentScan::extend): its forward term, the
  // running sum, and the recompute and backward terms above that sum.
  struct LayerStep {
    std::int64_t forward;    // o(j-1) + o(j) + f(j); without o(j-1) for the first stage
    std::int64_t grow;       // s(j) + o(j)
    std::int64_t recompute;  // f(j)
    std::int64_t backward;   // o(j-1) + b(j)
    double time;             // 2 fwd_time + bwd_time
  };
  // A segment of one layer grown from its start so far.
  struct Growth {
    std::int64_t sum = 0;
    std::int64_t forward = 0;
    std::int64_t recompute = 0;
    std::int64_t backward = 0;  // T(b) of the segment's last stage so far (block_costs.h)
    std::int64_t inner = 0;     // the largest T(j) of the stages before it
    double time = 0.0;
    bool growing = true;  // false once no longer segment of this layer can be of use
  };
  // A kept stage running one variant, as a block.
  struct KeptOption {
    BlockCosts::Block block;
    int variant;
  };

  // Pool indices of front(boundary, side): after a kept block (side 0) or a segment (side 1).
  std::int32_t front_begin(int boundary, int side) const {
    return front_start_[2 * boundary + side];
  }
  std::int32_t front_end(int boundary, int side) const {
    return front_start_[2 * boundary + side + 1];
  }
  // The same after a kept block and after a segment: a segment may follow either.
  std::int64_t need(int boundary) const { return need_[boundary]; }
  void compute_need();
  // Whether segment a..b has a variant mix (from `lean`) with local() <= limit; the mix with the
  // least saved bytes into *variants when it does.
  bool lean_fits(int a, int b, std::int64_t limit, std::vector<int>* variants) const;

  // The states of front [begin, end) that may take a block of `time` seconds ending at
  // `boundary`: P <= limit, and fast enough to beat the incumbent.
  std::pair<const DpState*, const DpState*> admitted(const DpState* begin, const DpState* end,
                                                     std::int64_t limit, double time,
                                                     int boundary) const;
  // Extends the segments from `start` to boundary b and gives the sweep their options. False
  // when no segment from `start` can reach b or beyond.
  bool add_segment_options(int start, int b, std::int64_t headroom);
  // Fills steps_ for the layers there are.
  void make_steps();
  // Drops the states of the front that starts at pool_[first] (and ends the pool) that cannot
  // finish faster than the incumbent (RestBound).
  void prune(int boundary, std::int64_t headroom, std::size_t first);
  Plan reconstruct(std::int32_t index, int boundary) const;
  // The DP proper, for a budget that has a plan: the fastest plan faster than `bound` seconds.
  // RestBound's pruning pays only where the bound is close to the optimum: a loose one (an
  // incumbent from a cheaper strategy) drops almost nothing with it, at some cost per state.
  std::optional<DpSolution> search(std::int64_t headroom, double bound, bool use_rest_bound);
  DpSolution solution_of(Plan plan) const;

  const BlockCosts& costs_;
  DpChoices choices_;
  DpOptions options_;
  int stages_;
  std::optional<RestBound> rest_bound_;  // made by the first solve_faster_than()
  bool bucketed_ = false;
  std::vector<std::int64_t> need_;  // per boundary
  std::vector<double> least_rest_;  // per boundary: the least time the stages after it take
  std::vector<KeptOption> kept_;    // stage i's are [kept_first_[i - 1], kept_first_[i])
  std::vector<std::int32_t> kept_first_;
  std::vector<LeanSegment> lean_segments_;
  std::vector<std::vector<int>> lean_by_start_;  // per start a: indices into lean_segments_
  std::vector<int> lean_last_;                   // per start a: the last stage of its lean segments

  // solve()'s working memory, kept by the thread from one plan to the next, so that planning
  // seldom allocates: CheckpointDp objects are made for every plan.
  struct Buffers;
  struct ReturnBuffers {
    void operator()(Buffers* buffers) const;
  };
  static std::unique_ptr<Buffers, ReturnBuffers> lease_buffers();
  static std::vector<std::unique_ptr<Buffers>>& spare_buffers();

  // solve()'s state. The pool holds every front, one after another.
  double bound_ = 0.0;  // states must finish faster than this (the incumbent)
  bool use_rest_bound_ = false;
  std::unique_ptr<Buffers, ReturnBuffers> buffers_;  // first: the references below are into it
  std::vector<DpState>& pool_;
  std::vector<std::int32_t>& front_start_;  // 2 (L + 1) + 1 pool offsets
  std::vector<StateRun>& runs_;
  std::vector<DpState>& united_;  // the front of both sides of a boundary, for every block
  FrontMerge& merge_;
  std::vector<int>& open_;         // segment starts that may still end at a later boundary
  std::vector<LayerStep>& steps_;  // per layer and stage (0..L)
  std::vector<Growth>& growth_;    // per start and layer
  std::vector<SegmentOption>& options_at_;
  SegmentSweep& sweep_;
  std::vector<std::int64_t> least_need_after_;  // per boundary b: the least need(b'), b' >= b
};

// A checkpoint-only plan (default variants) made from `start` by two cheap passes, twice: runs of
// adjacent segments become one segment wherever that does not raise the peak (one segment keeps
// one input where adjacent ones keep one each), then checkpointed stages are kept again, slowest
// forward first, wherever the plan still fits. From greedy's plan (or, where that does not fit,
// its least-peak plan) it comes within 1 to 3% of dp's optimum on random chains, where greedy is 5
// to 17% above it or does not fit at all. None when the result does not fit `budget_bytes`.
// Each trial costs only the blocks it changes; an accepted change costs one pass over the blocks.
std::optional<Plan> refined_checkpoints(const BlockCosts& costs, std::int64_t budget_bytes,
                                        const Plan& start);

// The `dp` strategy's answer from `dp`, a CheckpointDp over default variants: its fastest plan
// within the budget, bounded by greedy's plan (plan_greedy's outcome at the same budget) refined
// by refined_checkpoints() where that fits, else by greedy's plan where that fits. The bound drops
// states that cannot beat it, which saves a fifth to a half of the work; it also shapes the fronts
// where they are cut, so monet, which must never lose to `dp`, gets dp's answer through this same
// call.
DpSolution solve_as_dp(CheckpointDp* dp, std::int64_t budget_bytes, const StrategyOutcome& greedy);

// The `dp` strategy: CheckpointDp over default variants (solve_as_dp).
StrategyOutcome plan_dp(const Chain& chain, std::int64_t budget_bytes);

}  // namespace monet
