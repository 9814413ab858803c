#include "planner/shape_key.h"

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>

namespace monet {

std::int64_t ShapeKey::bucket(std::int64_t dim, int significant_bits) {
  if (dim < 0) throw std::invalid_argument(fmt::format("ShapeKey: dim {} is negative", dim));
  if (significant_bits < 1 || significant_bits > 62) {
    throw std::invalid_argument(
        fmt::format("ShapeKey: significant_bits {} is not in 1..62", significant_bits));
  }
  int length = 0;  // bits in dim
  for (std::uint64_t v = static_cast<std::uint64_t>(dim); v != 0; v >>= 1) ++length;
  if (length <= significant_bits) return dim;
  const std::uint64_t step = std::uint64_t{1} << (length - significant_bits);
  const std::uint64_t up = (static_cast<std::uint64_t>(dim) + step - 1) / step * step;
  // Only dims within a bucket of 2^63 can round past the largest int64; keep them as they are.
  return up > static_cast<std::uint64_t>(INT64_MAX) ? dim : static_cast<std::int64_t>(up);
}

ShapeKey::ShapeKey(const std::vector<std::int64_t>& dims, int significant_bits) {
  dims_.reserve(dims.size());
  // FNV-1a over the bucketed dims: a handful of numbers, so simple and fast is enough.
  std::uint64_t h = 14695981039346656037ull;
  for (std::int64_t d : dims) {
    const std::int64_t b = bucket(d, significant_bits);
    dims_.push_back(b);
    h = (h ^ static_cast<std::uint64_t>(b)) * 1099511628211ull;
  }
  hash_ = static_cast<std::size_t>(h ^ dims_.size());
}

std::string ShapeKey::to_string() const {
  if (dims_.empty()) return "scalar";
  std::string out;
  for (std::size_t k = 0; k < dims_.size(); ++k) {
    if (k > 0) out += 'x';
    out += std::to_string(dims_[k]);
  }
  return out;
}

}  // namespace monet
