#include "planner/checkpoint_dp.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "planner/baseline_strategies.h"

namespace monet {
namespace {

constexpr std::int64_t kUnreachable = std::numeric_limits<std::int64_t>::max() / 4;

// The first state of [begin, end) for which `before` is false, `before` being true on a prefix:
// std::partition_point without branches on the data, which the processor cannot predict.
template <typename Before>
const DpState* first_not(const DpState* begin, const DpState* end, Before before) {
  auto size = static_cast<std::size_t>(end - begin);
  if (size == 0) return begin;
  while (size > 1) {
    const std::size_t half = size / 2;
    begin += static_cast<std::size_t>(before(begin[half])) * half;
    size -= half;
  }
  return begin + static_cast<std::size_t>(before(*begin));
}

}  // namespace

DpOptions dp_options(int stages) {
  constexpr int kFrontWork = 64 * 32 * 32;
  DpOptions options;
  options.max_front = std::clamp(kFrontWork / std::max(1, stages * stages), 32, 64);
  return options;
}

DpChoices DpChoices::defaults(int stages) {
  DpChoices choices;
  // An empty `keep` keeps variant 0 everywhere.
  choices.segment.assign(1, std::vector<int>(stages, 0));
  return choices;
}

struct CheckpointDp::Buffers {
  std::vector<DpState> pool;
  std::vector<std::int32_t> front_start;
  std::vector<StateRun> runs;
  std::vector<DpState> united;
  FrontMerge merge{0};
  std::vector<int> open;
  std::vector<LayerStep> steps;
  std::vector<Growth> growth;
  std::vector<SegmentOption> options_at;
  SegmentSweep sweep;
};

std::vector<std::unique_ptr<CheckpointDp::Buffers>>& CheckpointDp::spare_buffers() {
  thread_local std::vector<std::unique_ptr<Buffers>> spare;
  return spare;
}

std::unique_ptr<CheckpointDp::Buffers, CheckpointDp::ReturnBuffers> CheckpointDp::lease_buffers() {
  std::vector<std::unique_ptr<Buffers>>& spare = spare_buffers();
  if (spare.empty()) return std::unique_ptr<Buffers, ReturnBuffers>(new Buffers);
  std::unique_ptr<Buffers, ReturnBuffers> buffers(spare.back().release());
  spare.pop_back();
  return buffers;
}

void CheckpointDp::ReturnBuffers::operator()(Buffers* buffers) const {
  // A few per thread: monet plans with two DPs at a time. Pools grown by a huge chain go.
  constexpr std::size_t kKept = 4;
  constexpr std::size_t kLargestPool = std::size_t{1} << 16;
  std::vector<std::unique_ptr<Buffers>>& spare = spare_buffers();
  std::unique_ptr<Buffers> owned(buffers);
  if (spare.size() < kKept && owned->pool.capacity() <= kLargestPool) {
    spare.push_back(std::move(owned));
  }
}

CheckpointDp::CheckpointDp(const BlockCosts& costs, DpChoices choices, DpOptions options)
    : costs_(costs),
      choices_(std::move(choices)),
      options_(options),
      stages_(costs.stages()),
      buffers_(lease_buffers()),
      pool_(buffers_->pool),
      front_start_(buffers_->front_start),
      runs_(buffers_->runs),
      united_(buffers_->united),
      merge_(buffers_->merge),
      open_(buffers_->open),
      steps_(buffers_->steps),
      growth_(buffers_->growth),
      options_at_(buffers_->options_at),
      sweep_(buffers_->sweep) {
  merge_.set_max_front(options.max_front);
  merge_.set_thin_by_time(options.thin_by_time);
  steps_.clear();
  assert(choices_.keep.empty() || static_cast<int>(choices_.keep.size()) == stages_);
  assert(!choices_.segment.empty());
  least_rest_.assign(stages_ + 1, 0.0);
  for (int i = stages_; i >= 1; --i) {
    double least = std::numeric_limits<double>::infinity();
    for (int v = 0; v < costs_.variant_count(i); ++v) {
      least = std::min(least, costs_.fwd_time(i, v) + costs_.bwd_time(i, v));
    }
    least_rest_[i - 1] = least_rest_[i] + least;
  }
  kept_first_.assign(static_cast<std::size_t>(stages_ + 1), 0);
  for (int i = 1; i <= stages_; ++i) {
    if (choices_.keep.empty()) {
      kept_.push_back(KeptOption{costs_.kept(i, 0), 0});
    } else {
      for (int v : choices_.keep[i - 1]) kept_.push_back(KeptOption{costs_.kept(i, v), v});
    }
    kept_first_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(kept_.size());
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
      if (held + costs_.fwd_peak(j, v) + costs_.end_held(b) > room) continue;
      // dx(b) is held through the backward of every stage before b.
      const std::int64_t end_grad = j < b ? costs_.out(b) : 0;
      if (held + costs_.out(j - 1) + costs_.bwd_peak(j, v) + end_grad > room) continue;
      if (pick < 0 || s < costs_.saved(j, pick)) pick = v;
    }
    if (pick < 0) return false;
    sum += costs_.saved(j, pick) + costs_.out(j);
    if (variants != nullptr) variants->push_back(pick);
  }
  return true;
}

