#include "exact_search.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <vector>

#include "planner/block_costs.h"
#include "planner/simulate.h"

namespace monet::testing {
namespace {

constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max() / 4;

Optimum finish(const Chain& chain, bool feasible, Plan plan) {
  Optimum optimum;
  optimum.feasible = feasible;
  if (feasible) {
    optimum.time = simulate(chain, plan).time;
    optimum.plan = std::move(plan);
  }
  return optimum;
}

// One variant assignment of a segment, its local() and time. The variants are packed 4 bits a
// stage, first stage lowest: there are millions of assignments, and a vector each made the
// search slow under the sanitizers.
struct SegmentPoint {
  std::int64_t local;
  double time;
  std::uint64_t variants;
};

constexpr int kMaxStages = 16;  // 4 bits a stage in 64 bits
constexpr int kMaxVariants = 16;

class BlockSearch {
 public:
  BlockSearch(const Chain& chain, std::int64_t budget_bytes, bool default_only)
      : costs_(chain, default_only),
        stages_(costs_.stages()),
        headroom_(budget_bytes - chain.fixed_bytes) {
    assert(stages_ <= kMaxStages);
    fronts_.assign(stages_ + 2, std::vector<std::vector<SegmentPoint>>(stages_ + 2));
    for (int a = 1; a <= stages_; ++a) enumerate(a, SegmentScan(costs_, a), 0);
    for (auto& row : fronts_) {
      for (auto& points : row) keep_pareto(&points);
    }
    min_rest_.assign(stages_ + 1, 0.0);
    for (int i = stages_ - 1; i >= 0; --i) {
      double fastest = std::numeric_limits<double>::infinity();
      for (int v = 0; v < costs_.variant_count(i + 1); ++v) {
        fastest = std::min(fastest, costs_.kept(i + 1, v).time);
      }
      min_rest_[i] = min_rest_[i + 1] + fastest;
    }
    compute_need();
    plan_.stages.resize(stages_);
  }

  std::int64_t least_budget() const { return costs_.fixed_bytes() + need_[0][0]; }

  Optimum run(const Chain& chain) {
    if (need_[0][0] > headroom_) return Optimum{};
    search(0, false, 0, 0.0);
    return finish(chain, best_time_ < std::numeric_limits<double>::infinity(), best_plan_);
  }

 private:
  // Every assignment of segments a..b for b >= a, one stage at a time.
  void enumerate(int a, const SegmentScan& scan, std::uint64_t variants) {
    const int j = scan.last() + 1;
    if (j > stages_) return;
    assert(costs_.variant_count(j) <= kMaxVariants);
    for (int v = 0; v < costs_.variant_count(j); ++v) {
      SegmentScan next = scan;
      next.extend(v);
      const std::uint64_t with = variants | static_cast<std::uint64_t>(v) << (4 * (j - a));
      fronts_[a][j].push_back(SegmentPoint{next.local(), next.time(), with});
      enumerate(a, next, with);
    }
  }

  // Fastest first; a point stays only if it needs less memory than every faster one.
  static void keep_pareto(std::vector<SegmentPoint>* points) {
    std::sort(points->begin(), points->end(), [](const SegmentPoint& x, const SegmentPoint& y) {
      return x.time != y.time ? x.time < y.time : x.local < y.local;
    });
    std::vector<SegmentPoint> kept;
    for (const SegmentPoint& p : *points) {
      if (kept.empty() || p.local < kept.back().local) kept.push_back(p);
    }
    *points = std::move(kept);
  }

