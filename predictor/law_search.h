// Chooses the law of one quantity from its values at the measured shapes: every sum of at most
// max_terms monomials of the basis is fitted by least squares on relative errors, scored by its
// leave-one-out error, and the simplest law with no negative coefficient that scores about as well
// as the best such law wins.
//
// Why not one full quadratic: with three measured shapes a full quadratic in two or three dims
// has more unknowns than data, and fits that merely interpolate extrapolate badly. The laws that
// memory and time follow are sums of few products (batch*seq, batch*seq^2, batch*H*W), so a
// search over few-term laws, validated on shapes each fit did not see, finds them from three
// shapes and extrapolates as the physics does.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "predictor/law.h"
#include "predictor/monomial_basis.h"

namespace monet {

// One measured shape: its dims, its monomial values (MonomialBasis::evaluate) and the value.
struct LawPoint {
  const std::int64_t* dims = nullptr;
  const double* monomials = nullptr;
  double y = 0.0;  // bytes or seconds, >= 0
};

struct LawSearchOptions {
  int max_terms = 3;  // 1..kMaxTerms
  // Relative noise of the values (FittedLaw::noise); laws whose leave-one-out error is within
  // max(noise, noise_floor) (plus half) of the best one are equally good, and the simplest wins.
  double noise = 0.0;
  double noise_floor = 1e-3;
  int max_alternatives = 6;  // equally good laws kept for the error bound
  // A negative term no larger than this at every shape (bytes or seconds) does not count as
  // negative: for bytes the slack under which errors never matter to a plan.
  double negligible = 0.0;
  // When not empty, the only monomials (indices into the basis) a law may use.
  std::vector<int> allowed_terms;
  // Laws the quantity is expected to follow (each a list of distinct monomial indices), such as
  // an encoder layer's bytes c + k1*batch*seq + k2*batch*seq^2. Where one has as many terms as
  // there are shapes (and no more than max_terms), it goes through every shape and nothing is left
  // to check it on; where its coefficients are non-negative it becomes an alternative of the
  // chosen law, so that the bound covers it wherever it disagrees.
  std::vector<std::vector<int>> expected_laws;
  // Fit every allowed term at once, none with a negative coefficient (non-negative least
  // squares), instead of searching for the simplest law, whenever the allowed terms are no more
  // than the shapes and max_terms. For times: each term is a cost that cannot be negative (the
  // per-call overhead, the work on each tensor the stage makes), and a stage's time has as many
  // of them as its tensors have laws: an encoder layer's is c + k1*batch*seq + k2*batch*seq^2,
  // which three shapes determine but cannot validate, while the two-term laws they can validate
  // miss by 20% to 35% (docs/predictor.md). Validated by leave-one-out only where a shape is
  // left to check.
  bool nonnegative_sum = false;
  // A shape that the law, refitted without it, misses by more than this share of its value is one
  // the law does not describe (a workspace a library takes at one shape alone): what it missed it
  // by, in the values' units, is a floor of the law's error bound at every shape
  // (FittedLaw::worst_miss). Infinite: none is.
  double miss_share = std::numeric_limits<double>::infinity();
};

class LawSearch {
 public:
  // `basis` must outlive the search.
  explicit LawSearch(const MonomialBasis* basis) : basis_(basis) {}

  // Fits `points` (distinct shapes). With no point the law is 0 and not validated; with one, the
  // law is proportional to the product of the dims (how activations grow), not validated.
  FittedLaw search(const std::vector<LawPoint>& points, const LawSearchOptions& options) const;

 private:
  const MonomialBasis* basis_;
};

}  // namespace monet
