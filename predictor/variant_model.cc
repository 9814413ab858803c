#include "predictor/variant_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace monet {

void VariantModel::observe(int shape_id, const std::array<double, kNumQuantities>& values) {
  if (shape_id >= static_cast<int>(shapes_.size())) shapes_.resize(shape_id + 1);
  ShapeMeasurements& s = shapes_[shape_id];
  if (s.count == 0) ++measured_shapes_;
  ++s.count;
  for (int q = 0; q < kNumQuantities; ++q) {
    RunningValue& v = s.values[q];
    const double delta = values[q] - v.mean;
    v.mean += delta / static_cast<double>(s.count);
    v.m2 += delta * (values[q] - v.mean);
    v.max = s.count == 1 ? values[q] : std::max(v.max, values[q]);
  }
}

void VariantModel::restore(int shape_id, const ShapeMeasurements& measurements) {
  if (shape_id >= static_cast<int>(shapes_.size())) shapes_.resize(shape_id + 1);
  if (shapes_[shape_id].count == 0 && measurements.count > 0) ++measured_shapes_;
  if (shapes_[shape_id].count > 0 && measurements.count == 0) --measured_shapes_;
  shapes_[shape_id] = measurements;
}

void VariantModel::refit(const ShapeTable& table, const LawSearch& search,
                         const LawSearchOptions& bytes, const LawSearchOptions& time,
                         int per_sample_term) {
  std::vector<LawPoint> points;
  points.reserve(measured_shapes_);
  // Times are fitted from the constant and the monomials of this variant's byte laws: a stage's
  // work grows with the tensors it makes, and three noisy times alone cannot tell batch*seq from
  // batch^2. Where those leave a term free (fewer than time.max_terms), a cost per sample joins
  // them: work done once per sample that makes no tensor of its own, such as ATen's native
  // convolution, which loops over the batch, unfolding and multiplying image by image
  // (docs/predictor.md, "A cost per sample"). Each of those terms is a cost, so all of them are
  // fitted at once with none negative (LawSearchOptions::nonnegative_sum) as soon as there are as
  // many shapes as terms.
  std::vector<int> time_terms = {0};
  for (Quantity q : kAllQuantities) {
    points.clear();
    if (!is_bytes(q) && time_terms.size() == 1) {
      for (Quantity b : kAllQuantities) {
        if (!is_bytes(b)) continue;
        const Law& law = laws_[static_cast<int>(b)].law;
        for (int t = 0; t < law.size; ++t) {
          if (std::find(time_terms.begin(), time_terms.end(), law.terms[t]) == time_terms.end()) {
            time_terms.push_back(law.terms[t]);
          }
        }
      }
      if (per_sample_term >= 0 && time_terms.size() > 1 &&
          static_cast<int>(time_terms.size()) < time.max_terms &&
          std::find(time_terms.begin(), time_terms.end(), per_sample_term) == time_terms.end()) {
        time_terms.push_back(per_sample_term);
      }
    }
    // Pooled relative variance of the shapes' means, over shapes measured more than once.
    double relative_variance = 0.0;
    int repeated = 0;
    for (int id = 0; id < static_cast<int>(shapes_.size()); ++id) {
      const ShapeMeasurements& s = shapes_[id];
      if (s.count == 0) continue;
      const RunningValue& v = s.values[static_cast<int>(q)];
      points.push_back({table.shape(id).data(), table.monomials(id), representative(q, v)});
      if (s.count >= 2 && v.mean > 0.0) {
        const double n = static_cast<double>(s.count);
        relative_variance += v.m2 / (n - 1.0) / n / (v.mean * v.mean);
        ++repeated;
      }
    }
    LawSearchOptions options = is_bytes(q) ? bytes : time;
    if (!is_bytes(q) && time_terms.size() > 1) {
      options.allowed_terms = time_terms;
      options.nonnegative_sum = true;
    }
    options.noise = repeated > 0 ? std::sqrt(relative_variance / repeated) : 0.0;
    // A time is never known better than the floor: three shapes that happen to lie on a line
    // leave no residual, yet the shapes between them miss by the machine's noise and more.
    // (Bytes repeat exactly, and an exact law's bound stays 0.)
    if (!is_bytes(q)) options.noise = std::max(options.noise, time.noise_floor);
    laws_[static_cast<int>(q)] = search.search(points, options);
  }
}

void VariantModel::predict(int shape_id, const double* monomials, VariantCosts* out) const {
  if (measured(shape_id)) {
    const ShapeMeasurements& s = shapes_[shape_id];
    for (Quantity q : kAllQuantities) {
      set_quantity(*out, q, representative(q, s.values[static_cast<int>(q)]));
    }
    return;
  }
  for (Quantity q : kAllQuantities) {
    set_quantity(*out, q, laws_[static_cast<int>(q)].law.value(monomials));
  }
}

double VariantModel::bound(Quantity q, int shape_id, const double* monomials, double y) const {
  const FittedLaw& law = laws_[static_cast<int>(q)];
  if (measured(shape_id)) {
    if (is_bytes(q)) return 0.0;
    const ShapeMeasurements& s = shapes_[shape_id];
    const RunningValue& v = s.values[static_cast<int>(q)];
    if (s.count >= 2) {
      const double n = static_cast<double>(s.count);
      return std::sqrt(v.m2 / (n - 1.0) / n);
    }
    return law.noise * y;
  }
  const double relative = law.relative_bound(monomials, y);
  if (relative == std::numeric_limits<double>::infinity()) return relative;
  return relative * std::abs(y);
}

}  // namespace monet
