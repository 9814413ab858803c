#include "planner/joint_planner.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "planner/baseline_strategies.h"
#include "planner/block_costs.h"
#include "planner/chain_model.h"
#include "planner/checkpoint_dp.h"
#include "planner/rest_bound.h"
#include "planner/simulate.h"

namespace monet {
namespace {

// Price layers and DP rounds cost work in proportion to stages^2: short chains, which are cheap
// to plan, get many of them, long chains a few, so that planning stays fast.
constexpr int kLayerWork = 12 * 12 * 12;
constexpr int kMinPriceLayers = 2;
constexpr int kMaxPriceLayers = 12;
constexpr int kTwoRoundStages = 12;  // longer chains plan in one round
constexpr int kDeviationStages = 8;  // longer chains get no deviation layers (add_deviation_layers)
constexpr int kPairDeviationStages = 6;  // longer chains get none with two stages switched
// Nodes the branch and bound may visit per segment before it keeps the best assignment found.
constexpr int kSegmentNodeLimit = 512;
// A state of the joint DP costs a few times one of `dp` (a run per kept variant, more segment
// options), so its fronts are cut sooner as chains grow: 64 states up to 16 stages, falling with
// stages^2 to 32 from 24 stages on. They are cut by time (DpOptions::thin_by_time): on a
// 100-stage transformer, P buckets left plans up to 2.4 points of overhead above those of whole
// fronts, time buckets 0.8.
constexpr int kJointFrontWork = 32 * 24 * 24;
// Variants "save much" where their least time under the budget (RestBound) is this far below
// dp's: then dp is planned after the joint search, bounded by it (JointPlanner::plan).
constexpr double kVariantsPay = 0.98;

DpOptions joint_options(int stages) {
  DpOptions options = dp_options(stages);
  options.max_front =
      std::clamp(kJointFrontWork / std::max(1, stages * stages), 32, options.max_front);
  options.thin_by_time = true;
  return options;
}

// Seconds a stage takes running variant v, kept or inside a segment (forward twice).
double stage_time(const BlockCosts& costs, int i, int v, bool in_segment) {
  return (in_segment ? 2.0 : 1.0) * costs.fwd_time(i, v) + costs.bwd_time(i, v);
}

// How much a variant adds to a segment's memory, for choosing the leanest and pricing layers.
std::int64_t segment_weight(const BlockCosts& costs, int i, int v) {
  return costs.saved(i, v) + std::max(costs.fwd_peak(i, v), costs.bwd_peak(i, v));
}

// The variants of stage i that no other variant of it matches or beats on every number a block
// uses (s, f, b and the time of the role). An exact tie keeps the lower index. Fastest first.
std::vector<int> useful_variants(const BlockCosts& costs, int i, bool in_segment) {
  const auto covers = [&](int w, int v) {  // w at least as good as v everywhere
    return costs.saved(i, w) <= costs.saved(i, v) && costs.fwd_peak(i, w) <= costs.fwd_peak(i, v) &&
           costs.bwd_peak(i, w) <= costs.bwd_peak(i, v) &&
           stage_time(costs, i, w, in_segment) <= stage_time(costs, i, v, in_segment);
  };
  std::vector<int> useful;
  const int count = costs.variant_count(i);
  useful.reserve(static_cast<std::size_t>(count));
  for (int v = 0; v < count; ++v) {
    bool beaten = false;
    for (int w = 0; w < count && !beaten; ++w) {
      if (w != v && covers(w, v)) beaten = !covers(v, w) || w < v;
    }
    if (!beaten) useful.push_back(v);
  }
  // An insertion sort, stable: a stage has a few variants.
  for (std::size_t k = 1; k < useful.size(); ++k) {
    const int v = useful[k];
    const double time = stage_time(costs, i, v, in_segment);
    std::size_t j = k;
    for (; j > 0 && stage_time(costs, i, useful[j - 1], in_segment) > time; --j) {
      useful[j] = useful[j - 1];
    }
    useful[j] = v;
  }
  return useful;
}

// The fastest assignment of variants to a segment whose local() is at most a limit, never worse
// than the plan's current one, by depth-first branch and bound (fastest variants first, so good
// assignments come early when the node limit cuts the search). One object serves every segment
// of a plan.
class SegmentSearch {
 public:
  SegmentSearch(const BlockCosts& costs, const std::vector<std::vector<int>>& options)
      : costs_(costs), options_(options) {}

