// ShapeKey: the cache key of a plan, made from the input dims that vary between batches (batch
// size, sequence length, image size), each rounded up to its bucket.
//
// Buckets are geometric: a dim keeps its `significant_bits` leading bits and is rounded up in the
// rest, so dims up to 2^significant_bits are exact and larger ones land at most
// 2^(1 - significant_bits) above their value (with the default 5 bits: 16 buckets per doubling,
// at most 6.25% above). A key's dims are the bucket's upper bounds: predict the chain at
// dims() and the plan is safe for every shape in the bucket, since memory grows with each dim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace monet {

class ShapeKey {
 public:
  static constexpr int kDefaultSignificantBits = 5;

  ShapeKey() = default;
  // Buckets each dim. Throws std::invalid_argument for a negative dim or significant_bits
  // outside 1..62.
  explicit ShapeKey(const std::vector<std::int64_t>& dims,
                    int significant_bits = kDefaultSignificantBits);

  // The upper bound of `dim`'s bucket.
  static std::int64_t bucket(std::int64_t dim, int significant_bits = kDefaultSignificantBits);

  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::size_t hash() const { return hash_; }
  // "32x128": the bucketed dims.
  std::string to_string() const;

  bool operator==(const ShapeKey& other) const {
    return hash_ == other.hash_ && dims_ == other.dims_;
  }
  bool operator!=(const ShapeKey& other) const { return !(*this == other); }

 private:
  std::vector<std::int64_t> dims_;
  std::size_t hash_ = 0;
};

struct ShapeKeyHash {
  std::size_t operator()(const ShapeKey& key) const { return key.hash(); }
};

}  // namespace monet
