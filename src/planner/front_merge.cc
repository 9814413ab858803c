#include "planner/front_merge.h"

#include <algorithm>
#include <limits>

namespace monet {
namespace {

// Up to this many runs are merged at once.
constexpr std::size_t kFewRuns = 4;

// The most P buckets: about one candidate per bucket, within this.
constexpr std::size_t kMaxBuckets = 4096;

bool by_retained_then_time(const DpState& x, const DpState& y) {
  return x.retained != y.retained ? x.retained < y.retained : x.time < y.time;
}

// Grows `pool` geometrically, so that appending a front seldom moves it.
void make_room(std::vector<DpState>* pool, std::size_t more) {
  const std::size_t need = pool->size() + more;
  if (pool->capacity() < need) pool->reserve(std::max(need, 2 * pool->capacity()));
}

DpState candidate(const DpState* states, bool indirect, const StateRun& run, std::int32_t k) {
  return DpState{states[k].retained + run.retained,
                 states[k].time + run.time,
                 indirect ? states[k].parent : k,
                 run.from,
                 run.choice,
                 run.kind};
}

// The front of two fronts (each sorted by P, time falling), written from `out` on; returns its
// end. `out` must have room for both. Without branches on the data, which the processor cannot
// predict: each state is written, and kept by moving on past it only when it is faster.
DpState* merge_fronts(const DpState* x, const DpState* x_end, const DpState* y,
                      const DpState* y_end, DpState* out) {
  double best = std::numeric_limits<double>::infinity();
  while (x != x_end && y != y_end) {
    const bool take_y =
        (y->retained < x->retained) | ((y->retained == x->retained) & (y->time < x->time));
    const DpState* const heads[2] = {x, y};
    const DpState* s = heads[take_y];
    y += take_y;
    x += !take_y;
    *out = *s;
    const bool faster = s->time < best;
    out += faster ? 1 : 0;
    best = std::min(best, s->time);
  }
  for (const DpState *rest = x != x_end ? x : y, *rest_end = x != x_end ? x_end : y_end;
       rest != rest_end; ++rest) {
    *out = *rest;
    const bool faster = rest->time < best;
    out += faster ? 1 : 0;
    best = std::min(best, rest->time);
  }
  return out;
}

}  // namespace

bool FrontMerge::append_front(const std::vector<DpState>& source, const std::vector<StateRun>& runs,
                              std::vector<DpState>* pool) {
  return append(source.data(), true, runs, pool);
}

bool FrontMerge::append(const DpState* states, bool indirect, const std::vector<StateRun>& runs,
                        std::vector<DpState>* pool) {
  std::size_t candidates = 0;
  for (const StateRun& run : runs) candidates += static_cast<std::size_t>(run.end - run.begin);
  const std::size_t first = pool->size();
  if (candidates == 0) return true;
  // A few runs are merged at once, taking the least P of their heads; more are merged in pairs,
  // round after round (about log2(runs) steps per candidate), or, when there are many candidates
  // for their buckets, through buckets (two passes over the candidates, one over the buckets).
  if (runs.size() <= kFewRuns) {
    merge_few(states, indirect, runs, candidates, pool);
  } else if (candidates < 2 * bucket_count(candidates)) {
    merge_runs(states, indirect, runs, candidates, pool);
  } else {
    bucket_runs(states, indirect, runs, candidates, pool);
  }
  return !thin(first, pool);
}

void FrontMerge::merge_few(const DpState* states, bool indirect, const std::vector<StateRun>& runs,
                           std::size_t candidates, std::vector<DpState>* pool) {
  // Each run's next candidate, its key cached; a spent run's key is past every other.
  constexpr std::int64_t kSpent = std::numeric_limits<std::int64_t>::max();
  std::int32_t next[kFewRuns];
  std::int64_t head_retained[kFewRuns];
  double head_time[kFewRuns];
  const std::size_t count = runs.size();
  const auto load = [&](std::size_t r) {
    const bool spent = next[r] == runs[r].end;
    const std::int32_t k = spent ? runs[r].begin : next[r];
    head_retained[r] = spent ? kSpent : states[k].retained + runs[r].retained;
    head_time[r] = states[k].time + runs[r].time;
  };
  for (std::size_t r = 0; r < count; ++r) {
    next[r] = runs[r].begin;
    load(r);
  }
  const std::size_t first = pool->size();
  pool->resize(first + candidates);
  DpState* out = pool->data() + first;
  double best = std::numeric_limits<double>::infinity();
  for (std::size_t step = 0; step < candidates; ++step) {
    std::size_t r = 0;
    for (std::size_t other = 1; other < count; ++other) {
      const bool before =
          (head_retained[other] < head_retained[r]) |
          ((head_retained[other] == head_retained[r]) & (head_time[other] < head_time[r]));
      r ^= (r ^ other) & (std::size_t{0} - static_cast<std::size_t>(before));  // no branch
    }
    *out = candidate(states, indirect, runs[r], next[r]);
    const bool faster = out->time < best;
    out += faster ? 1 : 0;
    best = std::min(best, head_time[r]);
    ++next[r];
    load(r);
  }
  pool->resize(static_cast<std::size_t>(out - pool->data()));
}

std::size_t FrontMerge::bucket_count(std::size_t candidates) const {
  const auto limit = static_cast<std::size_t>(max_front_);
  const std::size_t wanted = limit >= 2 ? std::min(candidates, 2 * limit) : candidates;
  std::size_t count = 1;
  while (count < std::min(wanted, kMaxBuckets)) count *= 2;
  return count;
}

void FrontMerge::merge_runs(const DpState* states, bool indirect, const std::vector<StateRun>& runs,
                            std::size_t candidates, std::vector<DpState>* pool) {
  // Each run, extended by its block, is still a front: P rising, time falling. Written out (so
  // that `states` may be the pool itself), then merged in pairs, round after round.
  if (scratch_.size() < candidates) {
    scratch_.resize(candidates);
    spare_.resize(candidates);
  }
  DpState* out = scratch_.data();
  bounds_.clear();
  bounds_.push_back(0);
  for (const StateRun& run : runs) {
    for (std::int32_t k = run.begin; k < run.end; ++k) *out++ = candidate(states, indirect, run, k);
    bounds_.push_back(static_cast<std::size_t>(out - scratch_.data()));
  }
  DpState* from = scratch_.data();
  DpState* to = spare_.data();
  while (bounds_.size() > 2) {
    std::size_t merged = 0;  // fronts written to `to`; their ends replace bounds_[1..]
    std::size_t end = 0;
    for (std::size_t r = 0; r + 1 < bounds_.size(); r += 2) {
      const DpState* x = from + bounds_[r];
      const DpState* x_end = from + bounds_[r + 1];
      if (r + 2 < bounds_.size()) {
        end = static_cast<std::size_t>(
            merge_fronts(x, x_end, x_end, from + bounds_[r + 2], to + end) - to);
      } else {
        end = static_cast<std::size_t>(std::copy(x, x_end, to + end) - to);
      }
      bounds_[++merged] = end;
    }
    bounds_.resize(merged + 1);
    std::swap(from, to);
  }
  pool->insert(pool->end(), from, from + bounds_.back());
}

void FrontMerge::bucket_runs(const DpState* states, bool indirect,
                             const std::vector<StateRun>& runs, std::size_t candidates,
                             std::vector<DpState>* pool) {
  const std::size_t first = pool->size();
  std::int64_t low = std::numeric_limits<std::int64_t>::max();
  std::int64_t high = std::numeric_limits<std::int64_t>::min();
  for (const StateRun& run : runs) {
    low = std::min(low, states[run.begin].retained + run.retained);
    high = std::max(high, states[run.end - 1].retained + run.retained);
  }
  const auto limit = static_cast<std::size_t>(max_front_);
  const std::size_t count = bucket_count(candidates);
  int shift = 0;
  while (static_cast<std::uint64_t>(high - low) >> shift >= count) ++shift;
  constexpr std::int64_t kEmpty = std::numeric_limits<std::int64_t>::max();
  buckets_.assign(count, Bucket{std::numeric_limits<double>::infinity(), kEmpty, 0, 0, 0.0});
  Bucket* buckets = buckets_.data();
  // Each bucket keeps its fastest candidate, the least P among equally fast ones. Branch-free,
  // like merge_fronts().
  bool shared = false;  // whether some bucket holds a slower candidate with less P
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const StateRun& run = runs[r];
    for (std::int32_t k = run.begin; k < run.end; ++k) {
      const std::int64_t retained = states[k].retained + run.retained;
      const double time = states[k].time + run.time;
      Bucket& bucket = buckets[static_cast<std::uint64_t>(retained - low) >> shift];
      const double bucket_time = bucket.time;
      const std::int64_t bucket_retained = bucket.retained;
      const bool faster =
          (time < bucket_time) | ((time == bucket_time) & (retained < bucket_retained));
      shared |= (faster & (bucket_retained < retained)) | (!faster & (retained < bucket_retained));
      bucket.time = faster ? time : bucket_time;
      bucket.retained = faster ? retained : bucket_retained;
      bucket.run = faster ? static_cast<std::int32_t>(r) : bucket.run;
      bucket.index = faster ? k : bucket.index;
    }
  }
  // `states` may be the pool itself: room first, so that it does not move while read.
  // `states` may be the pool itself: room first, so that it does not move while read.
  make_room(pool, count);
  if (!indirect) states = pool->data();
  const auto walk = [&](const DpState* extra, const DpState* extras_end) {
    const std::size_t most = count + static_cast<std::size_t>(extras_end - extra);
    if (walked_.size() < most) walked_.resize(most);
    DpState* out = walked_.data();
    double best = std::numeric_limits<double>::infinity();
    const auto keep = [&](const DpState& s) {
      *out = s;
      const bool faster = s.time < best;
      out += faster ? 1 : 0;
      best = std::min(best, s.time);
    };
    for (std::size_t q = 0; q < count; ++q) {
      Bucket& bucket = buckets[q];
      // This bucket's slower states with less P (none in an empty bucket), sorted by P.
      for (; extra != extras_end && static_cast<std::uint64_t>(extra->retained - low) >> shift == q;
           ++extra) {
        keep(*extra);
      }
      // An empty bucket is infinitely slow: its state, read from run 0, is never kept.
      DpState s =
          candidate(states, indirect, runs[static_cast<std::size_t>(bucket.run)], bucket.index);
      s.retained = bucket.retained;
      s.time = bucket.time;
      keep(s);
      bucket.below = best;  // for now, the least time up to and including this bucket
    }
    pool->insert(pool->end(), walked_.data(), out);
  };
  walk(nullptr, nullptr);
  if (!shared || (limit >= 2 && pool->size() - first > limit)) return;

