#include "planner/segment_sweep.h"

#include <algorithm>
#include <limits>
#include <type_traits>

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
  live_begin_ = 0;
  live_end_ = 0;
  starts_.assign(starts, Start{kNone, -std::numeric_limits<double>::infinity(), 0.0, kNone,
                               std::numeric_limits<double>::infinity(), kNone,
                               std::numeric_limits<double>::infinity(), 0, 0, false});
  stride_ = static_cast<std::size_t>(options);
  options_.resize(starts * stride_);
}

void SegmentSweep::add_start(int start, const std::vector<DpState>& front, std::int64_t input,
                             bool droppable) {
  Start& info = starts_[start];
  info.droppable = droppable;
  live_end_ = std::max(live_end_, static_cast<std::size_t>(start) + 1);  // starts only grow
  // Written field by field (see sweep()).
  grow(&added_, added_size_ + front.size());
  for (const DpState& state : front) {
    Point& point = added_[added_size_++];
    point.key = state.retained + input;
    point.time = state.time;
    point.start = start;
    point.state = state.parent;
    info.fastest = std::min(info.fastest, state.time);
  }
  if (!front.empty()) info.least = front.front().retained + input;
}

void SegmentSweep::sweep(double cutoff, std::vector<DpState>* pool) {
  // Only starts from the first with points on can have any.
  Start* const live_begin = starts_.data() + live_begin_;
  Start* const live_end = starts_.data() + live_end_;
  for (Start* info = live_begin; info != live_end; ++info) {
    info->cursor = 0;
    info->next_least = kNone;
    info->next_fastest = std::numeric_limits<double>::infinity();
  }
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
  // of use for the next boundary. The old points between two added ones are walked in a loop of
  // their own: choosing the next point by comparing keys made each step wait on the one before.
  const Point* x = points_.data();
  const Point* const x_end = x + points_size_;
  const Point* y = added_.data();
  const Point* const y_end = y + added_size_;
  // The least time of the added points walked so far (those with no larger key).
  double rival = std::numeric_limits<double>::infinity();
  // Held in locals: the state's one-byte `kind`, written below, might alias any member, which
  // would have them read again for every point.
  Start* const starts = starts_.data();
  const Option* const all_options = options_.data();
  const std::size_t stride = stride_;
  const auto visit = [&](const Point& p, auto old) {
    const int start = p.start;
    Start& info = starts[start];
    if (p.key > info.max_key || p.time >= info.slow) return;
    if constexpr (!decltype(old)::value) {
      rival = std::min(rival, p.time);
    } else if (info.droppable && rival <= p.time + info.gap) {
      return;  // a point of the new start beats it from here on
    }
    *kept++ = p;
    if (info.next_least == kNone) info.next_least = p.key;
    // A start's points are a front: time falls as the key grows, so its last is its fastest.
    info.next_fastest = p.time;

    const int count = info.count;
    int cursor = info.cursor;
    const Option* options = all_options + static_cast<std::size_t>(start) * stride;
    while (cursor < count && p.key > options[cursor].key_limit) ++cursor;
    info.cursor = cursor;
    if (cursor == count) return;  // no option of its start fits it here
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
  };
  for (;;) {
    // Old points come first at equal keys.
    const std::int64_t next = y != y_end ? y->key : std::numeric_limits<std::int64_t>::max();
    for (; x != x_end && x->key <= next; ++x) visit(*x, std::true_type{});
    if (y == y_end) break;
    visit(*y++, std::false_type{});
  }
  pool->insert(pool->end(), front, out);
  points_size_ = static_cast<std::size_t>(kept - spare_.data());
  points_.swap(spare_);
  added_size_ = 0;
  for (Start* info = live_begin; info != live_end; ++info) {
    info->least = info->next_least;
    info->fastest = info->next_fastest;
  }
  // A start with no points gets none again (points come only with the newest start).
  while (live_begin_ < live_end_ && starts_[live_begin_].least == kNone) ++live_begin_;
}

}  // namespace monet
