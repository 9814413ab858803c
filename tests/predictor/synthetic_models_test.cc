// The targets of issue #3 on chains with known laws (synthetic_models.h): after at most three
// profiled shapes, chosen by the predictor itself, held-out shapes are predicted within 3% for
// bytes and 10% for times, with times measured under 3% noise.
#include "synthetic_models.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "predictor/predictor.h"

namespace monet {
namespace {

using Truth = std::function<Chain(const Shape&, double noise, std::mt19937* rng)>;

struct Errors {
  double bytes = 0.0;  // worst relative error over every byte number of every held-out shape
  double time = 0.0;
};

// Profiles what next_shape_to_profile asks for (at most `budget` shapes, `repeats` noisy
// measurements each), then measures the error on every other candidate.
Errors profile_and_check(const Truth& truth, const std::vector<Shape>& candidates,
                         PredictorOptions options, int budget, int* profiled) {
  std::mt19937 rng(7);
  Predictor p = Predictor::for_chain(truth(candidates.front(), 0.0, nullptr), options);
  *profiled = 0;
  while (*profiled < budget) {
    std::optional<Shape> next = p.next_shape_to_profile(candidates);
    if (!next) break;
    for (int r = 0; r < 3; ++r) p.observe(*next, truth(*next, 0.03, &rng));
    std::printf("profiled %s\n", format_shape(*next).c_str());
    ++*profiled;
  }
  Errors e;
  for (const Shape& shape : candidates) {
    if (p.is_profiled(shape)) continue;
    const Chain want = truth(shape, 0.0, nullptr);
    const Chain got = p.predict(shape);
    for (std::size_t i = 0; i < want.stages.size(); ++i) {
      for (Quantity q : kAllQuantities) {
        const double w = quantity_value(want.stages[i].variants[0], q);
        const double g = quantity_value(got.stages[i].variants[0], q);
        const double rel = w > 0 ? std::abs(g - w) / w : std::abs(g);
        double& worst = is_bytes(q) ? e.bytes : e.time;
        worst = std::max(worst, rel);
        EXPECT_LE(rel, is_bytes(q) ? 0.03 : 0.10)
            << format_shape(shape) << " " << want.stages[i].name << " " << quantity_name(q)
            << ": want " << w << " got " << g << " law "
            << p.describe_law(static_cast<int>(i), 0, q);
      }
    }
  }
  return e;
}

TEST(SyntheticModels, TransformerBatchBySeqFromThreeShapes) {
  std::vector<Shape> candidates;
  for (std::int64_t b : {4, 8, 12, 16, 24, 32}) {
    for (std::int64_t s : {32, 64, 96, 128, 192, 256, 384, 512}) candidates.push_back({b, s});
  }
  PredictorOptions options;
  options.dim_names = {"batch", "seq"};
  int profiled = 0;
  Errors e = profile_and_check(
      [](const Shape& s, double noise, std::mt19937* rng) {
        return testing::synthetic_transformer(s, 2, noise, rng);
      },
      candidates, options, 3, &profiled);
  EXPECT_EQ(profiled, 3);
  RecordProperty("bytes_error", std::to_string(e.bytes));
  RecordProperty("time_error", std::to_string(e.time));
  EXPECT_LE(e.bytes, 0.03);
  EXPECT_LE(e.time, 0.10);
}

TEST(SyntheticModels, CnnBatchByHeightByWidthFromThreeShapes) {
  std::vector<Shape> candidates;
  for (std::int64_t b : {2, 4, 8, 16}) {
    for (std::int64_t h : {32, 64, 96, 128}) {
      for (std::int64_t w : {32, 64, 96, 128}) candidates.push_back({b, h, w});
    }
  }
  PredictorOptions options;
  options.dim_names = {"batch", "height", "width"};
  int profiled = 0;
  Errors e =
      profile_and_check([](const Shape& s, double noise,
                           std::mt19937* rng) { return testing::synthetic_cnn(s, 4, noise, rng); },
                        candidates, options, 3, &profiled);
  EXPECT_EQ(profiled, 3);
  RecordProperty("bytes_error", std::to_string(e.bytes));
  RecordProperty("time_error", std::to_string(e.time));
  EXPECT_LE(e.bytes, 0.03);
  EXPECT_LE(e.time, 0.10);
}

}  // namespace
}  // namespace monet
