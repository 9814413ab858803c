// The distinct shapes that were measured, each with a small integer id, its dims and the values of
// the basis monomials at it (computed once, used by every fit).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "predictor/monomial_basis.h"

namespace monet {

// The dims of an input that vary between iterations, e.g. {batch, seq} or {batch, H, W}. Each > 0.
using Shape = std::vector<std::int64_t>;

// "[8, 128]".
std::string format_shape(const Shape& shape);

struct ShapeHash {
  std::size_t operator()(const Shape& shape) const;
};

class ShapeTable {
 public:
  // `basis` must outlive the table.
  explicit ShapeTable(const MonomialBasis* basis) : basis_(basis) {}

  int size() const { return static_cast<int>(shapes_.size()); }
  // The id of `shape`, or -1 when it was never added.
  int find(const Shape& shape) const;
  // The id of `shape`, adding it when new. `shape` must have basis().dims() dims.
  int add(const Shape& shape);

  const Shape& shape(int id) const { return shapes_[id]; }
  const double* monomials(int id) const { return &monomials_[id * basis_->size()]; }
  const MonomialBasis& basis() const { return *basis_; }

  // The smallest and largest value of dim `d` over the table (0 when empty).
  std::int64_t min_dim(int d) const { return min_[d]; }
  std::int64_t max_dim(int d) const { return max_[d]; }

 private:
  const MonomialBasis* basis_;
  std::vector<Shape> shapes_;
  std::vector<double> monomials_;  // size() x basis().size()
  std::unordered_map<Shape, int, ShapeHash> ids_;
  std::int64_t min_[kMaxDims] = {};
  std::int64_t max_[kMaxDims] = {};
};

}  // namespace monet
