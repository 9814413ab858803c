#include "allocator/peak_marks.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace monet {

Mark PeakMarks::mark(std::size_t allocated_bytes) {
  if (peaks_.size() == kMaxMarks) {
    peaks_.pop_front();
    ++first_id_;
  }
  peaks_.push_back(allocated_bytes);
  return Mark{first_id_ + peaks_.size() - 1, allocated_bytes};
}

std::size_t PeakMarks::peak_since(const Mark& m) const {
  if (m.id < first_id_ || m.id >= first_id_ + peaks_.size()) {
    throw std::out_of_range("monet: mark " + std::to_string(m.id) +
                            " was cleared or is too old; make a new mark");
  }
  const auto begin = peaks_.begin() + static_cast<std::ptrdiff_t>(m.id - first_id_);
  return *std::max_element(begin, peaks_.end());
}

void PeakMarks::clear() {
  first_id_ += peaks_.size();
  peaks_.clear();
}

}  // namespace monet