  // Improves plan->stages[first - 1 .. last - 1].variant in place; true when it changed.
  bool improve(Plan* plan, int first, int last, std::int64_t limit) {
    first_ = first;
    last_ = last;
    limit_ = limit;
    rest_.assign(last - first + 2, 0.0);
    for (int j = last; j >= first; --j) {
      rest_[j - first] =
          rest_[j - first + 1] + stage_time(costs_, j, options_[j - 1].front(), true);
    }
    current_.resize(last_ - first_ + 1);
    best_.clear();
    SegmentScan incumbent(costs_, first_);
    for (int j = first_; j <= last_; ++j) incumbent.extend(plan->stages[j - 1].variant);
    best_time_ = incumbent.time();
    nodes_ = 0;
    search(first_, SegmentScan(costs_, first_));
    if (best_.empty()) return false;
    for (int j = first_; j <= last_; ++j) plan->stages[j - 1].variant = best_[j - first_];
    return true;
  }

 private:
  void search(int j, const SegmentScan& scan) {
    if (++nodes_ > kSegmentNodeLimit) return;
    // Gains below this are rounding, not time.
    if (scan.time() + rest_[j - first_] >= best_time_ * (1.0 - 1e-12)) return;
    if (j > last_) {
      best_time_ = scan.time();
      best_ = current_;
      return;
    }
    for (int v : options_[j - 1]) {
      SegmentScan next = scan;
      next.extend(v);
      // Every term of local() only grows as the segment goes on, and its end, last_, is known.
      if (next.partial_local(last_) > limit_) continue;
      current_[j - first_] = v;
      search(j + 1, next);
    }
  }

  const BlockCosts& costs_;
  const std::vector<std::vector<int>>& options_;
  int first_ = 0;
  int last_ = 0;
  std::int64_t limit_ = 0;
  std::vector<double> rest_;  // the fastest possible time of stages j..last
  std::vector<int> current_;
  std::vector<int> best_;
  double best_time_ = 0.0;
  int nodes_ = 0;
};

class JointPlanner {
 public:
  // max_front < 0: joint_options()'s.
  JointPlanner(const Chain& chain, std::int64_t budget_bytes, int max_front)
      : chain_(chain), budget_(budget_bytes), costs_(chain, /*default_only=*/false) {
    const int stages = costs_.stages();
    DpChoices choices;
    choices.keep.resize(stages);
    segment_options_.resize(stages);
    fastest_.resize(stages);
    std::vector<int> leanest(stages);
    for (int i = 1; i <= stages; ++i) {
      choices.keep[i - 1] = useful_variants(costs_, i, false);
      segment_options_[i - 1] = useful_variants(costs_, i, true);
      fastest_[i - 1] = segment_options_[i - 1].front();
      leanest[i - 1] = fastest_[i - 1];
      for (int v : segment_options_[i - 1]) {
        if (segment_weight(costs_, i, v) < segment_weight(costs_, i, leanest[i - 1])) {
          leanest[i - 1] = v;
        }
      }
    }
    // Default variants first: with them the space holds every plan of `dp`.
    layers_.push_back(std::vector<int>(stages, 0));
    add_layer(fastest_);
    add_layer(std::move(leanest));
    add_price_layers();
    add_deviation_layers();
    choices.segment = layers_;
    choices.lean = segment_options_;
    DpOptions options = joint_options(stages);
    if (max_front >= 0) options.max_front = max_front;
    dp_.emplace(costs_, std::move(choices), options);
  }