  // The front may be small enough to keep whole: walk again with the candidates slower than
  // their bucket's fastest but holding less P, and faster than every bucket below.
  double below = std::numeric_limits<double>::infinity();
  for (std::size_t q = 0; q < count; ++q) {
    const double upto = buckets[q].below;
    buckets[q].below = below;
    below = upto;
  }
  if (scratch_.size() < candidates) scratch_.resize(candidates);
  DpState* extra = scratch_.data();
  for (const StateRun& run : runs) {
    for (std::int32_t k = run.begin; k < run.end; ++k) {
      const std::int64_t retained = states[k].retained + run.retained;
      const Bucket& bucket = buckets[static_cast<std::uint64_t>(retained - low) >> shift];
      const double time = states[k].time + run.time;
      *extra = candidate(states, indirect, run, k);
      extra += (retained < bucket.retained) & (time > bucket.time) & (time < bucket.below);
    }
  }
  scratch_.resize(static_cast<std::size_t>(extra - scratch_.data()));
  std::sort(scratch_.begin(), scratch_.end(), by_retained_then_time);
  pool->resize(first);
  make_room(pool, count + scratch_.size());
  if (!indirect) states = pool->data();
  walk(scratch_.data(), scratch_.data() + scratch_.size());
}

void FrontMerge::unite(const std::vector<DpState>& pool, std::int32_t x_begin, std::int32_t x_end,
                       std::int32_t y_begin, std::int32_t y_end, std::vector<DpState>* united) {
  united->resize(static_cast<std::size_t>(x_end - x_begin + y_end - y_begin));
  const DpState* states = pool.data();
  DpState* out = united->data();
  std::int32_t i = x_begin, j = y_begin;
  double best = std::numeric_limits<double>::infinity();
  const auto keep = [&](std::int32_t k) {
    *out = states[k];
    out->parent = k;
    const bool faster = states[k].time < best;
    out += faster ? 1 : 0;
    best = std::min(best, states[k].time);
  };
  while (i < x_end && j < y_end) {  // branch-free, like merge_fronts()
    const bool take_j =
        (states[j].retained < states[i].retained) |
        ((states[j].retained == states[i].retained) & (states[j].time < states[i].time));
    const std::int32_t heads[2] = {i, j};
    const std::int32_t k = heads[take_j];
    j += take_j;
    i += !take_j;
    keep(k);
  }
  for (; i < x_end; ++i) keep(i);
  for (; j < y_end; ++j) keep(j);
  united->resize(static_cast<std::size_t>(out - united->data()));
}

bool FrontMerge::thin(std::size_t first, std::vector<DpState>* pool) const {
  const auto buckets = static_cast<std::size_t>(max_front_);
  const std::size_t size = pool->size() - first;
  if (buckets < 2 || size <= buckets) return false;
  DpState* front = pool->data() + first;
  const std::int64_t low = front[0].retained;
  const std::int64_t width =
      (front[size - 1].retained - low) / static_cast<std::int64_t>(buckets - 1) + 1;
  // Sorted by P with time falling: a bucket's fastest state is its last one. The first state,
  // with the least P, stays too.
  std::size_t kept = 1;
  std::int64_t bucket = (front[1].retained - low) / width;
  for (std::size_t k = 1; k + 1 < size; ++k) {
    const std::int64_t next = (front[k + 1].retained - low) / width;
    front[kept] = front[k];
    kept += next != bucket ? 1 : 0;
    bucket = next;
  }
  front[kept++] = front[size - 1];
  pool->resize(first + kept);
  return true;
}

}  // namespace monet
