#include "predictor/monomial_basis.h"

#include <algorithm>
#include <stdexcept>

#include "fmt/format.h"

namespace monet {

MonomialBasis::MonomialBasis(int dims, int max_total_degree) : dims_(dims) {
  if (dims < 1 || dims > kMaxDims) {
    throw std::invalid_argument(fmt::format(
        "monet predictor: a shape has {} varying dims; between 1 and {} are supported: pass only "
        "the dims that vary between iterations (batch, sequence, height, width)",
        dims, kMaxDims));
  }
  std::array<std::uint8_t, kMaxDims> e{};
  // Counts in base 3 over the dims; keeps the monomials within the degree limit.
  int count = 1;
  for (int d = 0; d < dims; ++d) count *= 3;
  for (int code = 0; code < count; ++code) {
    int rest = code;
    int degree = 0;
    for (int d = 0; d < dims; ++d) {
      e[d] = static_cast<std::uint8_t>(rest % 3);
      degree += e[d];
      rest /= 3;
    }
    if (degree <= max_total_degree) exponents_.push_back(e);
  }
  std::stable_sort(exponents_.begin(), exponents_.end(), [](const auto& a, const auto& b) {
    int da = 0, db = 0;
    for (int d = 0; d < kMaxDims; ++d) da += a[d], db += b[d];
    return da < db;
  });
}

int MonomialBasis::total_degree(int m) const {
  int degree = 0;
  for (int d = 0; d < dims_; ++d) degree += exponents_[m][d];
  return degree;
}

int MonomialBasis::squares(int m) const {
  int n = 0;
  for (int d = 0; d < dims_; ++d) n += exponents_[m][d] == 2;
  return n;
}

namespace {

template <typename T>
void evaluate_at(int dims, const std::vector<std::array<std::uint8_t, kMaxDims>>& exponents,
                 const T* x, double* out) {
  double power[kMaxDims][3];
  for (int d = 0; d < dims; ++d) {
    const double v = static_cast<double>(x[d]);
    power[d][0] = 1.0;
    power[d][1] = v;
    power[d][2] = v * v;
  }
  const int n = static_cast<int>(exponents.size());
  for (int m = 0; m < n; ++m) {
    double value = 1.0;
    for (int d = 0; d < dims; ++d) value *= power[d][exponents[m][d]];
    out[m] = value;
  }
}

}  // namespace

void MonomialBasis::evaluate(const std::int64_t* dims, double* out) const {
  evaluate_at(dims_, exponents_, dims, out);
}

void MonomialBasis::evaluate(const double* dims, double* out) const {
  evaluate_at(dims_, exponents_, dims, out);
}

std::string MonomialBasis::name(int m, const std::vector<std::string>& dim_names) const {
  std::string out;
  for (int d = 0; d < dims_; ++d) {
    const int e = exponents_[m][d];
    if (e == 0) continue;
    if (!out.empty()) out += '*';
    out += d < static_cast<int>(dim_names.size()) ? dim_names[d] : fmt::format("d{}", d);
    if (e == 2) out += "^2";
  }
  return out.empty() ? "1" : out;
}

}  // namespace monet
