#include "planner/rest_bound.h"

#include <algorithm>
#include <limits>

namespace monet {
namespace {

// The bound is compared with sums of the same times taken in another order: this much below its
// value keeps rounding from dropping a state whose plan would tie it.
constexpr double kRounding = 1e-9;

struct Option {
  std::int64_t saves;  // bytes retained fewer than the stage's fastest option
  double costs;        // seconds more than it
};

// z of (b - a) x (c - a): <= 0 when b lies on or above the segment from a to c.
double turn_of(const Option& a, const Option& b, const Option& c) {
  return static_cast<double>(b.saves - a.saves) * (c.costs - a.costs) -
         (b.costs - a.costs) * static_cast<double>(c.saves - a.saves);
}

}  // namespace

RestBound::RestBound(const BlockCosts& costs) : stages_(costs.stages()), turn_(costs.turn()) {
  base_time_.assign(static_cast<std::size_t>(stages_ + 1), 0.0);
  base_kept_.assign(static_cast<std::size_t>(stages_ + 1), 0);
  std::vector<Option> options, hull;
  for (int j = stages_; j >= 1; --j) {
    // The stage's options: kept with each variant, or checkpointed with its fastest variant in a
    // segment, retaining nothing (at best: the first stage of a segment retains its input).
    struct Raw {
      std::int64_t retains;
      double time;
    };
    Raw fastest{0, std::numeric_limits<double>::infinity()};
    double checkpointed = std::numeric_limits<double>::infinity();
    const int count = costs.variant_count(j);
    const auto consider = [&](Raw raw) {
      if (raw.time < fastest.time || (raw.time == fastest.time && raw.retains < fastest.retains)) {
        fastest = raw;
      }
    };
    for (int v = 0; v < count; ++v) {
      consider(
          Raw{costs.out(j - 1) + costs.saved(j, v), costs.fwd_time(j, v) + costs.bwd_time(j, v)});
      checkpointed = std::min(checkpointed, 2.0 * costs.fwd_time(j, v) + costs.bwd_time(j, v));
    }
    consider(Raw{0, checkpointed});
    base_time_[j - 1] = base_time_[j] + fastest.time;
    base_kept_[j - 1] = base_kept_[j] + fastest.retains;

    options.clear();
    for (int v = 0; v < count; ++v) {
      const std::int64_t retains = costs.out(j - 1) + costs.saved(j, v);
      if (retains < fastest.retains) {
        options.push_back(Option{fastest.retains - retains,
                                 costs.fwd_time(j, v) + costs.bwd_time(j, v) - fastest.time});
      }
    }
    if (fastest.retains > 0)
      options.push_back(Option{fastest.retains, checkpointed - fastest.time});
    std::sort(options.begin(), options.end(), [](const Option& x, const Option& y) {
      return x.saves < y.saves || (x.saves == y.saves && x.costs < y.costs);
    });
    // The lower convex hull from the fastest option (0, 0) on: its steps cost more per byte as
    // they go, so taking steps cheapest first across stages takes each stage's in order.
    hull.assign(1, Option{0, 0.0});
    for (const Option& o : options) {
      if (o.saves == hull.back().saves) continue;  // a slower option saving no more
      while (hull.size() >= 2 && turn_of(hull[hull.size() - 2], hull.back(), o) <= 0.0) {
        hull.pop_back();
      }
      hull.push_back(o);
    }
    for (std::size_t k = 1; k < hull.size(); ++k) {
      steps_.push_back(
          Step{hull[k].saves - hull[k - 1].saves, hull[k].costs - hull[k - 1].costs, j});
    }
  }
  std::sort(steps_.begin(), steps_.end(), [](const Step& x, const Step& y) {
    return x.costs * static_cast<double>(y.saves) < y.costs * static_cast<double>(x.saves);
  });
}

double RestBound::least_time(int boundary, std::int64_t room) const {
  std::int64_t short_by = base_kept_[boundary] - room;
  double time = base_time_[boundary];
  for (const Step& step : steps_) {
    if (short_by <= 0) break;
    if (step.stage <= boundary) continue;
    if (step.saves >= short_by) {
      return time + step.costs * (static_cast<double>(short_by) / static_cast<double>(step.saves));
    }
    short_by -= step.saves;
    time += step.costs;
  }
  return short_by <= 0 ? time : std::numeric_limits<double>::infinity();
}

DpState* RestBound::prune(int boundary, std::int64_t headroom, double bound, DpState* begin,
                          DpState* end) const {
  if (bound == std::numeric_limits<double>::infinity()) return end;
  // Along the front P rises, so the bytes short rise too: one walk down the steps serves it all.
  const std::int64_t slack = headroom - turn_ - base_kept_[boundary];
  const Step* step = steps_.data();
  const Step* const steps_end = step + steps_.size();
  std::int64_t saved = 0;  // by the whole steps before `step`
  double spent = base_time_[boundary];
  DpState* out = begin;
  for (DpState* s = begin; s != end; ++s) {
    const std::int64_t short_by = s->retained - slack;
    double least = spent;
    if (short_by > saved) {
      for (;;) {
        while (step != steps_end && step->stage <= boundary) ++step;
        if (step == steps_end || saved + step->saves >= short_by) break;
        saved += step->saves;
        spent += step->costs;
        ++step;
      }
      if (step == steps_end) break;  // this state and every later one cannot fit
      least = spent + step->costs * (static_cast<double>(short_by - saved) /
                                     static_cast<double>(step->saves));
    }
    *out = *s;
    out += s->time + least * (1.0 - kRounding) < bound ? 1 : 0;
  }
  return out;
}

}  // namespace monet
