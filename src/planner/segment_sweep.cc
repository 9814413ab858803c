#include "planner/segment_sweep.h"

#include <algorithm>
#include <limits>

namespace monet {
namespace {

// Buffers the sweep keeps from one plan to the next hold their own count: resizing one would
// first zero what is about to be written.
template <typename T>
void grow(std::vector<T>* buffer, std::size_t size) {
  if (buffer->size() < size) buffer->resize(std::max(size, 2 * buffer->size()));
}

}  // namespace

void SegmentSweep::reset(int stages, int options) {
  const auto starts = static_cast<std::size_t>(stages + 1);
  points_size_ = 0;
  added_size_ = 0;
  least_retained_.assign(starts, kNone);
  fastest_.assign(starts, std::numeric_limits<double>::infinity());
  max_key_.assign(starts, kNone);
  closed_.assign(starts, 0);
  slow_.assign(starts, -std::numeric_limits<double>::infinity());
  gap_.assign(starts, 0.0);
  droppable_.assign(starts, 0);
  stride_ = static_cast<std::size_t>(options);
  options_.resize(starts * stride_);
  option_count_.assign(starts, 0);
  cursor_.assign(starts, 0);
}

void SegmentSweep::add_start(int start, const std::vector<DpState>& front, std::int64_t input,
                             bool droppable) {
  droppable_[start] = droppable ? 1 : 0;
  // Written field by field (see sweep()).
  grow(&added_, added_size_ + front.size());
  for (const DpState& state : front) {
    Point& point = added_[added_size_++];
    point.key = state.retained + input;
    point.time = state.time;
    point.start = start;
    point.state = state.parent;
    fastest_[start] = std::min(fastest_[start], state.time);
  }
  if (!front.empty()) least_retained_[start] = front.front().retained + input;
}

void SegmentSweep::sweep(double cutoff, std::vector<DpState>* pool) {
  std::fill(cursor_.begin(), cursor_.end(), 0);
  next_least_.assign(least_retained_.size(), kNone);
  next_fastest_.assign(fastest_.size(), std::numeric_limits<double>::infinity());
  grow(&spare_, points_size_ + added_size_);
  Point* kept = spare_.data();
  // The front is written field by field into memory of our own, then appended: a DpState made
  // whole and copied into the pool stalls the walk (the copy reads it back before its parts are
  // stored), which cost a sixth of the walk's time.
  grow(&front_, points_size_ + added_size_);
  DpState* const front = front_.data();
  DpState* out = front;
  double best = cutoff;
  // One walk over the points and the new start's, merged by key, keeping those that may still be
  // of use for the next boundary.
  const Point* x = points_.data();
  const Point* const x_end = x + points_size_;
  const Point* y = added_.data();
  const Point* const y_end = y + added_size_;
  // The least time of the added points walked so far (those with no larger key).
  double rival = std::numeric_limits<double>::infinity();
  while (x != x_end || y != y_end) {
    const bool old = y == y_end || (x != x_end && x->key <= y->key);
    const Point& p = old ? *x : *y;
    if (old) {
      ++x;
    } else {
      ++y;
    }
    const int start = p.start;
    if (closed_[start] || p.key > max_key_[start]) continue;
    if (p.time >= slow_[start]) continue;
    if (!old) {
      rival = std::min(rival, p.time);
    } else if (droppable_[start] && rival <= p.time + gap_[start]) {
      continue;  // a point of the new start beats it from here on
    }
    *kept++ = p;
    if (next_least_[start] == kNone) next_least_[start] = p.key;
    next_fastest_[start] = std::min(next_fastest_[start], p.time);

    const int count = option_count_[start];
    int& cursor = cursor_[start];
    const Option* options = options_.data() + static_cast<std::size_t>(start) * stride_;
    while (cursor < count && p.key > options[cursor].key_limit) ++cursor;
    if (cursor == count) continue;  // no option of its start fits it here
    const Option& option = options[cursor];
    const double time = p.time + option.time;
    // Kept when faster than every state before it (and than the cutoff); with the key of the
    // state before it, it replaces that state, which it beats.
    if (time < best) {
      best = time;
      if (out != front && out[-1].retained == p.key) --out;
      out->retained = p.key;
      out->time = time;
      out->parent = p.state;
      out->from = start - 1;
      out->choice = option.choice;
      out->kind = option.kind;
      ++out;
    }
  }
  pool->insert(pool->end(), front, out);
  points_size_ = static_cast<std::size_t>(kept - spare_.data());
  points_.swap(spare_);
  added_size_ = 0;
  least_retained_.swap(next_least_);
  fastest_.swap(next_fastest_);
}

}  // namespace monet