// need(i): the least headroom above fixed_bytes + P that stages i+1..L need, whatever block ended
// at boundary i (a segment may follow a segment as well as a kept stage, so both sides need the
// same). The recursion of solve() with the minimum of max(local, retained + need(next)) in place
// of the time.
void CheckpointDp::compute_need() {
  struct Best {
    Kind kind = kKept;
    int choice = 0;
    int last = 0;
    std::vector<int> variants;
  };
  need_.assign(stages_ + 1, kUnreachable);
  need_[stages_] = costs_.turn();
  std::vector<Best> best_from(stages_);
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
    for (std::int32_t o = kept_first_[static_cast<std::size_t>(i)];
         o < kept_first_[static_cast<std::size_t>(i + 1)]; ++o) {
      const KeptOption& kept = kept_[static_cast<std::size_t>(o)];
      const std::int64_t candidate = std::max(kept.block.local, kept.block.retained + need(i + 1));
      if (candidate < best) {
        best = candidate;
        arg = Best{kKept, kept.variant, i + 1, {}};
      }
    }
    for (std::size_t l = 0; l < choices_.segment.size(); ++l) {
      SegmentScan scan(costs_, i + 1);
      for (int b = i + 1; b <= stages_; ++b) {
        scan.extend(choices_.segment[l][b - 1]);
        if (scan.local_lower_bound() >= best) break;
        const std::int64_t candidate = std::max(scan.local(), scan.retained() + need(b));
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
        std::int64_t low = std::max(bound, costs_.out(i) + need(b));
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
    need_[i] = best;
    best_from[i] = std::move(arg);
  }
  // The least-peak plan's own segments become choices of solve(), so that it fits at
  // min_feasible_bytes() even where no layer would.
  lean_segments_.clear();
  for (int i = 0; i < stages_;) {
    const Best& arg = best_from[i];
    // Every boundary reaches the end while the chain's bytes stay within validate_chain's bounds;
    // where none did, following the plan would never end.
    if (arg.last <= i) {
      throw std::logic_error(fmt::format(
          "monet planner: no plan reaches the end of the chain from stage {} (its bytes sum past "
          "what the planner can count, 2^61; validate_chain should have refused it): check the "
          "chain's byte counts, and report the chain (MONET_LOG=debug prints it)",
          i + 1));
    }
    if (arg.kind == kLean) {
      SegmentScan scan(costs_, i + 1);
      for (int v : arg.variants) scan.extend(v);
      lean_segments_.push_back(
          LeanSegment{i + 1, arg.last, arg.variants, scan.local(), scan.time()});
    }
    i = arg.last;
  }
  lean_by_start_.assign(stages_ + 1, {});
  lean_last_.assign(stages_ + 1, 0);
  for (std::size_t k = 0; k < lean_segments_.size(); ++k) {
    const LeanSegment& lean = lean_segments_[k];
    lean_by_start_[lean.first].push_back(static_cast<int>(k));
    lean_last_[lean.first] = std::max(lean_last_[lean.first], lean.last);
  }
}

std::pair<const DpState*, const DpState*> CheckpointDp::admitted(const DpState* begin,
                                                                 const DpState* end,
                                                                 std::int64_t limit, double time,
                                                                 int boundary) const {
  const DpState* last =
      first_not(begin, end, [&](const DpState& s) { return s.retained <= limit; });
  if (bound_ == std::numeric_limits<double>::infinity()) return {begin, last};
  // Times fall along a front: the states too slow to beat the incumbent are a prefix.
  const double rest = bound_ - time - least_rest_[boundary];
  const DpState* first = first_not(begin, last, [&](const DpState& s) { return s.time >= rest; });
  return {first, last};
}

bool CheckpointDp::add_segment_options(int start, int b, std::int64_t headroom) {
  const std::int64_t input = costs_.out(start - 1);
  const std::int64_t least_retained = sweep_.least_retained(start) - input;
  const double fastest = sweep_.fastest(start);
  const std::int64_t output = costs_.end_held(b);  // dx(b) and the later stages' gradients
  const std::size_t layers = choices_.segment.size();
  Growth* growth = growth_.data() + static_cast<std::size_t>(start) * layers;
  const LayerStep* step = steps_.data() + static_cast<std::size_t>(b);
  options_at_.clear();
  bool open = false;
  std::int64_t least_sum = std::numeric_limits<std::int64_t>::max();
  constexpr double kNever = std::numeric_limits<double>::infinity();
  double gap = kNever;         // the least time of stages start..b - 1 in a layer still growing
  double least_time = kNever;  // the least time of a segment from start that ends at b or later
  for (std::size_t l = 0; l < layers; ++l, step += stages_ + 1) {
    Growth& g = growth[l];
    if (!g.growing) continue;
    gap = std::min(gap, g.time);
    // SegmentScan::extend, from the layer's table.
    g.sum += step->grow;
    // The first stage's forward holds the segment's input already counted in local().
    g.forward = std::max(g.forward, b > start ? step->forward : step->forward - input);
    g.recompute = std::max(g.recompute, g.sum + step->recompute);
    if (b > start) g.inner = std::max(g.inner, g.backward);  // stage b - 1's, now below dx(b)
    g.backward = g.sum + step->backward;
    g.time += step->time;
    // Both tests only grow with b: no longer segment of this layer can do better.
    if (input + g.sum > headroom - least_retained || fastest + g.time + least_rest_[b] >= bound_) {
      g.growing = false;
      continue;
    }
    open = true;
    least_sum = std::min(least_sum, g.sum);
    least_time = std::min(least_time, g.time);
    const std::int64_t local = input + std::max(std::max(g.forward, output + g.recompute),
                                                std::max(g.backward, costs_.out(b) + g.inner));
    options_at_.push_back(SegmentOption{local, g.time, kLayer, static_cast<int>(l)});
  }
  for (int k : lean_by_start_[start]) {
    const LeanSegment& lean = lean_segments_[k];
    if (lean.last == b) options_at_.push_back(SegmentOption{lean.local, lean.time, kLean, k});
    if (lean.last >= b) least_time = std::min(least_time, lean.time);
  }
  // A point that cannot beat the bound with the fastest segment left to its start is of no use.
  const double slow = least_time == kNever ? -kNever : bound_ - least_rest_[b] - least_time;
  sweep_.set_bounds(start, slow, gap);
  if (lean_by_start_[start].empty() && least_sum != std::numeric_limits<std::int64_t>::max()) {
    // Every later segment of this start holds at least its input and least_sum, and every later
    // boundary needs at least least_need_after_[b]: a key beyond this fits nowhere from here on.
    sweep_.set_max_key(
        start, headroom - std::max(input + least_sum, input + least_need_after_[b]) + input);
  }
  // A lean segment that ends here is an option at this boundary: its start takes part.
  open = open || b <= lean_last_[start];
  // Fastest first; an option is worth it only where it needs less room than every faster one.
  // A state takes the fastest option its room admits.
  for (std::size_t k = 1; k < options_at_.size(); ++k) {
    const SegmentOption option = options_at_[k];
    std::size_t j = k;
    for (; j > 0 &&
           (options_at_[j - 1].time > option.time ||
            (options_at_[j - 1].time == option.time && options_at_[j - 1].local > option.local));
         --j) {
      options_at_[j] = options_at_[j - 1];
    }
    options_at_[j] = option;
  }
  const std::int64_t after = input + need(b);
  std::int64_t least_local = std::numeric_limits<std::int64_t>::max();
  SegmentSweep::Option* options = sweep_.options(start);
  int count = 0;
  for (const SegmentOption& option : options_at_) {
    if (option.local >= least_local) continue;
    least_local = option.local;
    // On the key, P + o(start - 1).
    const std::int64_t key_limit = headroom - std::max(option.local, after) + input;
    options[count++] =
        SegmentSweep::Option{key_limit, option.time, static_cast<std::int16_t>(option.choice),
                             static_cast<std::uint8_t>(option.kind)};
  }
  sweep_.set_option_count(start, count);
  return open;
}

void CheckpointDp::make_steps() {
  const std::size_t layers = choices_.segment.size();
  const auto row = static_cast<std::size_t>(stages_ + 1);
  if (steps_.size() == layers * row) return;
  steps_.resize(layers * row);
  for (int j = 1; j <= stages_; ++j) {
    const std::int64_t in = costs_.out(j - 1), out = costs_.out(j);
    for (std::size_t l = 0; l < layers; ++l) {
      const int v = choices_.segment[l][j - 1];
      LayerStep& step = steps_[l * row + static_cast<std::size_t>(j)];
      step = LayerStep{in + out + costs_.fwd_peak(j, v), costs_.saved(j, v) + out,
                       costs_.fwd_peak(j, v), in + costs_.bwd_peak(j, v),
                       2.0 * costs_.fwd_time(j, v) + costs_.bwd_time(j, v)};
    }
  }
}

DpSolution CheckpointDp::solve(std::int64_t budget_bytes, const Plan* incumbent) {
  const std::int64_t headroom = budget_bytes - costs_.fixed_bytes();
  if (headroom < need(0)) {
    DpSolution least = solve(min_feasible_bytes());
    least.feasible = false;
    return least;
  }
  double bound = std::numeric_limits<double>::infinity();
  if (incumbent != nullptr) {
    // Ties go to the incumbent: only a plan faster by more than rounding replaces it.
    const double time = costs_.time(*incumbent);
    bound = time - 1e-12 * time;
  }
  std::optional<DpSolution> found = search(headroom, bound, /*use_rest_bound=*/false);
  if (found) return *std::move(found);
  // need(0) <= headroom guarantees a path, so only the incumbent's bound can have cut them all:
  // nothing is faster than the incumbent.
  if (incumbent == nullptr) {
    throw std::logic_error(
        "monet planner: the checkpoint search found no plan within a budget its least-peak "
        "search said fits (a planner bug): set MONET_PLANNER=dp to plan without variants, and "
        "report the chain (MONET_LOG=debug prints it)");
  }
  return solution_of(*incumbent);
}

std::optional<DpSolution> CheckpointDp::solve_faster_than(std::int64_t budget_bytes,
                                                          double seconds) {
  const std::int64_t headroom = budget_bytes - costs_.fixed_bytes();
  if (headroom < need(0)) return std::nullopt;
  if (!rest_bound_) rest_bound_.emplace(costs_);
  return search(headroom, seconds - 1e-12 * seconds, /*use_rest_bound=*/true);
}

DpSolution CheckpointDp::solution_of(Plan plan) const {
  DpSolution solution;
  solution.feasible = true;
  solution.min_feasible_bytes = min_feasible_bytes();
  solution.peak_bytes = costs_.peak(plan);
  solution.time = costs_.time(plan);
  solution.plan = std::move(plan);
  return solution;
}

std::optional<DpSolution> CheckpointDp::search(std::int64_t headroom, double bound,
                                               bool use_rest_bound) {
  bound_ = bound;
  use_rest_bound_ = use_rest_bound;
  bucketed_ = false;
  pool_.clear();
  pool_.push_back(DpState{0, 0.0, -1, -1, 0, kKept});
  front_start_.assign({0, 1, 1});  // front(0, 0) is the start; nothing ends a segment at 0
  const std::size_t layers = choices_.segment.size();
  growth_.resize(static_cast<std::size_t>(stages_ + 1) * layers);
  open_.clear();
  least_need_after_.assign(static_cast<std::size_t>(stages_ + 2), kUnreachable);
  for (int i = stages_; i >= 1; --i) {
    least_need_after_[i] = std::min(least_need_after_[i + 1], need(i));
  }
  std::size_t most_lean = 0;
  for (const std::vector<int>& leans : lean_by_start_)
    most_lean = std::max(most_lean, leans.size());
  sweep_.reset(stages_, static_cast<int>(layers + most_lean));
  make_steps();
  if (options_.max_front > 0) {
    pool_.reserve(static_cast<std::size_t>(2 * (stages_ + 1) * (options_.max_front + 2)));
  }

  for (int b = 1; b <= stages_; ++b) {
    // Kept stage b follows either side alike: one front of both, then a run per variant.
    FrontMerge::unite(pool_, front_begin(b - 1, 0), front_end(b - 1, 0), front_begin(b - 1, 1),
                      front_end(b - 1, 1), &united_);
    runs_.clear();
    for (std::int32_t o = kept_first_[static_cast<std::size_t>(b - 1)];
         o < kept_first_[static_cast<std::size_t>(b)]; ++o) {
      const KeptOption& kept = kept_[static_cast<std::size_t>(o)];
      const BlockCosts::Block& block = kept.block;
      const std::int64_t limit = headroom - std::max(block.local, block.retained + need(b));
      const DpState* states = united_.data();
      const auto range = admitted(states, states + united_.size(), limit, block.time, b);
      if (range.first < range.second) {
        runs_.push_back(StateRun{static_cast<std::int32_t>(range.first - states),
                                 static_cast<std::int32_t>(range.second - states), block.retained,
                                 block.time, b - 1, static_cast<std::int16_t>(kept.variant),
                                 kKept});
      }
    }
    const std::size_t kept_front = pool_.size();
    merge_.append_merged(united_, runs_, &pool_);
    prune(b, headroom, kept_front);
    if (merge_.thin(kept_front, &pool_)) bucketed_ = true;
    front_start_.push_back(static_cast<std::int32_t>(pool_.size()));

    // A segment starts from either side too: after a kept stage or after another segment.
    if (!united_.empty()) {
      std::fill_n(growth_.data() + static_cast<std::size_t>(b) * layers, layers, Growth{});
      open_.push_back(b);
      sweep_.add_start(b, united_, costs_.out(b - 1),
                       lean_by_start_[static_cast<std::size_t>(b)].empty());
    }
    std::size_t still_open = 0;
    for (int start : open_) {
      if (!sweep_.empty(start) && add_segment_options(start, b, headroom)) {
        open_[still_open++] = start;
      } else {
        sweep_.close(start);
      }
    }
    open_.resize(still_open);
    const std::size_t first = pool_.size();
    sweep_.sweep(bound_ - least_rest_[b], &pool_);
    prune(b, headroom, first);
    if (merge_.thin(first, &pool_)) bucketed_ = true;
    // A cut front makes the answer depend on the bound (it shapes the buckets); solve_faster_than()
    // promises the exact answer or none, and its caller then wants solve()'s.
    if (bucketed_ && use_rest_bound_) return std::nullopt;
    front_start_.push_back(static_cast<std::int32_t>(pool_.size()));
  }

  // Every state at the last boundary fits: it passed need(L) = the turn when it was made.
  std::int32_t best = -1;
  for (int side = 0; side < 2; ++side) {
    const std::int32_t begin = front_begin(stages_, side), end = front_end(stages_, side);
    if (begin != end && (best < 0 || pool_[end - 1].time < pool_[best].time)) best = end - 1;
  }
  if (best < 0) return std::nullopt;
  return solution_of(reconstruct(best, stages_));
}

void CheckpointDp::prune(int boundary, std::int64_t headroom, std::size_t first) {
  if (!use_rest_bound_ || first == pool_.size()) return;
  DpState* const begin = pool_.data() + first;
  const DpState* const end =
      rest_bound_->prune(boundary, headroom, bound_, begin, pool_.data() + pool_.size());
  pool_.resize(first + static_cast<std::size_t>(end - begin));
}

Plan CheckpointDp::reconstruct(std::int32_t index, int boundary) const {
  Plan plan;
  plan.stages.resize(stages_);
  while (boundary > 0) {
    const DpState& s = pool_[index];
    // A segment right after a segment starts a new one rather than continuing it.
    const bool after_segment = s.from > 0 && pool_[s.parent].kind != kKept;
    for (int i = s.from + 1; i <= boundary; ++i) {
      StagePlan& stage = plan.stages[i - 1];
      const bool split = after_segment && i == s.from + 1;
      switch (s.kind) {
        case kKept:
          stage = StagePlan{false, s.choice};
          break;
        case kLayer:
          stage = StagePlan{true, choices_.segment[s.choice][i - 1], split};
          break;
        case kLean:
          stage = StagePlan{true, lean_segments_[s.choice].variants[i - s.from - 1], split};
          break;
      }
    }
    boundary = s.from;
    index = s.parent;
  }
  return plan;
}

namespace {

// A checkpoint-only plan (default variants) as its blocks, with the peak a change to a few adjacent
// blocks would give, found from the changed blocks alone.
class BlockPlan {
 public:
  struct Span {
    int first;  // stages first..last
    int last;
    bool segment;
    std::int64_t local;
    std::int64_t retained;
  };

  // `plan` runs default variants.
  BlockPlan(const BlockCosts& costs, const Plan& plan) : costs_(costs) {
    costs.for_each_block(
        plan, [&](int first, int last, bool segment, const BlockCosts::Block& block) {
          spans_.push_back(Span{first, last, segment, block.local, block.retained});
        });
    update();
  }

  Span kept(int i) const {
    const BlockCosts::Block block = costs_.kept(i, 0);
    return Span{i, i, false, block.local, block.retained};
  }
  Span segment(int first, int last) const { return segment(scan(first, last)); }
  SegmentScan scan(int first, int last) const {
    SegmentScan scan(costs_, first);
    for (int j = first; j <= last; ++j) scan.extend(0);
    return scan;
  }
  static Span segment(const SegmentScan& scan) {
    return Span{scan.first(), scan.last(), true, scan.local(), scan.retained()};
  }

  const std::vector<Span>& spans() const { return spans_; }
  std::int64_t peak() const { return peak_with(0, 0, nullptr, nullptr); }

  // The peak were spans [x, y) replaced by [with, with_end).
  std::int64_t peak_with(std::size_t x, std::size_t y, const Span* with,
                         const Span* with_end) const {
    std::int64_t p = base_[x];
    std::int64_t high = before_[x];
    for (; with != with_end; ++with) {
      high = std::max(high, p + with->local);
      p += with->retained;
    }
    return peak_from(y, p - base_[y], high);
  }

  // What peak_with(x, y, ...) is at least when the replacement retains `shift` more than spans
  // [x, y): the share of the later spans and of the turn, which costs no scan of the new spans.
  std::int64_t later_peak(std::size_t y, std::int64_t shift) const {
    return peak_from(y, shift, 0);
  }

  // Runs of adjacent segments become one segment wherever that does not raise the peak (one
  // segment keeps one input where adjacent ones keep one each), left to right, in one pass: the
  // spans not yet reached all move by the same shift, so the arrays of the plan as it was judge
  // every merge.
  void merge_segments() {
    std::int64_t peak = this->peak();
    std::vector<Span> merged_spans;
    merged_spans.reserve(spans_.size());
    std::int64_t last_base = 0;        // P before merged_spans.back()
    std::int64_t high = 0;             // the highest P + local of the spans before it
    SegmentScan last_scan(costs_, 1);  // merged_spans.back()'s, where it was merged
    bool scanned = false;
    for (std::size_t k = 0; k < spans_.size(); ++k) {
      const Span& right = spans_[k];
      if (!merged_spans.empty() && merged_spans.back().segment && right.segment) {
        const Span& left = merged_spans.back();
        SegmentScan scan = scanned ? last_scan : this->scan(left.first, left.last);
        for (int j = right.first; j <= right.last; ++j) scan.extend(0);
        const Span merged = segment(scan);
        const std::int64_t merged_peak =
            peak_from(k + 1, last_base + merged.retained - base_[k + 1],
                      std::max(high, last_base + merged.local));
        if (merged_peak <= peak) {
          merged_spans.back() = merged;
          peak = merged_peak;
          last_scan = scan;
          scanned = true;
          continue;  // the merged segment may take the next one too
        }
      }
      if (!merged_spans.empty()) {
        high = std::max(high, last_base + merged_spans.back().local);
        last_base += merged_spans.back().retained;
      }
      merged_spans.push_back(right);
      scanned = false;
    }
    spans_ = std::move(merged_spans);
    update();
  }

  void replace(std::size_t x, std::size_t y, const Span* with, const Span* with_end) {
    spans_.erase(spans_.begin() + static_cast<std::ptrdiff_t>(x),
                 spans_.begin() + static_cast<std::ptrdiff_t>(y));
    spans_.insert(spans_.begin() + static_cast<std::ptrdiff_t>(x), with, with_end);
    update();
  }

  Plan plan() const {
    Plan plan;
    plan.stages.resize(static_cast<std::size_t>(costs_.stages()));
    for (std::size_t k = 0; k < spans_.size(); ++k) {
      const Span& span = spans_[k];
      for (int i = span.first; i <= span.last; ++i) {
        const bool split = i == span.first && k > 0 && spans_[k - 1].segment;
        plan.stages[static_cast<std::size_t>(i - 1)] = StagePlan{span.segment, 0, split};
      }
    }
    return plan;
  }

 private:
  // The peak of a plan whose spans from y on are these, each with `shift` more P, and whose
  // highest P + local before them is `high`.
  std::int64_t peak_from(std::size_t y, std::int64_t shift, std::int64_t high) const {
    return costs_.fixed_bytes() +
           std::max({high, after_[y] + shift, base_.back() + shift + costs_.turn()});
  }

  // base_[k]: P before span k; before_[k]: the highest P + local of spans before k; after_[k]: of
  // spans k on. Every term is at least 0, the turn's too.
  void update() {
    const std::size_t n = spans_.size();
    base_.assign(n + 1, 0);
    before_.assign(n + 1, 0);
    after_.assign(n + 1, 0);
    for (std::size_t k = 0; k < n; ++k) {
      base_[k + 1] = base_[k] + spans_[k].retained;
      before_[k + 1] = std::max(before_[k], base_[k] + spans_[k].local);
    }
    for (std::size_t k = n; k-- > 0;) {
      after_[k] = std::max(after_[k + 1], base_[k] + spans_[k].local);
    }
  }

  const BlockCosts& costs_;
  std::vector<Span> spans_;
  std::vector<std::int64_t> base_, before_, after_;
};

}  // namespace

std::optional<Plan> refined_checkpoints(const BlockCosts& costs, std::int64_t budget_bytes,
                                        const Plan& start) {
  using Span = BlockPlan::Span;
  BlockPlan blocks(costs, start);
  std::vector<int> slowest;  // stages by forward time, slowest first
  for (int i = 1; i <= costs.stages(); ++i) slowest.push_back(i);
  std::stable_sort(slowest.begin(), slowest.end(),
                   [&](int x, int y) { return costs.fwd_time(x, 0) > costs.fwd_time(y, 0); });
  for (int round = 0; round < 2; ++round) {
    blocks.merge_segments();
    // Checkpointed stages kept again, slowest forward first, where the plan still fits.
    for (int i : slowest) {
      const std::vector<Span>& spans = blocks.spans();
      std::size_t k = static_cast<std::size_t>(
          std::upper_bound(spans.begin(), spans.end(), i,
                           [](int stage, const Span& span) { return stage < span.first; }) -
          spans.begin() - 1);
      const Span& span = spans[k];
      if (!span.segment) continue;
      // Kept, stage i retains its own bytes and the segment after it its input: where the later
      // blocks have no room for that, the pieces need not be scanned.
      const std::int64_t shift = (span.first < i ? span.retained : 0) + costs.kept(i, 0).retained +
                                 (i < span.last ? costs.out(i) : 0) - span.retained;
      if (blocks.later_peak(k + 1, shift) > budget_bytes) continue;
      Span with[3];
      std::size_t count = 0;
      if (span.first < i) with[count++] = blocks.segment(span.first, i - 1);
      with[count++] = blocks.kept(i);
      if (i < span.last) with[count++] = blocks.segment(i + 1, span.last);
      if (blocks.peak_with(k, k + 1, with, with + count) <= budget_bytes) {
        blocks.replace(k, k + 1, with, with + count);
      }
    }
  }
  if (blocks.peak() > budget_bytes) return std::nullopt;
  return blocks.plan();
}

DpSolution solve_as_dp(CheckpointDp* dp, std::int64_t budget_bytes, const StrategyOutcome& greedy) {
  std::optional<Plan> bound = refined_checkpoints(dp->costs(), budget_bytes, greedy.plan);
  if (!bound && greedy.feasible) bound = greedy.plan;
  return dp->solve(budget_bytes, bound ? &*bound : nullptr);
}

StrategyOutcome plan_dp(const Chain& chain, std::int64_t budget_bytes) {
  const BlockCosts costs(chain, /*default_only=*/true);
  CheckpointDp dp(costs, DpChoices::defaults(costs.stages()), dp_options(costs.stages()));
  DpSolution solution = solve_as_dp(&dp, budget_bytes, plan_greedy(chain, budget_bytes));
  return StrategyOutcome{std::move(solution.plan), solution.feasible, solution.min_feasible_bytes};
}

}  // namespace monet
