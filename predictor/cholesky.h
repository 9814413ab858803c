// Small dense Cholesky solves for the predictor's least-squares problems (at most a few dozen
// unknowns, row-major, no allocation).
#pragma once

#include <cmath>

namespace monet {

// In-place Cholesky of the p x p row-major matrix `a` (lower triangle used). False if not
// positive definite.
inline bool cholesky(int p, double* a) {
  for (int j = 0; j < p; ++j) {
    double d = a[j * p + j];
    for (int k = 0; k < j; ++k) d -= a[j * p + k] * a[j * p + k];
    if (!(d > 0.0)) return false;
    d = std::sqrt(d);
    a[j * p + j] = d;
    for (int i = j + 1; i < p; ++i) {
      double s = a[i * p + j];
      for (int k = 0; k < j; ++k) s -= a[i * p + k] * a[j * p + k];
      a[i * p + j] = s / d;
    }
  }
  return true;
}

// Solves L z = b (forward substitution) in place.
inline void forward_substitute(int p, const double* l, double* b) {
  for (int i = 0; i < p; ++i) {
    double s = b[i];
    for (int k = 0; k < i; ++k) s -= l[i * p + k] * b[k];
    b[i] = s / l[i * p + i];
  }
}

// Solves L^T x = b (back substitution) in place.
inline void back_substitute(int p, const double* l, double* b) {
  for (int i = p - 1; i >= 0; --i) {
    double s = b[i];
    for (int k = i + 1; k < p; ++k) s -= l[k * p + i] * b[k];
    b[i] = s / l[i * p + i];
  }
}

}  // namespace monet
