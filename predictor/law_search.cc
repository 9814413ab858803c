#include "predictor/law_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "predictor/cholesky.h"

namespace monet {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Ridge on the normal equations, relative to their mean diagonal: keeps collinear terms (say
// batch and batch^2 when batch never varied) solvable without changing well-posed fits.
constexpr double kRidge = 1e-12;

struct Candidate {
  std::array<int, kMaxTerms> terms{};
  int size = 0;
  double score = kInf;      // RMS relative leave-one-out error
  double worst_miss = 0.0;  // FittedLaw::worst_miss
  double rss = kInf;        // sum of squared relative residuals at the shapes
  bool negative = false;
  int squares = 0;
  int degree = 0;
};

// The problem in scaled, relative form: a[i][m] = monomial_m(x_i) * k_m / w_i and t_i = y_i / w_i,
// where k_m makes the monomial about 1 over the data (for conditioning) and w_i = max(y_i, floor)
// makes the least squares minimise relative errors, which is what the targets are stated in.
struct Problem {
  int n = 0;
  int f = 0;
  std::vector<double> a;     // n x f
  std::vector<double> t;     // n
  std::vector<double> gram;  // f x f: a^T a
  std::vector<double> at;    // f: a^T t
  std::vector<double> k;     // f: scale of each monomial
  std::vector<double> w;     // n: the weight of each row
  double negligible = 0.0;   // LawSearchOptions::negligible
  double miss_share = kInf;  // LawSearchOptions::miss_share
};

Problem make_problem(const MonomialBasis& basis, const std::vector<LawPoint>& points,
                     const LawSearchOptions& options) {
  Problem pr;
  pr.negligible = options.negligible;
  pr.miss_share = options.miss_share;
  pr.n = static_cast<int>(points.size());
  pr.f = basis.size();
  const int dims = basis.dims();
  double ymax = 0.0;
  for (const LawPoint& p : points) ymax = std::max(ymax, p.y);
  const double floor = std::max(ymax * 1e-3, 1e-300);

  // Scale of each dim: the geometric mean of its smallest and largest value.
  double scale[kMaxDims];
  for (int d = 0; d < dims; ++d) {
    double lo = kInf, hi = 0.0;
    for (const LawPoint& p : points) {
      lo = std::min(lo, static_cast<double>(p.dims[d]));
      hi = std::max(hi, static_cast<double>(p.dims[d]));
    }
    scale[d] = std::sqrt(lo * hi);
  }
  pr.k.resize(pr.f);
  for (int m = 0; m < pr.f; ++m) {
    double k = 1.0;
    for (int d = 0; d < dims; ++d) k /= std::pow(scale[d], basis.exponents(m)[d]);
    pr.k[m] = k;
  }
  pr.a.resize(static_cast<std::size_t>(pr.n) * pr.f);
  pr.t.resize(pr.n);
  pr.w.resize(pr.n);
  for (int i = 0; i < pr.n; ++i) {
    const double w = std::max(points[i].y, floor);
    pr.w[i] = w;
    pr.t[i] = points[i].y / w;
    for (int m = 0; m < pr.f; ++m) pr.a[i * pr.f + m] = points[i].monomials[m] * pr.k[m] / w;
  }
  pr.gram.assign(static_cast<std::size_t>(pr.f) * pr.f, 0.0);
  pr.at.assign(pr.f, 0.0);
  for (int i = 0; i < pr.n; ++i) {
    const double* row = &pr.a[i * pr.f];
    for (int m = 0; m < pr.f; ++m) {
      pr.at[m] += row[m] * pr.t[i];
      for (int q = 0; q < pr.f; ++q) pr.gram[m * pr.f + q] += row[m] * row[q];
    }
  }
  return pr;
}

// Fits the terms of `c` and fills its score. Writes the Cholesky factor and the scaled
// coefficients to `l` and `beta` when given.
void fit(const Problem& pr, Candidate& c, double* l_out, double* beta_out) {
  const int p = c.size;
  double l[kMaxTerms * kMaxTerms] = {};
  double beta[kMaxTerms] = {};
  double trace = 0.0;
  for (int a = 0; a < p; ++a) {
    beta[a] = pr.at[c.terms[a]];
    for (int b = 0; b < p; ++b) l[a * p + b] = pr.gram[c.terms[a] * pr.f + c.terms[b]];
    trace += l[a * p + a];
  }
  const double ridge = kRidge * std::max(trace / p, 1e-300);
  for (int a = 0; a < p; ++a) l[a * p + a] += ridge;
  c.score = kInf;
  c.rss = kInf;
  if (!cholesky(p, l)) return;
  forward_substitute(p, l, beta);
  back_substitute(p, l, beta);
  if (l_out) std::copy(l, l + p * p, l_out);
  if (beta_out) std::copy(beta, beta + p, beta_out);
  c.negative = false;
  for (int a = 0; a < p; ++a) {
    if (!(beta[a] < -1e-9)) continue;
    // A term that takes away no more than `negligible` at any shape changes no plan: a peak
    // measured above what a stage keeps may be 512*batch*H*W - 512, the allocator's rounding.
    for (int i = 0; i < pr.n && !c.negative; ++i) {
      c.negative = -beta[a] * pr.a[i * pr.f + c.terms[a]] * pr.w[i] > pr.negligible;
    }
  }
  double sum = 0.0;
  int checked = 0;
  c.rss = 0.0;
  c.worst_miss = 0.0;
  for (int i = 0; i < pr.n; ++i) {
    double z[kMaxTerms];
    double fitted = 0.0;
    for (int a = 0; a < p; ++a) {
      z[a] = pr.a[i * pr.f + c.terms[a]];
      fitted += z[a] * beta[a];
    }
    c.rss += (pr.t[i] - fitted) * (pr.t[i] - fitted);
    forward_substitute(p, l, z);
    double h = 0.0;
    for (int a = 0; a < p; ++a) h += z[a] * z[a];
    // A shape of leverage 1 alone determines part of the fit (the other shapes leave some terms
    // collinear), so leaving it out checks nothing: it does not count.
    if (1.0 - h < 1e-6) continue;
    const double loo = (pr.t[i] - fitted) / (1.0 - h);
    sum += loo * loo;
    if (std::abs(loo) > pr.miss_share)
      c.worst_miss = std::max(c.worst_miss, std::abs(loo) * pr.w[i]);
    ++checked;
  }
  if (checked == 0) return;
  c.score = std::sqrt(sum / checked);
}

// The law of candidate `c` in raw units, with its inverse Gram for FittedLaw::leverage.
FittedLaw to_law(const Problem& pr, Candidate c) {
  double l[kMaxTerms * kMaxTerms] = {};
  double beta[kMaxTerms] = {};
  fit(pr, c, l, beta);
  FittedLaw out;
  const int p = c.size;
  out.law.size = p;
  for (int a = 0; a < p; ++a) {
    out.law.terms[a] = c.terms[a];
    out.law.coefficients[a] = beta[a] * pr.k[c.terms[a]];
  }
  // Inverse of L L^T, column by column, then into raw monomial units.
  for (int col = 0; col < p; ++col) {
    double e[kMaxTerms] = {};
    e[col] = 1.0;
    forward_substitute(p, l, e);
    back_substitute(p, l, e);
    for (int row = 0; row < p; ++row) {
      out.inverse_gram[row * p + col] = e[row] * pr.k[c.terms[row]] * pr.k[c.terms[col]];
    }
  }
  out.loo_error = c.score;
  out.worst_miss = c.worst_miss;
  return out;
}

// Order of preference among laws that fit equally well: physically plausible (no negative
// term), fewest terms, fewest squared dims, lowest degree, then the better score.
bool simpler(const Candidate& a, const Candidate& b) {
  if (a.negative != b.negative) return !a.negative;
  if (a.size != b.size) return a.size < b.size;
  if (a.squares != b.squares) return a.squares < b.squares;
  if (a.degree != b.degree) return a.degree < b.degree;
  return a.score < b.score;
}

// The non-negative least-squares fit over `terms` (at most kMaxTerms): of every subset's
// least-squares fit with no negative coefficient, the one of least residual (the fewer terms on a
// tie). Nothing when no subset fits.
std::optional<FittedLaw> nonnegative_fit(const Problem& pr, const std::vector<int>& terms) {
  const int f = static_cast<int>(terms.size());
  Candidate best;
  for (unsigned mask = 1; mask < (1u << f); ++mask) {
    Candidate c;
    for (int m = 0; m < f; ++m) {
      if (mask & (1u << m)) c.terms[c.size++] = terms[m];
    }
    fit(pr, c, nullptr, nullptr);
    if (c.negative || !(c.rss < kInf)) continue;
    constexpr double kTie = 1e-12;  // residuals are relative: values about 1 per shape
    if (c.rss < best.rss - kTie || (c.rss <= best.rss + kTie && c.size < best.size)) best = c;
  }
  if (best.size == 0) return std::nullopt;
  return to_law(pr, best);
}

}  // namespace

FittedLaw LawSearch::search(const std::vector<LawPoint>& points,
                            const LawSearchOptions& options) const {
  const MonomialBasis& basis = *basis_;
  const int n = static_cast<int>(points.size());
  FittedLaw out;
  out.points = n;
  out.noise = options.noise;
  if (n == 0) return out;

  double ymax = 0.0;
  for (const LawPoint& p : points) ymax = std::max(ymax, p.y);
  if (ymax <= 0.0) {
    // Zero wherever measured (an in-place stage saves nothing): the law is 0, checked as soon as
    // a second shape agrees.
    if (n >= 2) out.loo_error = 0.0;
    return out;
  }

  // The law proportional to the product of every dim: the prior for one shape, and the fallback.
  int prior = 0;
  for (int m = 0; m < basis.size(); ++m) {
    if (basis.total_degree(m) > basis.total_degree(prior) && basis.squares(m) == 0) prior = m;
  }
  const Problem pr = make_problem(basis, points, options);
  Candidate fallback;
  fallback.size = 1;
  fallback.terms[0] = prior;
  auto not_validated = [&] {
    FittedLaw law = to_law(pr, fallback);
    law.points = n;
    law.noise = options.noise;
    law.loo_error = kInf;
    return law;
  };
  if (n == 1) return not_validated();

  std::vector<int> terms = options.allowed_terms;
  if (terms.empty()) {
    for (int m = 0; m < basis.size(); ++m) terms.push_back(m);
  }
  const int f = static_cast<int>(terms.size());
  if (options.nonnegative_sum && f <= std::min({n, options.max_terms, kMaxTerms})) {
    if (std::optional<FittedLaw> law = nonnegative_fit(pr, terms)) {
      law->points = n;
      law->noise = options.noise;
      return *law;
    }
  }

  // Every subset of at most min(max_terms, n - 1) monomials: one shape is always left to check.
  const int max_terms = std::min({options.max_terms, kMaxTerms, n - 1});
  std::vector<Candidate> candidates;
  Candidate c;
  auto visit = [&](auto&& self, int start, int depth) -> void {
    if (depth > 0) {
      c.size = depth;
      c.squares = 0;
      c.degree = 0;
      for (int t = 0; t < depth; ++t) {
        c.squares += basis.squares(c.terms[t]);
        c.degree += basis.total_degree(c.terms[t]);
      }
      fit(pr, c, nullptr, nullptr);
      if (c.score < kInf) candidates.push_back(c);
    }
    if (depth == max_terms) return;
    for (int m = start; m < f; ++m) {
      c.terms[depth] = terms[m];
      self(self, m + 1, depth + 1);
    }
  };
  visit(visit, 0, 0);

  if (candidates.empty()) return not_validated();
  // Bytes and seconds are sums of non-negative parts (tensors, costs), so only a law with no
  // negative coefficient is chosen: one with a negative term can fit the shapes and still fall far
  // below the truth between them. The best such law's score sets the bar; laws of either sign
  // that score about as well stay as alternatives and widen the bound where they disagree.
  double best = kInf;
  for (const Candidate& cand : candidates) {
    if (!cand.negative) best = std::min(best, cand.score);
  }
  if (best == kInf) return not_validated();
  const double margin = std::max(options.noise, options.noise_floor);
  const double threshold = 1.5 * best + margin;
  std::vector<Candidate> good;
  for (const Candidate& cand : candidates) {
    if (cand.score <= threshold) good.push_back(cand);
  }
  std::sort(good.begin(), good.end(), simpler);

  FittedLaw chosen = to_law(pr, good.front());
  chosen.points = n;
  chosen.noise = options.noise;
  const int alternatives = std::min<int>(options.max_alternatives, good.size() - 1);
  for (int i = 1; i <= alternatives; ++i) chosen.alternatives.push_back(to_law(pr, good[i]).law);

  // An expected law with as many terms as there are shapes goes through every shape, so nothing
  // checks it, while a law of fewer terms may pass its one check by chance (an encoder layer's
  // bytes, c + k1*batch*seq + k2*batch*seq^2, passed for c' + k*seq^2 on three shapes). Where the
  // expected law has no negative term it explains the data as well as the chosen one: where the
  // two disagree, the shapes cannot tell which holds.
  for (const std::vector<int>& expected : options.expected_laws) {
    const int size = static_cast<int>(expected.size());
    if (size != n || size > std::min(options.max_terms, kMaxTerms)) continue;
    Candidate exact;
    exact.size = size;
    std::copy(expected.begin(), expected.end(), exact.terms.begin());
    fit(pr, exact, nullptr, nullptr);
    constexpr double kTie = 1e-12;  // residuals are relative: values about 1 per shape
    if (exact.negative || !(exact.rss <= good.front().rss + kTie)) continue;
    chosen.alternatives.push_back(to_law(pr, exact).law);
  }
  return chosen;
}

}  // namespace monet
