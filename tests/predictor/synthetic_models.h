// Chains whose costs follow the laws of real layers, for tests and benchmarks that need known
// truth: a transformer encoder (dims batch x seq) and a ResNet-style CNN (batch x H x W), float32.
// Times are FLOPs at 10 GFLOP/s plus a fixed overhead per stage; `noise` multiplies each time by
// a factor 1 + noise * N(0, 1) drawn from `rng`.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "monet/chain.h"
#include "predictor/shape_table.h"

namespace monet::testing {

inline Chain synthetic_transformer(const Shape& shape, int layers, double noise = 0.0,
                                   std::mt19937* rng = nullptr) {
  const double b = static_cast<double>(shape[0]);
  const double s = static_cast<double>(shape[1]);
  const double d = 256, heads = 8, ff = 1024, f4 = 4;  // model width, heads, FF width, float bytes
  std::normal_distribution<double> normal;
  auto jitter = [&](double t) { return rng ? t * (1.0 + noise * normal(*rng)) : t; };
  Chain chain;
  chain.fixed_bytes = static_cast<std::int64_t>(layers * f4 * (4 * d * d + 2 * d * ff) * 4);
  for (int l = 0; l < layers; ++l) {
    Stage attention{"attention" + std::to_string(l), {}};
    VariantCosts a;
    a.out_bytes = static_cast<std::int64_t>(f4 * b * s * d);
    // q, k, v, the softmax output and its dropout mask, the pre-projection context, layer norm.
    a.saved_bytes = static_cast<std::int64_t>(f4 * b * s * d * 5 + f4 * b * heads * s * s +
                                              b * heads * s * s + 8 * b * s);
    a.fwd_peak = static_cast<std::int64_t>(f4 * b * heads * s * s);
    // Weight gradients and the softmax backward's two score-sized buffers. (A third term, say the
    // gradient of q, k and v, would make a three-term law, which three shapes cannot pin down:
    // Predictor.ThreeTermLawNeedsAFourthShape shows what happens then.)
    a.bwd_peak = static_cast<std::int64_t>(f4 * 4 * d * d + 2 * f4 * b * heads * s * s);
    const double flops = 2 * b * s * d * 4 * d + 4 * b * s * s * d;
    a.fwd_time = jitter(3e-5 + flops / 1e10);
    a.bwd_time = jitter(5e-5 + 2 * flops / 1e10);
    attention.variants.push_back(a);
    chain.stages.push_back(attention);

    Stage feed{"feed_forward" + std::to_string(l), {}};
    VariantCosts f;
    f.out_bytes = static_cast<std::int64_t>(f4 * b * s * d);
    f.saved_bytes = static_cast<std::int64_t>(f4 * b * s * ff * 2 + b * s * d + 8 * b * s);
    f.fwd_peak = static_cast<std::int64_t>(f4 * b * s * ff);
    f.bwd_peak = static_cast<std::int64_t>(f4 * 2 * d * ff + f4 * b * s * ff * 2);
    const double ff_flops = 2 * b * s * d * ff * 2;
    f.fwd_time = jitter(2e-5 + ff_flops / 1e10);
    f.bwd_time = jitter(4e-5 + 2 * ff_flops / 1e10);
    feed.variants.push_back(f);
    chain.stages.push_back(feed);
  }
  return chain;
}

// Stages: a stem, then `blocks` residual blocks; every second block of the first eight halves H and
// W and doubles the channels (H and W multiples of 16 keep the sizes exact).
inline Chain synthetic_cnn(const Shape& shape, int blocks, double noise = 0.0,
                           std::mt19937* rng = nullptr) {
  const double b = static_cast<double>(shape[0]);
  double h = static_cast<double>(shape[1]);
  double w = static_cast<double>(shape[2]);
  const double f4 = 4;
  std::normal_distribution<double> normal;
  auto jitter = [&](double t) { return rng ? t * (1.0 + noise * normal(*rng)) : t; };
  Chain chain;
  double c = 32;
  auto add = [&](const std::string& name, double in_c, double out_c, double in_h, double in_w,
                 double out_h, double out_w) {
    VariantCosts v;
    const double out = b * out_c * out_h * out_w;
    v.out_bytes = static_cast<std::int64_t>(f4 * out);
    // Two convs' inputs, two batch norms' inputs, the ReLU masks.
    v.saved_bytes = static_cast<std::int64_t>(f4 * out * 3 + out * 2);
    // im2col of the first conv.
    v.fwd_peak = static_cast<std::int64_t>(f4 * b * in_c * 9 * out_h * out_w / 8);
    v.bwd_peak = static_cast<std::int64_t>(f4 * 9 * (in_c * out_c + out_c * out_c) + f4 * out * 2 +
                                           f4 * b * in_c * in_h * in_w);
    const double flops = 2 * b * out_h * out_w * 9 * (in_c * out_c + out_c * out_c);
    v.fwd_time = jitter(4e-5 + flops / 1e10);
    v.bwd_time = jitter(8e-5 + 2 * flops / 1e10);
    chain.stages.push_back(Stage{name, {v}});
  };
  add("stem", 3, c, h, w, h, w);
  for (int i = 0; i < blocks; ++i) {
    const bool down = i % 2 == 1 && i < 8;
    const double oc = down ? 2 * c : c;
    const double oh = down ? h / 2 : h, ow = down ? w / 2 : w;
    add("block" + std::to_string(i), c, oc, h, w, oh, ow);
    c = oc;
    h = oh;
    w = ow;
  }
  return chain;
}

}  // namespace monet::testing
