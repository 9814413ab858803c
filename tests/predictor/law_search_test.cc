#include "predictor/law_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace monet {
namespace {

// Fits f at `shapes` and returns the law.
FittedLaw fit(const MonomialBasis& basis, const std::vector<std::vector<std::int64_t>>& shapes,
              const std::function<double(const std::vector<std::int64_t>&)>& f,
              LawSearchOptions options = {}) {
  std::vector<std::vector<double>> monomials(shapes.size(), std::vector<double>(basis.size()));
  std::vector<LawPoint> points;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    basis.evaluate(shapes[i].data(), monomials[i].data());
    points.push_back({shapes[i].data(), monomials[i].data(), f(shapes[i])});
  }
  return LawSearch(&basis).search(points, options);
}

double at(const MonomialBasis& basis, const Law& law, std::vector<std::int64_t> x) {
  std::vector<double> m(basis.size());
  basis.evaluate(x.data(), m.data());
  return law.value(m.data());
}

TEST(LawSearch, FindsAttentionLawFromThreeShapes) {
  MonomialBasis basis(2, 3);
  auto f = [](const std::vector<std::int64_t>& x) {
    const double b = x[0], s = x[1];
    return 4.0 * b * s * 256 + 4.0 * 8 * b * s * s;
  };
  FittedLaw law = fit(basis, {{32, 512}, {4, 64}, {24, 128}}, f);
  EXPECT_EQ(law.law.describe(basis, {"b", "s"}).find("b*s^2") != std::string::npos, true)
      << law.law.describe(basis, {"b", "s"});
  EXPECT_EQ(law.law.size, 2);
  EXPECT_LT(law.loo_error, 1e-6);
  for (std::vector<std::int64_t> x : {std::vector<std::int64_t>{16, 128}, {8, 300}, {64, 1024}}) {
    EXPECT_NEAR(at(basis, law.law, x) / f(x), 1.0, 1e-6);
  }
}

TEST(LawSearch, OneShapeIsProportionalToTheProductOfDimsAndNotValidated) {
  MonomialBasis basis(2, 3);
  FittedLaw law =
      fit(basis, {std::vector<std::int64_t>{8, 100}}, [](const auto&) { return 1600.0; });
  EXPECT_FALSE(law.validated());
  EXPECT_NEAR(at(basis, law.law, {16, 100}), 3200.0, 1e-6);
}

TEST(LawSearch, ZeroStaysZero) {
  MonomialBasis basis(1, 2);
  FittedLaw law = fit(basis, {std::vector<std::int64_t>{8}, {16}}, [](const auto&) { return 0.0; });
  EXPECT_EQ(law.law.size, 0);
  EXPECT_TRUE(law.validated());
}

TEST(LawSearch, PrefersFewerTermsWhenTheyFitAsWell) {
  MonomialBasis basis(2, 3);
  auto f = [](const std::vector<std::int64_t>& x) { return 512.0 * x[0] * x[1]; };
  FittedLaw law = fit(basis, {{32, 512}, {4, 64}, {4, 512}, {32, 64}, {16, 200}}, f);
  EXPECT_EQ(law.law.size, 1);
  EXPECT_EQ(law.law.describe(basis, {"b", "s"}), "512*b*s");
}

TEST(LawSearch, ConstantPlusLinearIsFoundDespiteNoise) {
  MonomialBasis basis(1, 2);
  // A stage time: fixed overhead plus work, with +-2% deterministic jitter.
  int i = 0;
  auto f = [&](const std::vector<std::int64_t>& x) {
    const double jitter = (i++ % 2 == 0) ? 1.02 : 0.98;
    return (1e-4 + 2e-6 * x[0]) * jitter;
  };
  LawSearchOptions options;
  options.noise_floor = 0.02;
  FittedLaw law = fit(basis, {{8}, {256}, {64}, {128}}, f, options);
  EXPECT_NEAR(at(basis, law.law, {200}) / (1e-4 + 2e-6 * 200), 1.0, 0.05);
}

// The index of the monomial named `name` ("b*s^2") in `basis`, with dims named b and s.
int term(const MonomialBasis& basis, const std::string& name) {
  for (int m = 0; m < basis.size(); ++m) {
    if (basis.name(m, {"b", "s"}) == name) return m;
  }
  ADD_FAILURE() << "no monomial " << name;
  return 0;
}

