#include "predictor/shape_table.h"

#include <algorithm>

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace monet {

std::string format_shape(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::size_t ShapeHash::operator()(const Shape& shape) const {
  std::size_t h = shape.size();
  for (std::int64_t d : shape) {
    h ^= std::hash<std::int64_t>()(d) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return h;
}

int ShapeTable::find(const Shape& shape) const {
  auto it = ids_.find(shape);
  return it == ids_.end() ? -1 : it->second;
}

int ShapeTable::add(const Shape& shape) {
  const int existing = find(shape);
  if (existing >= 0) return existing;
  const int id = size();
  shapes_.push_back(shape);
  ids_.emplace(shape, id);
  monomials_.resize(static_cast<std::size_t>(size()) * basis_->size());
  basis_->evaluate(shape.data(), &monomials_[static_cast<std::size_t>(id) * basis_->size()]);
  for (int d = 0; d < basis_->dims(); ++d) {
    min_[d] = id == 0 ? shape[d] : std::min(min_[d], shape[d]);
    max_[d] = id == 0 ? shape[d] : std::max(max_[d], shape[d]);
  }
  return id;
}

}  // namespace monet