  StrategyOutcome plan() {
    const BlockCosts defaults(chain_, /*default_only=*/true);
    CheckpointDp checkpoints(defaults, DpChoices::defaults(defaults.stages()),
                             dp_options(defaults.stages()));
    StrategyOutcome outcome;
    // The joint search's least budget is never above dp's, except where variants disagree on
    // out_bytes and it plans with the largest.
    const std::int64_t joint_least = dp_->min_feasible_bytes();
    const std::int64_t floor_least = checkpoints.min_feasible_bytes();
    outcome.min_feasible_bytes = std::min(joint_least, floor_least);
    outcome.feasible = budget_ >= outcome.min_feasible_bytes;
    if (!outcome.feasible) {
      outcome.plan = joint_least <= floor_least ? dp_->solve(joint_least).plan
                                                : checkpoints.solve(floor_least).plan;
      return outcome;
    }
    const StrategyOutcome greedy = plan_greedy(chain_, budget_);
    if (budget_ < joint_least) {
      outcome.plan = solve_as_dp(&checkpoints, budget_, greedy).plan;
      return outcome;
    }
    // The joint search wants an incumbent to bound it: the fewer states it keeps, the less its
    // fronts are cut. Two are at hand: greedy's plan with its variants polished (cheap), and the
    // checkpoint-only optimum (`dp`), which monet must never lose to anyway and which costs about
    // as much as the joint search. dp only matters where it beats the other plans, and RestBound
    // may show at the outset that no checkpoint-only plan can. Where variants save much (their
    // bound is well below dp's), the joint plan beats dp by far, so dp comes after it, bounded by
    // it, where RestBound drops nearly every state at once; elsewhere dp comes first, whole, and
    // the better of the two plans bounds the joint search. (A first search bounded by the polished
    // plan gave up on a front it would have cut in 9 of 10 cases on random chains of 16 to 116
    // stages; without it, planning those chains took 2 to 3% less time.)
    std::optional<Plan> incumbent = polished(greedy);
    const double dp_least =
        RestBound(defaults).least_time(0, budget_ - defaults.fixed_bytes() - defaults.turn());
    const bool dp_after = incumbent && RestBound(costs_).least_time(
                                           0, budget_ - costs_.fixed_bytes() - costs_.turn()) <
                                           kVariantsPay * dp_least;
    std::optional<DpSolution> floor;
    if (!dp_after && (!incumbent || dp_least < costs_.time(*incumbent))) {
      floor = solve_as_dp(&checkpoints, budget_, greedy);
      if (floor && floor->feasible && costs_.peak(floor->plan) <= budget_ &&
          (!incumbent || floor->time < costs_.time(*incumbent))) {
        incumbent = floor->plan;
      }
    }
    Plan best = joint_plan(incumbent);
    double time = simulate(chain_, best).time;
    if (dp_after) floor = floor_plan(&checkpoints, time, dp_least, greedy);
    // Judged by simulate(): the floor wins where the joint search was conservative (variants
    // that disagree on out_bytes); greedy where the floor's own fronts were discretized.
    if (floor && floor->feasible && floor->time < time) {
      best = std::move(floor->plan);
      time = floor->time;
    }
    if (!checkpoints.exact() && greedy.feasible && simulate(chain_, greedy.plan).time < time) {
      best = greedy.plan;
    }
    outcome.plan = std::move(best);
    return outcome;
  }

 private:
  // dp's plan where it may be faster than `seconds`: none where RestBound's `least` time says no
  // checkpoint-only plan is; bounded by `seconds` where that search keeps its fronts whole;
  // otherwise dp's own plan, which is the one monet must not lose to.
  std::optional<DpSolution> floor_plan(CheckpointDp* dp, double seconds, double least,
                                       const StrategyOutcome& greedy) const {
    if (least >= seconds) return std::nullopt;
    std::optional<DpSolution> found = dp->solve_faster_than(budget_, seconds);
    if (!dp->exact()) found = solve_as_dp(dp, budget_, greedy);
    return found;
  }

  // A plan of greedy's with its variants polished, when it fits the joint search's block form.
  std::optional<Plan> polished(const StrategyOutcome& greedy) const {
    if (!greedy.feasible || costs_.peak(greedy.plan) > budget_) return std::nullopt;
    Plan plan = greedy.plan;
    polish(&plan);
    return plan;
  }

