#include "predictor/monomial_basis.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace monet {
namespace {

TEST(MonomialBasis, TwoDimsUpToDegreeThreeHoldsTheTransformerTerms) {
  MonomialBasis basis(2, 3);
  std::set<std::string> names;
  for (int m = 0; m < basis.size(); ++m) names.insert(basis.name(m, {"batch", "seq"}));
  // Exponents <= 2 each, total <= 3: 1, b, s, b^2, bs, s^2, b^2 s, b s^2.
  EXPECT_EQ(basis.size(), 8);
  EXPECT_TRUE(names.count("batch*seq^2"));
  EXPECT_TRUE(names.count("batch*seq"));
  EXPECT_TRUE(names.count("1"));
  EXPECT_FALSE(names.count("batch^2*seq^2"));
  EXPECT_EQ(basis.name(0, {}), "1");
}

TEST(MonomialBasis, ThreeDimsHoldsTheConvFeatureMap) {
  MonomialBasis basis(3, 3);
  bool found = false;
  for (int m = 0; m < basis.size(); ++m) found |= basis.name(m, {"b", "h", "w"}) == "b*h*w";
  EXPECT_TRUE(found);
  EXPECT_EQ(basis.size(), 17);
}

TEST(MonomialBasis, EvaluatesEveryMonomial) {
  MonomialBasis basis(2, 4);
  ASSERT_EQ(basis.size(), 9);
  const std::int64_t x[2] = {3, 5};
  std::vector<double> out(basis.size());
  basis.evaluate(x, out.data());
  for (int m = 0; m < basis.size(); ++m) {
    double expected = 1.0;
    for (int e = 0; e < basis.exponents(m)[0]; ++e) expected *= 3;
    for (int e = 0; e < basis.exponents(m)[1]; ++e) expected *= 5;
    EXPECT_EQ(out[m], expected) << basis.name(m, {});
  }
}

TEST(MonomialBasis, RefusesTooManyDims) {
  EXPECT_THROW(MonomialBasis(5, 3), std::invalid_argument);
  EXPECT_THROW(MonomialBasis(0, 3), std::invalid_argument);
}

}  // namespace
}  // namespace monet
