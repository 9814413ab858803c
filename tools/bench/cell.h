// What monet-bench measures: a cell of its table (one strategy at one budget, over its rounds),
// its JSON object, and the baseline's runs it is compared with.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "monet/memory_stats.h"
#include "monet/runtime.h"

namespace monet::bench {

// A run's share of the timed steps: batches first..first+steps-1, in round `round` of `rounds`.
struct Chunk {
  int first = 0;
  int steps = 0;
  int round = 0;
  int rounds = 1;
};

// What the training pool did over a cell's timed steps (differences of its MemoryStats): the work
// that holding the budget cost the allocator, which the plans' prices do not count. A flush gives
// cached segments back (on CUDA a cudaFree each, which waits for the device); with expandable
// segments, each time granules are given back (`decommits`) waits for the device before it
// unmaps them.
struct PoolWork {
  std::uint64_t cache_flushes = 0;
  // Refusals (each one a batch run again) and, of those, the ones the budget had room for: the
  // free memory in pieces, not a plan over its budget.
  std::uint64_t out_of_memory = 0;
  std::uint64_t out_of_memory_in_pieces = 0;
  std::uint64_t segment_reserves = 0;
  std::uint64_t segment_releases = 0;
  std::uint64_t committed_bytes = 0;
  std::uint64_t decommitted_bytes = 0;
  std::uint64_t decommits = 0;

  static PoolWork between(const MemoryStats& before, const MemoryStats& after);
  PoolWork& operator+=(const PoolWork& o);
};

// What one run (a cell of the table) gave; with several rounds, the sum of its rounds' runs.
struct Cell {
  std::string model;
  std::string strategy;          // "none" for the baseline
  bool warm = false;             // started from the warm-up run's predictor (--warm)
  std::string autocast = "off";  // "bfloat16 on cpu" under --autocast
  int budget_percent = 0;
  std::int64_t budget_bytes = 0;
  int margin_percent = 10;  // of the budget, kept free by the plans (--margin)
  bool feasible = true;
  std::int64_t least_budget_bytes = 0;  // when infeasible: what the runtime named
  std::string error;
  int iterations = 0;
  double seconds = 0.0;
  double started = 0.0, ended = 0.0;  // seconds since the bench began
  double baseline_seconds = 0.0;      // the reference: the baseline runs around it, interpolated
  double overhead = std::nan("");
  int rounds = 1;
  std::vector<double> round_overheads;  // each round's run against its own baselines
  double overhead_se = std::nan("");    // the standard error of their mean (two rounds or more)
  std::vector<std::vector<double>> baseline_runs;  // the baseline's: each round's runs, seconds
  // monet's cells: the other strategy of the lowest measured overhead at this budget, and the
  // mean and standard error of monet's overhead minus its, round by round (cells of one round
  // run minutes apart at most, so the machine's slow drift cancels from the difference).
  // The plan each shape last ran, one letter a stage (StepReport::plan: K kept, C checkpointed,
  // S a new segment right after another; lower case a lean variant).
  std::map<std::string, std::string> plans_by_shape;
  // Each shape's timed steps and their time, seconds, as workloads::train times a step (from its
  // batch on the device to its optimizer's step done), with the memory model's time of the plans
  // they ran and of keeping every stage, so that measured and planned compare shape by shape.
  // The baseline's sums every baseline run (several a round, no plans): its seconds a step are
  // what a cell's compare with.
  struct ShapeSteps {
    int steps = 0;
    double seconds = 0.0;
    double planned_seconds = 0.0;
    double unconstrained_seconds = 0.0;
    void add(const ShapeSteps& o) {
      steps += o.steps;
      seconds += o.seconds;
      planned_seconds += o.planned_seconds;
      unconstrained_seconds += o.unconstrained_seconds;
    }
  };
  std::map<std::string, ShapeSteps> steps_by_shape;
  // monet's cells: monet's time minus dp's over the shapes whose last plans were alike (the same
  // stages kept and checkpointed, no lean variant) and over the others, as points of the
  // baseline's time. Both cells run the same batches, so what monet's plans changed shows apart
  // from what changed alike: the machine's drift, or costs outside the plans (the allocator).
  int alike_shapes = 0;
  int apart_shapes = 0;
  double alike_points = std::nan("");
  double apart_points = std::nan("");
  std::string rival;
  double rival_difference = std::nan("");
  double rival_difference_se = std::nan("");
  // simulate()'s times over the timed steps, of the plans that ran and of keeping every stage
  double planned_seconds = 0.0;
  double unconstrained_seconds = 0.0;
  std::size_t peak_bytes = 0;  // reserved, over the whole run
  std::int64_t peak_in_use_bytes = 0;
  PoolWork pool;  // what the training pool did over the timed steps
  monet::RuntimeStats stats;
  double predictor_error = std::nan("");  // mean |predicted - measured| / measured step peak
  double predictor_bias = std::nan("");   // mean (predicted - measured) / measured: > 0 is high
  double predictor_error_max = std::nan("");
  int predicted_steps = 0;