  // The joint DP's plan, polished; for short chains the polished segment variants become one
  // more layer, with its deviations (each stage switched to each of its other variants), and the
  // DP runs again.
  Plan joint_plan(const std::optional<Plan>& incumbent) {
    Plan best = dp_->solve(budget_, incumbent ? &*incumbent : nullptr).plan;
    polish(&best);
    const int rounds = costs_.stages() <= kTwoRoundStages ? 2 : 1;
    for (int round = 1; round < rounds; ++round) {
      // The polished segment variants, as a layer the DP can place segments with.
      std::vector<int> layer = fastest_;
      for (int i = 1; i <= costs_.stages(); ++i) {
        if (best.stages[i - 1].checkpoint) layer[i - 1] = best.stages[i - 1].variant;
      }
      // With it, the polished layer with one stage switched to another of its variants: where
      // variants are not trade-offs, the fastest mix of a segment the plan did not place can be
      // in no layer, one stage away from the polished one, and the DP then places other segments.
      bool added = false;
      for (int i = 1; i <= costs_.stages(); ++i) {
        for (int v : segment_options_[i - 1]) {
          if (v == layer[i - 1]) continue;
          std::vector<int> deviation = layer;
          deviation[i - 1] = v;
          if (add_layer(deviation)) {
            dp_->add_layer(std::move(deviation));
            added = true;
          }
        }
      }
      if (add_layer(layer)) {
        dp_->add_layer(std::move(layer));
        added = true;
      }
      if (!added) break;
      Plan candidate = dp_->solve(budget_, &best).plan;
      polish(&candidate);
      if (costs_.time(candidate) >= costs_.time(best)) break;
      best = std::move(candidate);
    }
    return best;
  }

  // Adds a segment layer unless an equal one is there.
  bool add_layer(std::vector<int> layer) {
    if (std::find(layers_.begin(), layers_.end(), layer) != layers_.end()) return false;
    layers_.push_back(std::move(layer));
    return true;
  }

  // Layers between the fastest and the leanest: at a price p (seconds per byte), each stage runs
  // the variant with the least time + p * weight. The prices are quantiles of the prices at
  // which some stage switches variant, so the layers spread over the trade-offs the chain has.
  void add_price_layers() {
    const int stages = costs_.stages();
    std::vector<double> prices;
    for (int i = 1; i <= stages; ++i) {
      for (int u : segment_options_[i - 1]) {
        for (int v : segment_options_[i - 1]) {
          const std::int64_t lighter = segment_weight(costs_, i, u) - segment_weight(costs_, i, v);
          const double slower = stage_time(costs_, i, v, true) - stage_time(costs_, i, u, true);
          if (lighter > 0 && slower > 0) prices.push_back(slower / static_cast<double>(lighter));
        }
      }
    }
    if (prices.empty()) return;
    std::sort(prices.begin(), prices.end());
    const int count = std::clamp(kLayerWork / (stages * stages), kMinPriceLayers, kMaxPriceLayers);
    for (int q = 1; q <= count; ++q) {
      const double price = prices[prices.size() * q / (count + 1)];
      std::vector<int> layer(stages);
      for (int i = 1; i <= stages; ++i) {
        const auto cost = [&](int v) {
          return stage_time(costs_, i, v, true) +
                 price * static_cast<double>(segment_weight(costs_, i, v));
        };
        int best = segment_options_[i - 1].front();
        for (int v : segment_options_[i - 1]) {
          if (cost(v) < cost(best)) best = v;
        }
        layer[i - 1] = best;
      }
      add_layer(std::move(layer));
    }
  }

  // For short chains, where layers are cheap: the fastest layer with one stage running another
  // of its useful variants, for every stage and variant, so that a segment whose best mix leaves
  // the fastest at one stage (a lean variant where the segment's peak is) is in the space.
  // On the shortest chains also with two stages switched: a segment holds its output's gradient
  // through the backward of every stage in it, so its best mix may leave the fastest at one stage
  // for its own peak and at another for the backward below that gradient (a 5-stage chain of the
  // planner's tests was 1.08% slower than the optimum without them).
  void add_deviation_layers() {
    const int stages = costs_.stages();
    if (stages > kDeviationStages) return;
    struct Switch {
      int stage;
      int variant;
    };
    std::vector<Switch> switches;  // every stage's useful variants other than its fastest
    for (int i = 1; i <= stages; ++i) {
      for (int v : segment_options_[i - 1]) {
        if (v != fastest_[i - 1]) switches.push_back(Switch{i, v});
      }
    }
    for (std::size_t a = 0; a < switches.size(); ++a) {
      std::vector<int> layer = fastest_;
      layer[switches[a].stage - 1] = switches[a].variant;
      for (std::size_t b = a + 1; b < switches.size() && stages <= kPairDeviationStages; ++b) {
        if (switches[b].stage == switches[a].stage) continue;
        std::vector<int> pair = layer;
        pair[switches[b].stage - 1] = switches[b].variant;
        add_layer(std::move(pair));
      }
      add_layer(std::move(layer));
    }
  }

