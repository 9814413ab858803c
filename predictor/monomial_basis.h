// The candidate terms of a law: monomials d1^e1 * ... * dk^ek in the k varying dims of a shape,
// each exponent 0, 1 or 2 and their sum at most a limit. With the dims batch and seq, `batch*seq`
// is a layer's activation and `batch*seq^2` an attention matrix; with batch, H and W, `batch*H*W`
// is a conv's feature map.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace monet {

// The most varying dims a shape may have (batch, sequence, height, width).
inline constexpr int kMaxDims = 4;

class MonomialBasis {
 public:
  MonomialBasis() = default;
  // Every monomial in `dims` dims (1..kMaxDims) with exponents <= 2 and total degree <=
  // `max_total_degree` (1..2*dims), the constant 1 first, then by total degree.
  MonomialBasis(int dims, int max_total_degree);

  int dims() const { return dims_; }
  int size() const { return static_cast<int>(exponents_.size()); }
  const std::array<std::uint8_t, kMaxDims>& exponents(int m) const { return exponents_[m]; }
  int total_degree(int m) const;
  // How many dims appear squared: the physical laws of memory mostly have none, so a law that
  // needs them is chosen only when the data ask for it.
  int squares(int m) const;

  // Writes the value of every monomial at `dims` (dims() values) to out[0, size()).
  void evaluate(const std::int64_t* dims, double* out) const;
  void evaluate(const double* dims, double* out) const;

  // "1", "batch*seq^2" (or "d0*d1^2" without names).
  std::string name(int m, const std::vector<std::string>& dim_names) const;

 private:
  int dims_ = 0;
  std::vector<std::array<std::uint8_t, kMaxDims>> exponents_;
};

}  // namespace monet
