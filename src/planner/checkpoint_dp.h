// The dynamic program over the chain (Rotor-style), exact for simulate()'s model.
//
// A plan is a path through blocks (block_costs.h): from boundary a - 1 either a kept stage a
// (any allowed variant) or a segment a..b, never two segments in a row, since adjacent
// checkpointed stages are one segment. Whether the rest of a plan fits depends only on P, what
// the blocks so far retain, so P is the DP's memory axis. Rotor rounds P to fixed slots, which
// costs optimality. Here the axis is discretized at the values P actually takes: each boundary
// keeps the states that no other state beats on both P and time (the Pareto front), minus those
// from which the rest of the chain cannot fit. Nothing is rounded, so the result is the fastest
// plan of the choice space, exactly, and the tests check it against every plan of small chains.
//
// The work grows with stages^2 times the size of the fronts. Long chains can have fronts of
// hundreds of states, so a front larger than DpOptions::max_front keeps its fastest state per P
// bucket (Rotor's discretization, used only there); exact() says whether that happened.
//
// need(i), the least headroom the stages after boundary i need, is computed first; it gives the
// least feasible budget and prunes states that cannot finish. A known plan (the incumbent) prunes
// states that cannot finish faster than it.
#pragma once

#include <cstdint>
#include <vector>

#include "monet/chain.h"
#include "monet/planner.h"
#include "planner/block_costs.h"
#include "planner/strategy_outcome.h"

namespace monet {

// What the DP may choose, per stage i (index i - 1).
struct DpChoices {
  // keep[i - 1]: the variants stage i may run when kept; none empty.
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

  // Adds a segment layer for later solve() calls. With `lean` choices, need() already covers
  // every mix of segment variants, so nothing is recomputed.
  void add_layer(std::vector<int> layer);

  // The least budget (fixed_bytes included) at which solve() is feasible.
  std::int64_t min_feasible_bytes() const { return costs_.fixed_bytes() + need_[0]; }

  // The fastest plan whose block-form peak is at most `budget_bytes`. An `incumbent`, a plan
  // known to fit, bounds the search: states that cannot finish faster than it are dropped
  // early, and it is the answer when nothing faster is found.
  DpSolution solve(std::int64_t budget_bytes, const Plan* incumbent = nullptr);

  // Whether the last solve() kept every front exact, so that its plan is the exact optimum.
  bool exact() const { return !bucketed_; }

 private:
  enum Kind : std::uint8_t { kKept, kLayer, kLean };

  // One state: a way to reach a boundary. Parents live in the fronts of earlier boundaries.
  struct Entry {
    std::int64_t retained;     // P
    double time;               // seconds so far
    std::int32_t parent;       // index in the parent's front; -1 at the start
    std::int32_t from;         // the parent's boundary: this block starts at stage from + 1
    std::int16_t choice;       // variant (kept), layer, or index into lean_segments_
    std::uint8_t parent_side;  // 1 when the parent's last block was a segment
    Kind kind;
  };

  // A run of a source front (its admitted prefix), shifted by one block.
  struct Run {
    const Entry* base;
    std::int32_t begin;  // entries [begin, size) of the source front
    std::int32_t size;
    std::int64_t retained;
    double time;
    std::int32_t from;
    std::int16_t choice;
    std::uint8_t side;
    Kind kind;
  };

  // A segment with its own variant mix, from the least-peak search.
  struct LeanSegment {
    int first;
    int last;
    std::vector<int> variants;  // for stages first..last
    std::int64_t local;
    double time;
  };

  std::vector<Entry>& front(int boundary, int side) { return fronts_[2 * boundary + side]; }
  std::int64_t need(int boundary, int side) const { return need_[2 * boundary + side]; }
  void compute_need();
  // Whether segment a..b has a variant mix (from `lean`) with local() <= limit; the mix with the
  // least saved bytes into *variants when it does.
  bool lean_fits(int a, int b, std::int64_t limit, std::vector<int>* variants) const;
  // A way to end a segment at a boundary: its local(), time and what it is.
  struct SegmentOption {
    std::int64_t local;
    double time;
    Kind kind;
    int choice;
  };

  // Adds the run of `source` from `begin`, shifted by a block, admitting entries with
  // P <= limit. Returns where the run ends (at least `begin`).
  std::int32_t add_run(const std::vector<Entry>& source, std::int32_t begin, std::int64_t limit,
                       std::int64_t retained, double time, int from, int side, Kind kind,
                       int choice);
  // Adds runs for the segment options of ends_[start] that end at boundary `last`.
  void add_segment_runs(int start, int last, std::int64_t headroom);
  // The Pareto front of (P, time) over every entry of runs_ into `target`, then thin().
  void gather_runs(std::vector<Entry>* target);
  // Cuts a front to options_.max_front states (DpOptions).
  void thin(std::vector<Entry>* front);
  // The same cut made straight from the candidates in scratch_, when they are many.
  void keep_fastest_per_bucket(std::vector<Entry>* target);
  Plan reconstruct(int boundary, int side, int index);

  const BlockCosts& costs_;
  DpChoices choices_;
  DpOptions options_;
  int stages_;
  bool bucketed_ = false;
  std::vector<std::int64_t> need_;  // 2 per boundary: after a kept block, after a segment
  std::vector<double> least_rest_;  // per boundary: the least time the stages after it take
  double bound_ = 0.0;              // states must finish faster than this (the incumbent)
  int last_boundary_ = 0;           // the boundary solve() is building
  std::vector<LeanSegment> lean_segments_;
  std::vector<std::vector<Entry>> fronts_;
  std::vector<Run> runs_;
  std::vector<Entry> scratch_;
  std::vector<double> fastest_below_;
  std::vector<int> bucket_best_;
  std::vector<std::vector<SegmentOption>> ends_;  // by segment start, for one boundary
  std::vector<int> touched_;                      // starts with options this boundary
};

// The `dp` strategy: CheckpointDp over default variants.
StrategyOutcome plan_dp(const Chain& chain, std::int64_t budget_bytes);

}  // namespace monet