  struct BlockSpan {
    int first;
    int last;
    bool segment;
    std::int64_t before;  // P at the block's start
    std::int64_t local;
  };

  // The plan's blocks in order, then the turn as a block of its own.
  std::vector<BlockSpan> blocks(const Plan& plan) const {
    std::vector<BlockSpan> spans;
    std::int64_t retained = 0;
    costs_.for_each_block(plan,
                          [&](int first, int last, bool segment, const BlockCosts::Block& block) {
                            spans.push_back(BlockSpan{first, last, segment, retained, block.local});
                            retained += block.retained;
                          });
    spans.push_back(
        BlockSpan{costs_.stages() + 1, costs_.stages(), false, retained, costs_.turn()});
    return spans;
  }

  // Re-chooses variants within the plan's blocks, never leaving the budget.
  void polish(Plan* plan) const {
    const std::int64_t headroom = budget_ - costs_.fixed_bytes();
    SegmentSearch search(costs_, segment_options_);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<BlockSpan> spans = blocks(*plan);
      bool changed = false;
      for (const BlockSpan& span : spans) {
        if (!span.segment) continue;
        changed |= search.improve(plan, span.first, span.last, headroom - span.before);
      }
      // A segment's new variants may have taken the slack the kept stages are judged by.
      if (changed) spans = blocks(*plan);
      changed |= faster_kept_variants(plan, &spans, headroom);
      if (!changed) break;
    }
  }

  // A kept stage may switch to a faster variant when its own block fits and every later block
  // (and the turn) has room for the change in what it retains.
  bool faster_kept_variants(Plan* plan, std::vector<BlockSpan>* spans,
                            std::int64_t headroom) const {
    bool changed = false;
    const int n = static_cast<int>(spans->size());
    std::vector<std::int64_t> slack_after(n + 1, std::numeric_limits<std::int64_t>::max());
    const auto refresh = [&]() {
      for (int k = n - 1; k >= 0; --k) {
        const BlockSpan& s = (*spans)[k];
        slack_after[k] = std::min(slack_after[k + 1], headroom - s.before - s.local);
      }
    };
    refresh();
    for (int k = 0; k < n; ++k) {
      BlockSpan& span = (*spans)[k];
      if (span.segment || span.first > costs_.stages()) continue;
      const int i = span.first;
      StagePlan& stage = plan->stages[i - 1];
      const BlockCosts::Block now = costs_.kept(i, stage.variant);
      int best = stage.variant;
      double best_time = now.time;
      for (int v : segment_options_[i - 1]) {
        const BlockCosts::Block next = costs_.kept(i, v);
        if (next.time >= best_time || span.before + next.local > headroom) continue;
        if (next.retained - now.retained > slack_after[k + 1]) continue;
        best = v;
        best_time = next.time;
      }
      if (best == stage.variant) continue;
      const BlockCosts::Block next = costs_.kept(i, best);
      stage.variant = best;
      span.local = next.local;
      for (int later = k + 1; later < n; ++later) {
        (*spans)[later].before += next.retained - now.retained;
      }
      refresh();
      changed = true;
    }
    return changed;
  }

  const Chain& chain_;
  std::int64_t budget_;
  BlockCosts costs_;
  std::vector<std::vector<int>> segment_options_;  // per stage, useful variants in a segment
  std::vector<int> fastest_;                       // per stage, its fastest in a segment
  std::vector<std::vector<int>> layers_;
  std::optional<CheckpointDp> dp_;
};

}  // namespace

StrategyOutcome plan_monet(const Chain& chain, std::int64_t budget_bytes) {
  return JointPlanner(chain, budget_bytes, -1).plan();
}

StrategyOutcome plan_monet(const Chain& chain, std::int64_t budget_bytes, int max_front) {
  return JointPlanner(chain, budget_bytes, max_front).plan();
}

}  // namespace monet
