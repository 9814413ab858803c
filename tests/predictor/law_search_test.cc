#include "predictor/law_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
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

}  // namespace
}  // namespace monet
