#include "planner/checkpoint_dp.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <utility>

namespace monet {
namespace {

constexpr std::int64_t kUnreachable = std::numeric_limits<std::int64_t>::max() / 4;

}  // namespace

DpOptions dp_options(int stages) {
  constexpr int kFrontWork = 64 * 32 * 32;
  DpOptions options;
  options.max_front = std::clamp(kFrontWork / std::max(1, stages * stages), 32, 64);
  return options;
}

DpChoices DpChoices::defaults(int stages) {
  DpChoices choices;
  choices.keep.assign(stages, std::vector<int>{0});
  choices.segment.assign(1, std::vector<int>(stages, 0));
  return choices;
}

CheckpointDp::CheckpointDp(const BlockCosts& costs, DpChoices choices, DpOptions options)
    : costs_(costs), choices_(std::move(choices)), options_(options), stages_(costs.stages()) {
  assert(static_cast<int>(choices_.keep.size()) == stages_);
  assert(!choices_.segment.empty());
  fronts_.resize(2 * (stages_ + 1));
  ends_.resize(stages_ + 1);
  least_rest_.assign(stages_ + 1, 0.0);
  for (int i = stages_; i >= 1; --i) {
    double least = std::numeric_limits<double>::infinity();
    for (int v = 0; v < costs_.variant_count(i); ++v) {
      least = std::min(least, costs_.fwd_time(i, v) + costs_.bwd_time(i, v));
    }
    least_rest_[i - 1] = least_rest_[i] + least;
  }
  compute_need();
}

void CheckpointDp::add_layer(std::vector<int> layer) {
  choices_.segment.push_back(std::move(layer));
  if (choices_.lean.empty()) compute_need();
}

bool CheckpointDp::lean_fits(int a, int b, std::int64_t limit, std::vector<int>* variants) const {
  // Every term of local() grows with the saved bytes of the stages before it, so at each stage
  // the admissible variant with the least saved bytes leaves the most room for the rest: this
  // greedy finds a fitting mix whenever one exists.
  const std::int64_t room = limit - costs_.out(a - 1);
  if (room < 0) return false;
  if (variants != nullptr) variants->clear();
  std::int64_t sum = 0;
  for (int j = a; j <= b; ++j) {
    const std::int64_t in = j > a ? costs_.out(j - 1) : 0;
    int pick = -1;
    for (int v : choices_.lean[j - 1]) {
      const std::int64_t s = costs_.saved(j, v);
      const std::int64_t held = sum + s + costs_.out(j);
      if (in + costs_.out(j) + costs_.fwd_peak(j, v) > room) continue;
      if (held + costs_.fwd_peak(j, v) + costs_.out(b) > room) continue;
      if (held + costs_.out(j - 1) + costs_.bwd_peak(j, v) > room) continue;
      if (pick < 0 || s < costs_.saved(j, pick)) pick = v;
    }
    if (pick < 0) return false;
    sum += costs_.saved(j, pick) + costs_.out(j);
    if (variants != nullptr) variants->push_back(pick);
  }
  return true;
}

// need(i, side): the least headroom above fixed_bytes + P that stages i+1..L need, given that the
// block ending at boundary i was a segment (side 1) or not. The recursion of solve() with the
// minimum of max(local, retained + need(next)) in place of the time.
void CheckpointDp::compute_need() {
  struct Best {
    Kind kind = kKept;
    int choice = 0;
    int last = 0;
    std::vector<int> variants;
  };
  need_.assign(2 * (stages_ + 1), kUnreachable);
  need_[2 * stages_] = need_[2 * stages_ + 1] = costs_.turn();
  std::vector<Best> best_after_kept(stages_), best_after_segment(stages_);
  std::vector<std::int64_t> least_saved(stages_ + 1, 0);
  for (int j = 1; j <= stages_ && !choices_.lean.empty(); ++j) {
    least_saved[j] = kUnreachable;
    for (int v : choices_.lean[j - 1]) {
      least_saved[j] = std::min(least_saved[j], costs_.saved(j, v));
    }
  }
  std::vector<int> variants;
  for (int i = stages_ - 1; i >= 0; --i) {
    std::int64_t best = kUnreachable;
    Best arg;
    for (int v : choices_.keep[i]) {
      const BlockCosts::Block block = costs_.kept(i + 1, v);
      const std::int64_t candidate = std::max(block.local, block.retained + need(i + 1, 0));
      if (candidate < best) {
        best = candidate;
        arg = Best{kKept, v, i + 1, {}};
      }
    }
    need_[2 * i + 1] = best;
    best_after_segment[i] = arg;
    for (std::size_t l = 0; l < choices_.segment.size(); ++l) {
      SegmentScan scan(costs_, i + 1);
      for (int b = i + 1; b <= stages_; ++b) {
        scan.extend(choices_.segment[l][b - 1]);
        if (scan.local_lower_bound() >= best) break;
        const std::int64_t candidate = std::max(scan.local(), scan.retained() + need(b, 1));
        if (candidate < best) {
          best = candidate;
          arg = Best{kLayer, static_cast<int>(l), b, {}};
        }
      }
    }
    if (!choices_.lean.empty()) {
      std::int64_t bound = costs_.out(i);  // o(a-1) + sum of the least s(j) + o(j): <= local()
      for (int b = i + 1; b <= stages_; ++b) {
        bound += least_saved[b] + costs_.out(b);
        if (bound >= best) break;
        std::int64_t low = std::max(bound, costs_.out(i) + need(b, 1));
        if (low >= best || !lean_fits(i + 1, b, best - 1, nullptr)) continue;
        std::int64_t high = best - 1;  // fits; find the least limit that does
        while (low < high) {
          const std::int64_t mid = low + (high - low) / 2;
          if (lean_fits(i + 1, b, mid, nullptr)) {
            high = mid;
          } else {
            low = mid + 1;
          }
        }
        lean_fits(i + 1, b, high, &variants);
        best = high;
        arg = Best{kLean, 0, b, variants};
      }
    }
    need_[2 * i] = best;
    best_after_kept[i] = std::move(arg);
  }
  // The least-peak plan's own segments become choices of solve(), so that it fits at
  // min_feasible_bytes() even where no layer would.
  lean_segments_.clear();
  for (int i = 0, side = 0; i < stages_;) {
    const Best& arg = side == 1 ? best_after_segment[i] : best_after_kept[i];
    if (arg.kind == kLean) {
      SegmentScan scan(costs_, i + 1);
      for (int v : arg.variants) scan.extend(v);
      lean_segments_.push_back(
          LeanSegment{i + 1, arg.last, arg.variants, scan.local(), scan.time()});
    }
    side = arg.kind == kKept ? 0 : 1;
    i = arg.last;
  }
}

std::int32_t CheckpointDp::add_run(const std::vector<Entry>& source, std::int32_t begin,
                                   std::int64_t limit, std::int64_t retained, double time, int from,
                                   int side, Kind kind, int choice) {
  const auto end = std::partition_point(source.begin() + begin, source.end(),
                                        [&](const Entry& e) { return e.retained <= limit; });
  const auto size = static_cast<std::int32_t>(end - source.begin());
  // Times fall along a front: the entries too slow to beat the incumbent are a prefix.
  const double rest = bound_ - time - least_rest_[last_boundary_];
  const auto fast = std::partition_point(source.begin() + begin, end,
                                         [&](const Entry& e) { return e.time >= rest; });
  const auto first = static_cast<std::int32_t>(fast - source.begin());
  if (size > first) {
    runs_.push_back(Run{source.data(), first, size, retained, time, from,
                        static_cast<std::int16_t>(choice), static_cast<std::uint8_t>(side), kind});
  }
  return std::max(size, begin);
}

void CheckpointDp::add_segment_runs(int start, int last, std::int64_t headroom) {
  std::vector<SegmentOption>& options = ends_[start];
  std::sort(options.begin(), options.end(), [](const SegmentOption& x, const SegmentOption& y) {
    return x.time != y.time ? x.time < y.time : x.local < y.local;
  });
  // Fastest first; an option is worth it only where it needs less room than every faster one.
  // A state takes the fastest option its room admits, so the options split the source front,
  // sorted by P, into consecutive ranges.
  const std::vector<Entry>& source = front(start - 1, 0);
  const std::int64_t retained = costs_.out(start - 1);
  const std::int64_t after = retained + need(last, 1);
  std::int64_t least_local = std::numeric_limits<std::int64_t>::max();
  std::int32_t begin = 0;
  for (const SegmentOption& option : options) {
    if (option.local >= least_local) continue;
    least_local = option.local;
    const std::int64_t limit = headroom - std::max(option.local, after);
    begin = add_run(source, begin, limit, retained, option.time, start - 1, 0, option.kind,
                    option.choice);
  }
}

void CheckpointDp::gather_runs(std::vector<Entry>* target) {
  target->clear();
  std::size_t candidates = 0;
  std::int64_t low = std::numeric_limits<std::int64_t>::max();
  std::int64_t high = std::numeric_limits<std::int64_t>::min();
  for (const Run& run : runs_) {
    candidates += static_cast<std::size_t>(run.size - run.begin);
    low = std::min(low, run.base[run.begin].retained + run.retained);
    high = std::max(high, run.base[run.size - 1].retained + run.retained);
  }
  if (candidates == 0) return;

  // Most candidates are beaten by one in a lower P bucket: two linear passes drop those, and
  // only the rest are sorted. Exact: the bucket of a P is monotone in P, so a candidate is
  // dropped only when another has less P and is at least as fast. About one candidate a bucket.
  const std::size_t buckets = std::min<std::size_t>(candidates, 4096);
  const double scale =
      static_cast<double>(buckets - 1) / static_cast<double>(std::max<std::int64_t>(high - low, 1));
  const auto bucket = [&](std::int64_t retained) {
    return std::min(buckets - 1,
                    static_cast<std::size_t>(static_cast<double>(retained - low) * scale)) +
           1;
  };
  const double never = std::numeric_limits<double>::infinity();
  fastest_below_.assign(buckets + 1, never);
  for (const Run& run : runs_) {
    for (std::int32_t k = run.begin; k < run.size; ++k) {
      double& fastest = fastest_below_[bucket(run.base[k].retained + run.retained)];
      fastest = std::min(fastest, run.base[k].time + run.time);
    }
  }
  // fastest_below_[q]: the least time among candidates in buckets below q.
  double running = never;
  for (std::size_t q = 1; q < fastest_below_.size(); ++q) {
    const double in_bucket = fastest_below_[q];
    fastest_below_[q] = running;
    running = std::min(running, in_bucket);
  }
  scratch_.clear();
  for (const Run& run : runs_) {
    for (std::int32_t k = run.begin; k < run.size; ++k) {
      const Entry e{run.base[k].retained + run.retained,
                    run.base[k].time + run.time,
                    k,
                    run.from,
                    run.choice,
                    run.side,
                    run.kind};
      if (e.time < fastest_below_[bucket(e.retained)]) scratch_.push_back(e);
    }
  }
  const std::size_t limit = static_cast<std::size_t>(options_.max_front);
  if (limit >= 2 && scratch_.size() > 4 * limit) {
    keep_fastest_per_bucket(target);
    return;
  }
  std::sort(scratch_.begin(), scratch_.end(), [](const Entry& x, const Entry& y) {
    return x.retained != y.retained ? x.retained < y.retained : x.time < y.time;
  });
  double best_time = never;
  for (const Entry& e : scratch_) {
    if (e.time < best_time) {
      best_time = e.time;
      target->push_back(e);
    }
  }
  thin(target);
}

void CheckpointDp::keep_fastest_per_bucket(std::vector<Entry>* target) {
  bucketed_ = true;
  const auto buckets = static_cast<std::size_t>(options_.max_front);
  std::int64_t low = std::numeric_limits<std::int64_t>::max();
  std::int64_t high = std::numeric_limits<std::int64_t>::min();
  Entry least = scratch_.front();  // the least P, then the least time
  for (const Entry& e : scratch_) {
    low = std::min(low, e.retained);
    high = std::max(high, e.retained);
    if (e.retained < least.retained || (e.retained == least.retained && e.time < least.time)) {
      least = e;
    }
  }
  const double scale =
      static_cast<double>(buckets - 1) / static_cast<double>(std::max<std::int64_t>(high - low, 1));
  bucket_best_.assign(buckets, -1);
  for (std::size_t k = 0; k < scratch_.size(); ++k) {
    const auto q =
        std::min(buckets - 1,
                 static_cast<std::size_t>(static_cast<double>(scratch_[k].retained - low) * scale));
    int& best = bucket_best_[q];
    if (best < 0 || scratch_[k].time < scratch_[static_cast<std::size_t>(best)].time) {
      best = static_cast<int>(k);
    }
  }
  target->push_back(least);
  for (int k : bucket_best_) {
    if (k < 0) continue;
    const Entry& e = scratch_[static_cast<std::size_t>(k)];
    if (e.time < target->back().time && e.retained > target->back().retained) target->push_back(e);
  }
}

void CheckpointDp::thin(std::vector<Entry>* front) {
  const auto buckets = static_cast<std::size_t>(options_.max_front);
  if (buckets < 2 || front->size() <= buckets) return;
  bucketed_ = true;
  const std::int64_t low = front->front().retained;
  const std::int64_t width =
      (front->back().retained - low) / static_cast<std::int64_t>(buckets - 1) + 1;
  const auto bucket = [&](const Entry& e) { return (e.retained - low) / width; };
  // Sorted by P with time falling: a bucket's fastest state is its last one. The first state,
  // with the least P, stays too.
  std::size_t kept = 1;
  for (std::size_t k = 1; k < front->size(); ++k) {
    if (k + 1 == front->size() || bucket((*front)[k + 1]) != bucket((*front)[k])) {
      (*front)[kept++] = (*front)[k];
    }
  }
  front->resize(kept);
}

DpSolution CheckpointDp::solve(std::int64_t budget_bytes, const Plan* incumbent) {
  const std::int64_t headroom = budget_bytes - costs_.fixed_bytes();
  if (headroom < need(0, 0)) {
    DpSolution least = solve(min_feasible_bytes());
    least.feasible = false;
    return least;
  }
  bound_ = std::numeric_limits<double>::infinity();
  if (incumbent != nullptr) {
    // Ties go to the incumbent: only a plan faster by more than rounding replaces it.
    const double time = costs_.time(*incumbent);
    bound_ = time - 1e-12 * time;
  }
  bucketed_ = false;
  for (std::vector<Entry>& f : fronts_) f.clear();
  front(0, 0).push_back(Entry{0, 0.0, -1, -1, 0, 0, kKept});
  struct OpenSegment {
    SegmentScan scan;
    int layer;
  };
  std::vector<OpenSegment> open;

  for (int b = 1; b <= stages_; ++b) {
    last_boundary_ = b;
    runs_.clear();
    for (int side = 0; side < 2; ++side) {
      const std::vector<Entry>& source = front(b - 1, side);
      if (source.empty()) continue;
      for (int v : choices_.keep[b - 1]) {
        const BlockCosts::Block block = costs_.kept(b, v);
        const std::int64_t limit = headroom - std::max(block.local, block.retained + need(b, 0));
        add_run(source, 0, limit, block.retained, block.time, b - 1, side, kKept, v);
      }
    }
    gather_runs(&front(b, 0));

    runs_.clear();
    if (!front(b - 1, 0).empty()) {
      for (std::size_t l = 0; l < choices_.segment.size(); ++l) {
        open.push_back(OpenSegment{SegmentScan(costs_, b), static_cast<int>(l)});
      }
    }
    // Every way to end a segment at b, grouped by where it starts.
    for (int start : touched_) ends_[start].clear();
    touched_.clear();
    const auto offer = [&](int start, const SegmentOption& option) {
      if (ends_[start].empty()) touched_.push_back(start);
      ends_[start].push_back(option);
    };
    std::size_t alive = 0;
    for (std::size_t k = 0; k < open.size(); ++k) {
      SegmentScan& scan = open[k].scan;
      scan.extend(choices_.segment[open[k].layer][b - 1]);
      // No longer segment from this start fits the state with the least P: close it.
      if (scan.local_lower_bound() > headroom - front(scan.first() - 1, 0).front().retained) {
        continue;
      }
      offer(scan.first(), SegmentOption{scan.local(), scan.time(), kLayer, open[k].layer});
      if (alive != k) open[alive] = open[k];
      ++alive;
    }
    open.erase(open.begin() + static_cast<std::ptrdiff_t>(alive), open.end());
    for (std::size_t k = 0; k < lean_segments_.size(); ++k) {
      const LeanSegment& lean = lean_segments_[k];
      if (lean.last != b || front(lean.first - 1, 0).empty()) continue;
      offer(lean.first, SegmentOption{lean.local, lean.time, kLean, static_cast<int>(k)});
    }
    for (int start : touched_) add_segment_runs(start, b, headroom);
    gather_runs(&front(b, 1));
  }

  // Every entry at the last boundary fits: it passed need(L) = the turn when it was made.
  int best_side = -1;
  double best_time = std::numeric_limits<double>::infinity();
  for (int side = 0; side < 2; ++side) {
    const std::vector<Entry>& last = front(stages_, side);
    if (!last.empty() && last.back().time < best_time) {
      best_time = last.back().time;
      best_side = side;
    }
  }
  DpSolution solution;
  solution.feasible = true;
  solution.min_feasible_bytes = min_feasible_bytes();
  if (best_side < 0) {
    // need(0) <= headroom guarantees a path, so only the incumbent's bound can have cut them all:
    // nothing is faster than the incumbent.
    assert(incumbent != nullptr);
    solution.plan = *incumbent;
  } else {
    solution.plan =
        reconstruct(stages_, best_side, static_cast<int>(front(stages_, best_side).size()) - 1);
  }
  solution.peak_bytes = costs_.peak(solution.plan);
  solution.time = costs_.time(solution.plan);
  return solution;
}

Plan CheckpointDp::reconstruct(int boundary, int side, int index) {
  Plan plan;
  plan.stages.resize(stages_);
  while (boundary > 0) {
    const Entry& e = front(boundary, side)[index];
    for (int i = e.from + 1; i <= boundary; ++i) {
      StagePlan& stage = plan.stages[i - 1];
      switch (e.kind) {
        case kKept:
          stage = StagePlan{false, e.choice};
          break;
        case kLayer:
          stage = StagePlan{true, choices_.segment[e.choice][i - 1]};
          break;
        case kLean:
          stage = StagePlan{true, lean_segments_[e.choice].variants[i - e.from - 1]};
          break;
      }
    }
    boundary = e.from;
    side = e.parent_side;
    index = e.parent;
  }
  return plan;
}

StrategyOutcome plan_dp(const Chain& chain, std::int64_t budget_bytes) {
  const BlockCosts costs(chain, /*default_only=*/true);
  CheckpointDp dp(costs, DpChoices::defaults(costs.stages()), dp_options(costs.stages()));
  DpSolution solution = dp.solve(budget_bytes);
  return StrategyOutcome{std::move(solution.plan), solution.feasible, solution.min_feasible_bytes};
}

}  // namespace monet
