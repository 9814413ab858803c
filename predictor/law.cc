#include "predictor/law.h"

#include <algorithm>
#include <cmath>

#include "fmt/format.h"

namespace monet {

std::string Law::describe(const MonomialBasis& basis,
                          const std::vector<std::string>& dim_names) const {
  if (size == 0) return "0";
  std::string out;
  for (int t = 0; t < size; ++t) {
    if (t > 0) out += " + ";
    const std::string term = basis.name(terms[t], dim_names);
    out += term == "1" ? fmt::format("{:.4g}", coefficients[t])
                       : fmt::format("{:.4g}*{}", coefficients[t], term);
  }
  return out;
}

double FittedLaw::leverage(const double* monomials, double y) const {
  if (law.size == 0 || !(y > 0.0)) return 0.0;
  double z[kMaxTerms];
  for (int t = 0; t < law.size; ++t) z[t] = monomials[law.terms[t]] / y;
  double h = 0.0;
  for (int a = 0; a < law.size; ++a) {
    for (int b = 0; b < law.size; ++b) h += z[a] * inverse_gram[a * law.size + b] * z[b];
  }
  return std::max(h, 0.0);
}

double FittedLaw::relative_bound(const double* monomials, double y) const {
  if (!validated()) return std::numeric_limits<double>::infinity();
  if (law.size == 0) return 0.0;
  // Bytes and seconds are never negative: a law that falls to 0 or below here has left the shapes
  // it describes, and the 0 the chain then holds is no prediction at all.
  if (!(y > 0.0)) return std::numeric_limits<double>::infinity();
  const double scale = std::max(std::abs(y), 1e-300);
  const double spread = std::max(loo_error, noise);
  double bound = 2.0 * spread * std::sqrt(1.0 + leverage(monomials, y));
  double disagreement = 0.0;
  for (const Law& other : alternatives) {
    disagreement = std::max(disagreement, std::abs(other.value(monomials) - y) / scale);
  }
  return std::max(bound + disagreement, worst_miss / scale);
}

}  // namespace monet
