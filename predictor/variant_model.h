// What the predictor knows of one variant of one stage: running statistics of its six quantities
// at every shape where it was measured, and the law fitted to each quantity.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "monet/chain.h"
#include "predictor/law.h"
#include "predictor/law_search.h"
#include "predictor/quantity.h"
#include "predictor/shape_table.h"

namespace monet {

// Welford's running mean and sum of squared deviations, and the largest value seen.
struct RunningValue {
  double mean = 0.0;
  double m2 = 0.0;
  double max = 0.0;
};

struct ShapeMeasurements {
  std::int64_t count = 0;  // measurements folded in
  std::array<RunningValue, kNumQuantities> values;
};

class VariantModel {
 public:
  // Folds one measurement at shape `shape_id` into the statistics. Values are bytes or seconds,
  // checked by the caller (finite, >= 0). The laws are stale until refit().
  void observe(int shape_id, const std::array<double, kNumQuantities>& values);
  // Replaces the statistics at `shape_id` (a warm start). The laws are stale until refit().
  void restore(int shape_id, const ShapeMeasurements& measurements);

  // Refits every quantity's law from the statistics. `per_sample_term`: the basis monomial of the
  // dim that holds independent samples (batch), which a time may take as a cost per sample; -1
  // when no dim is known to.
  void refit(const ShapeTable& table, const LawSearch& search, const LawSearchOptions& bytes,
             const LawSearchOptions& time, int per_sample_term = -1);

  bool measured(int shape_id) const {
    return shape_id >= 0 && shape_id < static_cast<int>(shapes_.size()) &&
           shapes_[shape_id].count > 0;
  }
  int measured_shapes() const { return measured_shapes_; }
  // Statistics at `shape_id`; only when measured(shape_id).
  const ShapeMeasurements& measurements(int shape_id) const { return shapes_[shape_id]; }
  const FittedLaw& law(Quantity q) const { return laws_[static_cast<int>(q)]; }

  // The value that stands for a shape's measurements: for bytes the largest (what the budget must
  // hold), for times the mean.
  static double representative(Quantity q, const RunningValue& v) {
    return is_bytes(q) ? v.max : v.mean;
  }

  // The costs at a shape: the measured representatives where measured(shape_id), else the laws
  // at `monomials`. Leaves out->name alone.
  void predict(int shape_id, const double* monomials, VariantCosts* out) const;

  // Absolute error bound of quantity q predicted as `y` (bytes or seconds): the standard error of
  // the mean where measured (0 for bytes), else the law's relative bound times y. Infinite when
  // the law is not validated.
  double bound(Quantity q, int shape_id, const double* monomials, double y) const;

 private:
  std::vector<ShapeMeasurements> shapes_;  // by shape id; count 0 where never measured
  int measured_shapes_ = 0;
  std::array<FittedLaw, kNumQuantities> laws_;
};

}  // namespace monet
