#include "planner/segment_sweep.h"

#include <algorithm>
#include <limits>

namespace monet {

void SegmentSweep::reset(int stages, int options) {
  const auto starts = static_cast<std::size_t>(stages + 1);
  points_.clear();
  added_.clear();
  least_retained_.assign(starts, kNone);
  fastest_.assign(starts, std::numeric_limits<double>::infinity());
  closed_.assign(starts, 0);
  beaten_.clear();
  stride_ = static_cast<std::size_t>(options);
  options_.resize(starts * stride_);
  option_count_.assign(starts, 0);
  cursor_.assign(starts, 0);
  any_beaten_ = false;
}

void SegmentSweep::add_start(int start, const std::vector<DpState>& pool, std::int32_t begin,
                             std::int32_t end, std::int64_t input) {
  for (std::int32_t k = begin; k < end; ++k) {
    added_.push_back(Point{pool[k].retained + input, pool[k].time, start, k});
  }
}

void SegmentSweep::tidy() {
  if (added_.empty() && !any_beaten_) {
    // Nothing to merge or drop; closed starts' points are skipped by the sweep until then.
    return;
  }
  spare_.resize(points_.size() + added_.size());
  Point* out = spare_.data();
  const Point* x = points_.data();
  const Point* const x_end = x + points_.size();
  const Point* y = added_.data();
  const Point* const y_end = y + added_.size();
  const std::uint8_t* beaten = beaten_.empty() ? nullptr : beaten_.data();
  const auto keep = [&](const Point& p) {
    *out = p;
    out += closed_[p.start] ? 0 : 1;
  };
  while (x != x_end || y != y_end) {
    if (y == y_end || (x != x_end && x->key <= y->key)) {
      if (beaten == nullptr || beaten[x - points_.data()] == 0) keep(*x);
      ++x;
    } else {
      keep(*y++);
    }
  }
  spare_.resize(static_cast<std::size_t>(out - spare_.data()));
  points_.swap(spare_);
  added_.clear();
  beaten_.clear();
  any_beaten_ = false;
  std::fill(least_retained_.begin(), least_retained_.end(), kNone);
  std::fill(fastest_.begin(), fastest_.end(), std::numeric_limits<double>::infinity());
  for (const Point& p : points_) {
    // Sorted by key: a start's first point has its least P.
    if (least_retained_[p.start] == kNone) least_retained_[p.start] = p.key;
    fastest_[p.start] = std::min(fastest_[p.start], p.time);
  }
}

void SegmentSweep::sweep(double cutoff, std::vector<DpState>* pool) {
  std::fill(cursor_.begin(), cursor_.end(), 0);
  const std::size_t first = pool->size();
  pool->resize(first + points_.size() + 1);
  DpState* const begin = pool->data() + first;
  DpState* out = begin;
  double best = cutoff;
  for (const Point& p : points_) {
    const int start = p.start;
    const int count = option_count_[start];
    int& cursor = cursor_[start];
    const Option* options = options_.data() + static_cast<std::size_t>(start) * stride_;
    while (cursor < count && p.key > options[cursor].key_limit) ++cursor;
    if (cursor == count) continue;  // no option of its start fits: nor does any later point's
    const Option& option = options[cursor];
    const double time = p.time + option.time;
    // Kept when faster than every state before it (and than the cutoff); with the key of the
    // state before it, it replaces that state, which it beats.
    if (time < best) {
      best = time;
      out -= out != begin && out[-1].retained == p.key ? 1 : 0;
      *out++ = DpState{p.key, time, p.state, start - 1, option.choice, option.kind};
    }
  }
  pool->resize(static_cast<std::size_t>(out - pool->data()));
}

}  // namespace monet
