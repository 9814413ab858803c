// What a user can get wrong, and what must never be lost: a budget below the least feasible,
// a batch that runs out of memory, eval mode, bad options.
#include "allocator/device_pools.h"
#include "monet/errors.h"
#include "runtime_testing.h"

namespace monet {
namespace {

using testing::plain_gradients;
using testing::worst_relative_difference;

TEST(RuntimeErrors, BudgetBelowTheLeastFeasibleNamesItBeforeAnyStepIsLost) {
  install();
  auto w = testing::small_transformer();
  auto model = w->make_model(1);
  Options o;
  o.budget_bytes = 3 << 20;  // 3 MiB: far below what one layer's attention needs at seq 128
  Runtime rt(model, o);
  const auto b = w->largest_batch();
  try {
    rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
    FAIL() << "a 3 MiB budget cannot hold a step at " << w->shape_of(b);
  } catch (const InfeasibleBudgetError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("least budget that fits it is"));
    EXPECT_GT(e.min_feasible_bytes, o.budget_bytes);
    // Nothing happened to the model: no gradient was written.
    for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
    // The budget it names is enough.
    pools::cpu().release_cached();
    Options enough = o;
    enough.budget_bytes = e.min_feasible_bytes;
    Runtime rt2(model, enough);
    EXPECT_NO_THROW(rt2.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); }));
    EXPECT_LE(pools::cpu().stats().reserved_bytes, static_cast<std::size_t>(e.min_feasible_bytes));
  }
  pools::cpu().set_budget_bytes(0);
}

TEST(RuntimeErrors, ABatchThatRunsOutOfMemoryRunsAgainWithTheSameResult) {
  install();
  auto w = testing::small_transformer(64);
  auto reference = w->make_model(4);
  auto model = w->make_model(4);
  const auto b = w->batch(5, 0);
  const auto expected = plain_gradients(reference, *w, b, 9);

  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  // A loss that, the first time it runs with grad outside the measurement pass (whose one run
  // with grad comes first), holds a buffer the plan knows nothing of and that does not fit.
  int calls = 0;
  const auto loss = [&](const torch::Tensor& out) {
    if (torch::GradMode::is_enabled()) ++calls;
    torch::Tensor hog;
    if (calls == 2) hog = torch::empty({64 << 20}, torch::kByte);
    return w->loss(out, b);
  };
  torch::manual_seed(9);
  rt.step(b.input, loss);
  EXPECT_EQ(rt.last_step().retries, 1);
  EXPECT_EQ(rt.stats().retries, 1);
  std::vector<torch::Tensor> got;
  for (const auto& p : model->parameters()) got.push_back(p.grad().clone());
  EXPECT_LE(worst_relative_difference(got, expected), 1e-6);
  pools::cpu().set_budget_bytes(0);
}

TEST(RuntimeErrors, EvalModeAndNoGradRunThePlainModel) {
  install();
  auto w = testing::small_resnet();
  auto model = w->make_model(1);
  Options o;
  o.budget_bytes = 1 << 30;
  Runtime rt(model, o);
  model->eval();
  const auto b = w->batch(1, 0);
  const auto expected = model->forward(b.input);
  EXPECT_TRUE(torch::equal(rt.forward(b.input), expected));
  {
    model->train();
    torch::NoGradGuard no_grad;
    rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
  }
  EXPECT_EQ(rt.stats().plans_made, 0);
  EXPECT_EQ(rt.stats().profiled_steps, 0);
  pools::cpu().set_budget_bytes(0);
}

TEST(RuntimeErrors, BadOptionsSayWhatToDo) {
  install();
  auto w = testing::small_resnet();
  Options o;
  o.margin = 1.5;
  EXPECT_THROW(
      {
        try {
          Runtime rt(w->make_model(1), o);
        } catch (const ConfigError& e) {
          EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("MONET_MARGIN"));
          throw;
        }
      },
      ConfigError);
  EXPECT_THROW(Runtime(torch::nn::Sequential(), Options{}), ConfigError);
  Options dims;
  dims.varying_dims = {7};
  dims.budget_bytes = 1 << 30;
  Runtime rt(w->make_model(1), dims);
  const auto b = w->batch(1, 0);
  EXPECT_THROW(rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); }),
               ConfigError);
  pools::cpu().set_budget_bytes(0);
}

}  // namespace
}  // namespace monet
