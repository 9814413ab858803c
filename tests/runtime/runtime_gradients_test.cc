// Gradients with monet equal gradients without it: for a transformer and a CNN, both with dropout
// or BatchNorm, under every strategy, over several shapes, with checkpointed stages and lean
// variants in the plans.
#include "allocator/device_pools.h"
#include "monet/errors.h"
#include "runtime_testing.h"
#include "workloads/harness.h"

namespace monet {
namespace {

using testing::plain_gradients;
using testing::worst_relative_difference;

struct Case {
  std::string model;
  Strategy strategy;
};

class GradientsTest : public ::testing::TestWithParam<Case> {};

TEST_P(GradientsTest, EqualWithAndWithoutMonet) {
  install();
  const Case c = GetParam();
  auto w = c.model == "transformer" ? testing::small_transformer(128) : testing::small_resnet();
  auto reference = w->make_model(1);
  auto model = w->make_model(1);
  // Unconstrained peak at the largest batch, to set a budget that forces checkpoints.
  const std::int64_t peak = workloads::unconstrained_peak(*w, 1).in_use_bytes;
  Options o;
  o.strategy = c.strategy;
  const bool budgeted = c.strategy != Strategy::kNone && c.strategy != Strategy::kAll &&
                        c.strategy != Strategy::kSqrt;
  // A budget that forces checkpoints: 70% of the peak for the transformer; 80% for the CNN,
  // whose least feasible plan (whole residual blocks as stages) sits near 75% (docs/runtime.md).
  const std::int64_t share = w->name() == "resnet" ? 8 : 7;
  o.budget_bytes = budgeted ? peak * share / 10 : peak * 4;
  if (budgeted) {
    // A strategy whose least feasible plan is above that share (greedy, on the CNN) runs at its
    // least budget, which the error names.
    // Plus 5%: the reference model's gradients share the pool with the runtime under test.
    if (const std::int64_t least = workloads::least_budget_above(*w, 1, o); least > 0) {
      o.budget_bytes = least * 21 / 20;
    }
  }
  Runtime rt(model, o);
  int checkpointed = 0, lean = 0;
  for (std::int64_t i = 0; i < 6; ++i) {
    const workloads::Batch b = w->batch(3, i);
    const std::uint64_t seed = 100 + static_cast<std::uint64_t>(i);
    // The reference runs without a budget: it keeps everything.
    pools::cpu().set_budget_bytes(0);
    const auto expected = plain_gradients(reference, *w, b, seed);
    const auto after_plain = torch::rand({4});
    pools::cpu().set_budget_bytes(static_cast<std::size_t>(o.budget_bytes));
    model->zero_grad();
    torch::manual_seed(seed);
    rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
    std::vector<torch::Tensor> got;
    for (const auto& p : model->parameters()) got.push_back(p.grad().clone());
    const double diff = worst_relative_difference(got, expected);
    EXPECT_LE(diff, 1e-6) << c.model << " " << strategy_name(c.strategy) << " batch " << i
                          << " shape " << rt.last_step().shape << " plan " << rt.last_step().plan;
    checkpointed += rt.last_step().checkpointed_stages;
    lean += rt.last_step().variant_stages;
    // The RNG after a step is where the plain step leaves it: same draws afterwards.
    EXPECT_TRUE(torch::equal(torch::rand({4}), after_plain));
  }
  if (c.strategy == Strategy::kAll || c.strategy == Strategy::kSqrt || budgeted) {
    EXPECT_GT(checkpointed, 0) << "the test must exercise checkpointed stages";
  }
  // The CNN's one lean variant that saves bytes, max pooling's 4-bit codes, saves too little to
  // be chosen at its budget; the transformer's dropout masks are.
  if (c.strategy == Strategy::kMonet && c.model == "transformer") {
    EXPECT_GT(lean, 0) << "and lean variants";
  }
  pools::cpu().set_budget_bytes(0);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* m : {"transformer", "resnet"}) {
    for (Strategy s : all_strategies()) out.push_back({m, s});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, GradientsTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.model + "_" +
                                  std::string(strategy_name(info.param.strategy));
                         });

}  // namespace
}  // namespace monet