  void compute_need() {
    need_.assign(stages_ + 1, {kNever, kNever});
    need_[stages_] = {costs_.turn(), costs_.turn()};
    for (int i = stages_ - 1; i >= 0; --i) {
      std::int64_t best = kNever;
      for (int v = 0; v < costs_.variant_count(i + 1); ++v) {
        const BlockCosts::Block k = costs_.kept(i + 1, v);
        best = std::min(best, std::max(k.local, k.retained + need_[i + 1][0]));
      }
      for (int b = i + 1; b <= stages_; ++b) {
        const std::int64_t least_local = fronts_[i + 1][b].back().local;
        best = std::min(best, std::max(least_local, costs_.out(i) + need_[b][1]));
      }
      need_[i] = {best, best};  // a segment may follow a segment: both sides need the same
    }
  }

  void search(int i, bool after_segment, std::int64_t retained, double time) {
    if (time + min_rest_[i] >= best_time_) return;
    if (retained + need_[i][after_segment ? 1 : 0] > headroom_) return;
    if (i == stages_) {
      best_time_ = time;
      best_plan_ = plan_;
      return;
    }
    for (int v = 0; v < costs_.variant_count(i + 1); ++v) {
      const BlockCosts::Block k = costs_.kept(i + 1, v);
      if (retained + k.local > headroom_) continue;
      plan_.stages[i] = StagePlan{false, v};
      search(i + 1, false, retained + k.retained, time + k.time);
    }
    for (int b = i + 1; b <= stages_; ++b) {
      for (const SegmentPoint& p : fronts_[i + 1][b]) {
        if (retained + p.local > headroom_) continue;
        for (int j = i + 1; j <= b; ++j)
          plan_.stages[j - 1] =
              StagePlan{true, static_cast<int>(p.variants >> (4 * (j - i - 1)) & 15),
                        j == i + 1 && after_segment};
        search(b, true, retained + costs_.out(i), time + p.time);
        break;  // the fastest assignment that fits is the only one worth trying
      }
    }
  }

  BlockCosts costs_;
  int stages_;
  std::int64_t headroom_;
  std::vector<std::vector<std::vector<SegmentPoint>>> fronts_;  // [a][b]
  std::vector<double> min_rest_;
  std::vector<std::vector<std::int64_t>> need_;  // [boundary][after a segment]
  Plan plan_;
  Plan best_plan_;
  double best_time_ = std::numeric_limits<double>::infinity();
};

}  // namespace

Optimum brute_force_optimum(const Chain& chain, std::int64_t budget_bytes, bool default_only) {
  const int stages = static_cast<int>(chain.stages.size());
  // 3 * variants per stage: kept, checkpointed, or checkpointed starting a new segment (which
  // differs from checkpointed only after a checkpointed stage); then the variant.
  std::vector<int> choices(stages);
  for (int i = 0; i < stages; ++i) {
    choices[i] =
        (i == 0 ? 2 : 3) * (default_only ? 1 : static_cast<int>(chain.stages[i].variants.size()));
  }
  std::vector<int> digit(stages, 0);
  Plan plan;
  plan.stages.resize(stages);
  Plan best;
  double best_time = std::numeric_limits<double>::infinity();
  while (true) {
    for (int i = 0; i < stages; ++i) {
      const int kinds = i == 0 ? 2 : 3;
      const int kind = digit[i] % kinds;
      plan.stages[i] = StagePlan{kind >= 1, digit[i] / kinds, kind == 2};
    }
    const Simulation sim = simulate(chain, plan);
    if (sim.peak_bytes <= budget_bytes && sim.time < best_time) {
      best_time = sim.time;
      best = plan;
    }
    int k = 0;
    while (k < stages && ++digit[k] == choices[k]) digit[k++] = 0;
    if (k == stages) break;
  }
  return finish(chain, best_time < std::numeric_limits<double>::infinity(), best);
}

Optimum block_search_optimum(const Chain& chain, std::int64_t budget_bytes, bool default_only) {
  return BlockSearch(chain, budget_bytes, default_only).run(chain);
}

std::int64_t exact_least_budget(const Chain& chain, bool default_only) {
  return BlockSearch(chain, 0, default_only).least_budget();
}

}  // namespace monet::testing