// A law fitted where it is positive may fall to 0 or below elsewhere; the chain holds 0 there,
// which the law did not predict, so the bound is infinite rather than a share of that value.
TEST(FittedLaw, NoBoundWhereTheLawIsNotAboveZero) {
  MonomialBasis basis(2, 3);
  FittedLaw fitted;
  fitted.law.size = 2;
  fitted.law.terms = {term(basis, "b*s"), term(basis, "s^2")};
  fitted.law.coefficients = {2.0, -1.0};
  fitted.loo_error = 0.0;  // validated, and exact where measured
  auto bound_at = [&](std::vector<std::int64_t> x) {
    std::vector<double> m(basis.size());
    basis.evaluate(x.data(), m.data());
    return fitted.relative_bound(m.data(), fitted.law.value(m.data()));
  };
  EXPECT_EQ(bound_at({16, 16}), 0.0);                                     // 256 there
  EXPECT_EQ(bound_at({8, 32}), std::numeric_limits<double>::infinity());  // -512
  EXPECT_EQ(bound_at({8, 16}), std::numeric_limits<double>::infinity());  // 0
}

// An encoder layer's time: per-call overhead, work on its activations and on its attention
// matrices. Three shapes determine the three terms; the search for a law it can validate would
// take two.
TEST(LawSearch, NonnegativeSumFitsEveryTermFromAsManyShapes) {
  MonomialBasis basis(2, 3);
  auto f = [](const std::vector<std::int64_t>& x) {
    const double b = x[0], s = x[1];
    return 5e-4 + 2e-5 * b * s + 1.5e-7 * b * s * s;
  };
  LawSearchOptions options;
  options.allowed_terms = {term(basis, "1"), term(basis, "b*s"), term(basis, "b*s^2")};
  const std::vector<std::vector<std::int64_t>> shapes = {{16, 128}, {2, 16}, {4, 64}};
  const FittedLaw searched = fit(basis, shapes, f, options);
  options.nonnegative_sum = true;
  const FittedLaw all = fit(basis, shapes, f, options);

  EXPECT_EQ(all.law.size, 3) << all.law.describe(basis, {"b", "s"});
  EXPECT_FALSE(all.validated()) << "no shape is left to check three terms on";
  EXPECT_LE(searched.law.size, 2);
  double searched_worst = 0.0;
  for (std::vector<std::int64_t> x : {std::vector<std::int64_t>{8, 32}, {16, 16}, {2, 128}}) {
    EXPECT_NEAR(at(basis, all.law, x) / f(x), 1.0, 1e-6);
    searched_worst = std::max(searched_worst, std::abs(at(basis, searched.law, x) / f(x) - 1.0));
  }
  EXPECT_GT(searched_worst, 0.05) << searched.law.describe(basis, {"b", "s"});
}

// A time that grows less than linearly would need a negative b*s^2 term: that term is dropped,
// and the two left are checked on the third shape.
TEST(LawSearch, NonnegativeSumDropsATermThatWouldBeNegative) {
  MonomialBasis basis(2, 3);
  auto f = [](const std::vector<std::int64_t>& x) {
    const double bs = static_cast<double>(x[0] * x[1]);
    return 1e-4 + 1e-6 * bs - 1e-11 * bs * static_cast<double>(x[1]);
  };
  LawSearchOptions options;
  options.allowed_terms = {term(basis, "1"), term(basis, "b*s"), term(basis, "b*s^2")};
  options.nonnegative_sum = true;
  const FittedLaw law = fit(basis, {{16, 128}, {2, 16}, {4, 64}}, f, options);
  ASSERT_EQ(law.law.size, 2) << law.law.describe(basis, {"b", "s"});
  for (int t = 0; t < law.law.size; ++t) EXPECT_GE(law.law.coefficients[t], 0.0);
  EXPECT_TRUE(law.validated());
  EXPECT_NEAR(at(basis, law.law, {8, 32}) / f({8, 32}), 1.0, 0.02);
}

// With more allowed terms than shapes the non-negative sum has no unique fit: the search for the
// simplest validated law decides, as without the option.
TEST(LawSearch, NonnegativeSumNeedsNoMoreTermsThanShapes) {
  MonomialBasis basis(2, 3);
  auto f = [](const std::vector<std::int64_t>& x) { return 3e-6 * x[0] * x[1]; };
  LawSearchOptions options;
  options.allowed_terms = {term(basis, "1"), term(basis, "b*s"), term(basis, "b*s^2")};
  options.nonnegative_sum = true;
  const FittedLaw law = fit(basis, {{16, 128}, {2, 16}}, f, options);
  EXPECT_EQ(law.law.describe(basis, {"b", "s"}), "3e-06*b*s");
  EXPECT_TRUE(law.validated());
}

}  // namespace
}  // namespace monet