  double cache_hit_rate() const {
    const auto looked_up = static_cast<double>(stats.cache_hits + stats.plans_made);
    return looked_up > 0 ? static_cast<double>(stats.cache_hits) / looked_up : std::nan("");
  }
  // The recomputation the plans meant to add, by the memory model on the chains they were made
  // for: what the strategy chose, without the machine's noise or the measurement passes. None
  // (NaN) for a cell no plan fitted, even where earlier rounds ran: its budget has no figure.
  double planned_overhead() const {
    if (strategy == "none") return 0.0;
    if (!feasible || !(unconstrained_seconds > 0)) return std::nan("");
    return planned_seconds / unconstrained_seconds - 1.0;
  }
  // The memory model's time of keeping every stage over the steps the cell ran, against the
  // baseline's measured time of as many steps: the share of a step that its stages account for.
  // The rest (the optimizer, the loss, launches, copies, the runtime's own work) no plan changes,
  // so a measured overhead near planned_overhead() * stage_share() is the plans' recomputation
  // as the model timed it (`static`'s one plan priced on each step's own shape).
  double stage_share() const {
    if (strategy == "none" || !feasible || !(baseline_seconds > 0) ||
        !(unconstrained_seconds > 0)) {
      return std::nan("");
    }
    return unconstrained_seconds / baseline_seconds;
  }
  double plan_us() const {
    return stats.plans_made > 0 ? 1e6 * stats.plan_seconds / static_cast<double>(stats.plans_made)
                                : std::nan("");
  }
};

// The cell as monet-bench --json prints it (DESIGN.md, "Formats").
nlohmann::ordered_json to_json(const PoolWork& w);
nlohmann::ordered_json to_json(const Cell& c);

// The baseline runs of a workload, round by round, seconds.
struct Baselines {
  std::vector<std::vector<double>> rounds;

  void add(const std::vector<Cell>& round) {
    rounds.emplace_back();
    for (const Cell& b : round) rounds.back().push_back(b.seconds);
  }
  // The sum over rounds of each round's mean.
  double seconds() const {
    double total = 0.0;
    for (const std::vector<double>& r : rounds) total += mean(r);
    return total;
  }
  // The largest (slowest - fastest) / mean within a round.
  double spread() const {
    double widest = 0.0;
    for (const std::vector<double>& r : rounds) {
      const auto [low, high] = std::minmax_element(r.begin(), r.end());
      widest = std::max(widest, (*high - *low) / mean(r));
    }
    return widest;
  }
  int runs() const {
    std::size_t n = 0;
    for (const std::vector<double>& r : rounds) n += r.size();
    return static_cast<int>(n);
  }

 private:
  static double mean(const std::vector<double>& r) {
    double sum = 0.0;
    for (const double v : r) sum += v;
    return sum / static_cast<double>(r.size());
  }
};

}  // namespace monet::bench
