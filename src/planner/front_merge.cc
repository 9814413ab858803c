#include "planner/front_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace monet {
namespace {

// Up to this many runs are merged at once.
constexpr std::size_t kFewRuns = 4;

// State k of `states` (its parent holding its pool index) extended by the run's block.
DpState candidate(const DpState* states, const StateRun& run, std::int32_t k) {
  return DpState{states[k].retained + run.retained,
                 states[k].time + run.time,
                 states[k].parent,
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
    const DpState* s = take_y ? y : x;  // a select: an array of the two heads went through memory
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

// Compacts front[0, size) to its first and last states and, between them, one state per bucket:
// the first of each (first_of_bucket) or the last. bucket(k) reads front[k]; states are read
// before anything is written over them.
template <typename Bucket>
std::size_t keep_bucket_ends(DpState* front, std::size_t size, Bucket bucket,
                             bool first_of_bucket) {
  std::size_t kept = 1;
  auto previous = bucket(0);
  auto current = bucket(1);
  for (std::size_t k = 1; k + 1 < size; ++k) {
    const auto next = bucket(k + 1);
    front[kept] = front[k];
    kept += (first_of_bucket ? current != previous : current != next) ? 1 : 0;
    previous = current;
    current = next;
  }
  front[kept++] = front[size - 1];
  return kept;
}

// The front of N runs (N <= kFewRuns) merged at once: each step takes the run whose next
// candidate has the least P, written from `out` on; returns its end. Every head is kept in a
// register of its own and chosen by selects, not by index: heads in an array indexed by the run
// chosen went through memory, and each step waited for the store of the one before.
template <std::size_t N>
DpState* merge_heads(const DpState* states, const StateRun* runs, std::size_t candidates,
                     DpState* out) {
  // A spent run's key is past every other.
  constexpr std::int64_t kSpent = std::numeric_limits<std::int64_t>::max();
  std::int32_t next[N];
  std::int64_t key[N];
  double time[N];
  // Run r's head when its next candidate is state k (a spent run reads its first state).
  const auto head = [&](std::size_t r, std::int32_t k, std::int64_t* head_key, double* head_time) {
    const bool spent = k == runs[r].end;
    const std::int32_t read = spent ? runs[r].begin : k;
    *head_key = spent ? kSpent : states[read].retained + runs[r].retained;
    *head_time = states[read].time + runs[r].time;
  };
  for (std::size_t r = 0; r < N; ++r) {
    next[r] = runs[r].begin;
    head(r, next[r], &key[r], &time[r]);
  }
  double best = std::numeric_limits<double>::infinity();
  for (std::size_t step = 0; step < candidates; ++step) {
    std::size_t r = 0;
    std::int64_t r_key = key[0];
    double r_time = time[0];
    std::int32_t k = next[0];
    for (std::size_t o = 1; o < N; ++o) {
      const bool before = (key[o] < r_key) | ((key[o] == r_key) & (time[o] < r_time));
      r = before ? o : r;
      r_key = before ? key[o] : r_key;
      r_time = before ? time[o] : r_time;
      k = before ? next[o] : k;
    }
    const StateRun& run = runs[r];
    out->retained = r_key;
    out->time = r_time;
    out->parent = states[k].parent;
    out->from = run.from;
    out->choice = run.choice;
    out->kind = run.kind;
    out += r_time < best ? 1 : 0;
    best = std::min(best, r_time);
    std::int64_t new_key = 0;
    double new_time = 0.0;
    head(r, k + 1, &new_key, &new_time);
    for (std::size_t o = 0; o < N; ++o) {
      const bool moved = o == r;
      next[o] = moved ? k + 1 : next[o];
      key[o] = moved ? new_key : key[o];
      time[o] = moved ? new_time : time[o];
    }
  }
  return out;
}

}  // namespace

bool FrontMerge::append_front(const std::vector<DpState>& source, const std::vector<StateRun>& runs,
                              std::vector<DpState>* pool) {
  const std::size_t first = pool->size();
  append_merged(source, runs, pool);
  return !thin(first, pool);
}

void FrontMerge::append_merged(const std::vector<DpState>& source,
                               const std::vector<StateRun>& runs, std::vector<DpState>* pool) {
  std::size_t candidates = 0;
  for (const StateRun& run : runs) candidates += static_cast<std::size_t>(run.end - run.begin);
  if (candidates == 0) return;
  if (runs.size() <= kFewRuns) {
    merge_few(source.data(), runs, candidates, pool);
  } else {
    merge_pairs(source.data(), runs, candidates, pool);
  }
}

void FrontMerge::merge_few(const DpState* states, const std::vector<StateRun>& runs,
                           std::size_t candidates, std::vector<DpState>* pool) {
  if (scratch_.size() < candidates) scratch_.resize(candidates);
  DpState* const begin = scratch_.data();
  DpState* end = begin;
  switch (runs.size()) {
    case 1:
      end = merge_heads<1>(states, runs.data(), candidates, begin);
      break;
    case 2:
      end = merge_heads<2>(states, runs.data(), candidates, begin);
      break;
    case 3:
      end = merge_heads<3>(states, runs.data(), candidates, begin);
      break;
    default:
      end = merge_heads<kFewRuns>(states, runs.data(), candidates, begin);
      break;
  }
  pool->insert(pool->end(), begin, end);
}

void FrontMerge::merge_pairs(const DpState* states, const std::vector<StateRun>& runs,
                             std::size_t candidates, std::vector<DpState>* pool) {
  // Each run, extended by its block, is still a front: P rising, time falling. Written out, then
  // merged in pairs, round after round: about log2(runs) steps per candidate.
  if (scratch_.size() < candidates) scratch_.resize(candidates);
  if (spare_.size() < candidates) spare_.resize(candidates);
  DpState* out = scratch_.data();
  bounds_.clear();
  bounds_.push_back(0);
  for (const StateRun& run : runs) {
    for (std::int32_t k = run.begin; k < run.end; ++k) *out++ = candidate(states, run, k);
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
    const std::int32_t k = take_j ? j : i;  // as in merge_fronts()
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
  std::size_t kept = 0;
  if (thin_by_time_) {
    // Time falls along the front: bucket k holds the states between k and k + 1 widths below the
    // slowest, and its first state is its leanest.
    const double slowest = front[0].time;
    const double width = (slowest - front[size - 1].time) / static_cast<double>(buckets - 1);
    if (!(width > 0.0)) return false;
    // Times are at most `slowest`: truncation is the floor. A product rather than a quotient,
    // which would take most of the pass.
    const double per_width = 1.0 / width;
    kept = keep_bucket_ends(
        front, size,
        [&](std::size_t k) {
          return static_cast<std::int64_t>((slowest - front[k].time) * per_width);
        },
        /*first_of_bucket=*/true);
  } else {
    // P rises along the front: a bucket's fastest state is its last one.
    const std::int64_t low = front[0].retained;
    const std::int64_t width =
        (front[size - 1].retained - low) / static_cast<std::int64_t>(buckets - 1) + 1;
    kept = keep_bucket_ends(
        front, size, [&](std::size_t k) { return (front[k].retained - low) / width; },
        /*first_of_bucket=*/false);
  }
  pool->resize(first + kept);
  return true;
}

}  // namespace monet
