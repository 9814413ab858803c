// A law: one quantity of one stage (bytes or seconds) as a sum of a few monomials of the shape's
// varying dims, with what is known of its error.
#pragma once

#include <array>
#include <limits>
#include <string>
#include <vector>

#include "predictor/monomial_basis.h"

namespace monet {

// The most terms one law may have. Physical laws of memory and time need few: a constant (weight
// gradients, per-call overhead), batch*seq (activations), batch*seq^2 (attention).
inline constexpr int kMaxTerms = 4;

struct Law {
  int size = 0;                                  // number of terms; 0 is the law y = 0
  std::array<int, kMaxTerms> terms{};            // indices into the MonomialBasis
  std::array<double, kMaxTerms> coefficients{};  // units of y per unit of the monomial

  // y at a shape whose monomial values (MonomialBasis::evaluate) are `monomials`.
  double value(const double* monomials) const {
    double y = 0.0;
    for (int t = 0; t < size; ++t) y += coefficients[t] * monomials[terms[t]];
    return y;
  }

  // "1.2e+03*batch*seq + 4*batch*seq^2".
  std::string describe(const MonomialBasis& basis, const std::vector<std::string>& dim_names) const;
};

// The law chosen for one quantity, with its validation and the other laws that fit the measured
// shapes about as well (they bound the error where the data cannot tell the laws apart).
struct FittedLaw {
  Law law;
  int points = 0;  // distinct shapes it was fitted on
  // Root-mean-square relative error of leave-one-out predictions at the measured shapes: each
  // shape predicted by the law refitted without it. Infinite when the law has as many terms as
  // there are shapes (nothing left to check it on).
  double loo_error = std::numeric_limits<double>::infinity();
  // The relative noise of the measured values (standard error of a shape's mean / the mean),
  // pooled over shapes measured more than once; 0 for exact quantities or single measurements.
  double noise = 0.0;
  // (A^T A)^-1 of the relative least-squares problem, in raw monomial units: the leverage of a
  // shape is z^T M z with z[t] = monomial[terms[t]] / y. Row-major, law.size x law.size.
  std::array<double, kMaxTerms * kMaxTerms> inverse_gram{};
  std::vector<Law> alternatives;
  // The largest leave-one-out miss, in the values' units, at a shape missed by more than
  // LawSearchOptions::miss_share of its value; 0 where none is. relative_bound never bounds the
  // error below it: a law small between such a shape and the others is small there only because
  // it ignores that shape.
  double worst_miss = 0.0;

  bool validated() const { return loo_error < std::numeric_limits<double>::infinity(); }

  // Leverage of a shape (0 at the centre of the data, about 1 at a measured extreme, more beyond).
  double leverage(const double* monomials, double y) const;

  // Relative error bound of the prediction `y` (the law's value) at a shape: twice the
  // leave-one-out error, widened by the leverage as a prediction interval widens, plus the largest
  // relative disagreement of the alternative laws, and at least worst_miss / y. Infinite when the
  // law is not validated, and where y is 0 or below while the law has terms (the chain then holds
  // 0, which no law said).
  double relative_bound(const double* monomials, double y) const;
};

}  // namespace monet
