// What a user can get wrong, and what must never be lost: a budget below the least feasible,
// a batch that runs out of memory, eval mode, bad options.
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "allocator/device_pools.h"
#include "kernels/autocast.h"
#include "monet/errors.h"
#include "monet/op_mode.h"
#include "predictor/predictor.h"
#include "runtime_testing.h"
#include "workloads/harness.h"

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
    // The budget it names is enough, for the first step (no gradients yet) and the ones after
    // (gradients kept from step to step where zero_grad zeroes them, LibTorch 1.x's default).
    pools::cpu().release_cached();
    Options enough = o;
    enough.budget_bytes = e.min_feasible_bytes;
    Runtime rt2(model, enough);
    for (int step = 0; step < 3; ++step) {
      model->zero_grad();
      EXPECT_NO_THROW(rt2.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); }))
          << "step " << step;
    }
    EXPECT_LE(pools::cpu().stats().reserved_bytes, static_cast<std::size_t>(e.min_feasible_bytes));
  }
}

TEST(RuntimeErrors, ABudgetBelowTheModelsWeightsIsRefusedWhenTheRuntimeIsMade) {
  install();
  // 2.0 MiB of parameters, and as much of gradients: 4.0 MiB before any activation.
  torch::nn::Sequential model(torch::nn::Linear(512, 512), torch::nn::ReLU(),
                              torch::nn::Linear(512, 512));
  Options o;
  o.budget_bytes = 3 << 20;
  // The pool's budget is left as it was: the job goes on as before the Runtime it could not make.
  pools::cpu().set_budget_bytes(0);
  const std::size_t before = pools::cpu().budget_bytes();
  try {
    Runtime rt(model, o);
    FAIL() << "a 3 MiB budget cannot hold 4 MiB of parameters and gradients";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, ::testing::HasSubstr("a budget of 3.00 MiB cannot hold the model on cpu"));
    EXPECT_THAT(message, ::testing::HasSubstr("parameters and buffers take 2.00 MiB"));
    EXPECT_THAT(message, ::testing::HasSubstr("Raise MONET_BUDGET"));
  }
  EXPECT_EQ(pools::cpu().budget_bytes(), before);
  // Frozen parameters have no gradients: the same budget holds them.
  for (auto& p : model->parameters()) p.requires_grad_(false);
  EXPECT_NO_THROW(Runtime(model, o));
}

// The retries of one step of `model` on `b` under a 64 MiB budget (the step's own and the
// runtime's count), with a loss that, the first time it runs with grad outside the measurement
// pass (whose one run with grad comes first), holds a buffer the plan knows nothing of and that
// does not fit: the batch runs out of memory once and runs again. Seeded with 9.
std::pair<int, std::int64_t> step_out_of_memory_once(torch::nn::Sequential& model,
                                                     const workloads::Workload& w,
                                                     const workloads::Batch& b) {
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  int calls = 0;
  const auto loss = [&](const torch::Tensor& out) {
    if (torch::GradMode::is_enabled()) ++calls;
    torch::Tensor hog;
    if (calls == 2) hog = torch::empty({64 << 20}, torch::kByte);
    return w.loss(out, b);
  };
  torch::manual_seed(9);
  rt.step(b.input, loss);
  pools::cpu().set_budget_bytes(0);
  return {rt.last_step().retries, rt.stats().retries};
}

// The small transformer, a model of it for monet, a batch, and a plain step's gradients on that
// batch from a model made alike (seeded with 9).
struct RetryCase {
  bool installed = (install(), true);  // monet serves the tensors, before any is made
  std::unique_ptr<workloads::Workload> w = testing::small_transformer(64);
  torch::nn::Sequential model = w->make_model(4);
  workloads::Batch b = w->batch(5, 0);
  std::vector<torch::Tensor> expected = plain_gradients_of_fresh_model(*w, b);

  static std::vector<torch::Tensor> plain_gradients_of_fresh_model(const workloads::Workload& w,
                                                                   const workloads::Batch& b) {
    auto reference = w.make_model(4);
    return plain_gradients(reference, w, b, 9);
  }
};

TEST(RuntimeErrors, ABatchThatRunsOutOfMemoryRunsAgainWithTheSameResult) {
  RetryCase c;

  const auto [retries, all_retries] = step_out_of_memory_once(c.model, *c.w, c.b);
  EXPECT_EQ(retries, 1);
  EXPECT_EQ(all_retries, 1);
  std::vector<torch::Tensor> got = testing::gradients_of(c.model);
  EXPECT_LE(worst_relative_difference(got, c.expected), 1e-6);
}

// A batch that runs again after running out of memory starts from the gradients it found: those
// that held values (accumulation over batches) get the batch's gradients added once, those zeroed
// (zero_grad without set_to_none) get them alone, and those undefined become them.
TEST(RuntimeErrors, ARetriedBatchAddsToTheGradientsItFoundOnce) {
  RetryCase c;

  // Before the step: every third parameter's gradient holds values, every third is zero, and the
  // rest have none.
  std::vector<torch::Tensor> found;
  {
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : c.model->parameters()) {
      if (k % 3 == 0) p.mutable_grad() = torch::full_like(p, 0.25);
      if (k % 3 == 1) p.mutable_grad() = torch::zeros_like(p);
      found.push_back(k % 3 == 0 ? torch::full_like(p, 0.25) : torch::zeros_like(p));
      ++k;
    }
  }
  ASSERT_EQ(step_out_of_memory_once(c.model, *c.w, c.b).first, 1);
  std::vector<torch::Tensor> got, want;
  std::size_t i = 0;
  for (const auto& p : c.model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    got.push_back(p.grad().clone());
    want.push_back(found[i] + c.expected[i]);
    ++i;
  }
  EXPECT_LE(worst_relative_difference(got, want), 1e-6);
}

// The workload's loss on `b`, but one that, while `*hogs` is above 0, holds `bytes` in each planned
// run and counts `*hogs` down: with `bytes` the whole budget each such run is a step out of
// memory, as far as the runtime can tell a plan that fell short. A measurement pass gives the loss
// a leaf, which has no grad_fn: it is not held there.
Runtime::LossFn hogging_loss(const workloads::Workload& w, const workloads::Batch& b,
                             std::int64_t bytes, int* hogs) {
  return [&w, &b, bytes, hogs](const torch::Tensor& out) {
    torch::Tensor hog;
    if (out.grad_fn() && *hogs > 0) {
      --*hogs;
      hog = torch::empty({bytes}, torch::kByte);
    }
    return w.loss(out, b);
  };
}

// A batch whose shape was measured at the start of its step, and whose planned run then ran out of
// memory, reports the measurement: the step began with it (and counts among the measured steps),
// though the plan of the run that fitted was made again from what it measured.
TEST(RuntimeErrors, AMeasuredBatchThatRunsAgainReportsItsMeasurement) {
  install();
  auto w = testing::small_transformer(64);
  const auto b = w->batch(5, 0);
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(w->make_model(4), o);
  int hogs = 1;
  rt.step(b.input, hogging_loss(*w, b, o.budget_bytes, &hogs));
  ASSERT_EQ(rt.last_step().retries, 1);
  EXPECT_TRUE(rt.last_step().profiled);
  EXPECT_EQ(rt.stats().profiled_steps, 1);
}

// A batch that runs out of memory more often than Options::max_retries allows is lost with an
// InfeasibleBudgetError that says what its last run kept free, and counts the retries that ran.
TEST(RuntimeErrors, ABatchOutOfRetriesSaysWhatItsLastRunKeptFree) {
  install();
  auto w = testing::small_transformer(64);
  const auto b = w->batch(5, 0);
  for (const int max_retries : {0, 2}) {
    Options o;
    o.budget_bytes = 64 << 20;
    o.max_retries = max_retries;
    Runtime rt(w->make_model(4), o);
    int hogs = 0;
    const Runtime::LossFn loss = hogging_loss(*w, b, o.budget_bytes, &hogs);
    rt.step(b.input, loss);  // measured and planned with the margin alone
    hogs = 100;
    try {
      rt.step(b.input, loss);
      ADD_FAILURE() << "a batch out of memory at every run was not lost";
    } catch (const InfeasibleBudgetError& e) {
      // 10% at the first run, 10 points more at each retry.
      const std::string kept = std::to_string(10 * (max_retries + 1)) + "% of it kept free";
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr(kept)) << max_retries;
      EXPECT_THAT(std::string(e.what()),
                  ::testing::HasSubstr(max_retries == 0 ? "ran out of memory once within"
                                                        : "ran out of memory 3 times within"));
    }
    EXPECT_EQ(rt.last_step().retries, max_retries);
    EXPECT_EQ(rt.stats().retries, max_retries);
  }
}

// A retried batch reports the plan it ran: one made after the cached plan ran out of memory.
TEST(RuntimeErrors, ARetriedBatchReportsThePlanMadeForIt) {
  install();
  auto w = testing::small_transformer(64);
  const auto b = w->batch(5, 0);
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(w->make_model(4), o);
  int hogs = 0;
  const Runtime::LossFn loss = hogging_loss(*w, b, o.budget_bytes, &hogs);
  rt.step(b.input, loss);
  rt.step(b.input, loss);
  ASSERT_TRUE(rt.last_step().plan_from_cache);
  const std::int64_t plans = rt.stats().plans_made;
  hogs = 1;
  rt.step(b.input, loss);
  ASSERT_EQ(rt.last_step().retries, 1);
  EXPECT_EQ(rt.stats().plans_made, plans + 1);
  EXPECT_FALSE(rt.last_step().plan_from_cache);
  EXPECT_GT(rt.last_step().plan_us, 0.0);
}

// A plan from the cache reports the budget it was made for, though the margin learned since from
// another shape's retry would make a new plan for less.
TEST(RuntimeErrors, ACachedPlanReportsTheBudgetItWasMadeFor) {
  install();
  auto w = testing::small_transformer(64);
  const auto a = w->batch(5, 0);
  std::int64_t i = 1;
  while (w->shape_of(w->batch(5, i)) == w->shape_of(a)) ++i;
  const auto b = w->batch(5, i);
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(w->make_model(4), o);
  int hogs = 0;
  const Runtime::LossFn loss_a = hogging_loss(*w, a, o.budget_bytes, &hogs);
  const Runtime::LossFn loss_b = hogging_loss(*w, b, o.budget_bytes, &hogs);
  rt.step(a.input, loss_a);
  const std::int64_t made_for = rt.last_step().budget_bytes;
  ASSERT_GT(made_for, 0);
  rt.step(b.input, loss_b);
  hogs = 1;
  rt.step(b.input, loss_b);
  ASSERT_EQ(rt.last_step().retries, 1);
  ASSERT_LT(rt.last_step().budget_bytes, made_for) << "the retry raised b's margin";
  rt.step(a.input, loss_a);
  ASSERT_TRUE(rt.last_step().plan_from_cache);
  EXPECT_EQ(rt.last_step().budget_bytes, made_for);
}

// Each retry of a shape raises the margin its plans leave free. Where the retries have raised it
// past what any plan leaves, though a plan fits the budget, the batch runs the plan that holds the
// least instead of being lost, and so do the shape's later batches.
TEST(RuntimeErrors, RetriesThatRaiseTheMarginPastEveryPlanStillRunTheBatch) {
  install();
  auto w = testing::small_transformer();
  const auto b = w->largest_batch();
  std::int64_t least = 0;  // the least budget a plan of this shape fits after one retry
  try {
    Options tiny;
    tiny.budget_bytes = 3 << 20;
    Runtime probe(w->make_model(1), tiny);
    probe.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
  } catch (const InfeasibleBudgetError& e) {
    least = e.min_feasible_bytes;
  }
  ASSERT_GT(least, 0);
  pools::cpu().release_cached();
  pools::cpu().reset_peaks();  // the peaks of the probe's measurement and of earlier tests
  Options o;
  o.budget_bytes = least;  // plans fit with the margin raised once, not three times
  auto model = w->make_model(1);
  Runtime rt(model, o);
  int hogs = 0;
  const Runtime::LossFn loss = hogging_loss(*w, b, o.budget_bytes, &hogs);
  rt.step(b.input, loss);  // measures the shape and plans it
  hogs = 3;                // three retries: the margin goes from 10% to 40%
  EXPECT_NO_THROW(rt.step(b.input, loss));
  EXPECT_EQ(rt.last_step().retries, 3);
  EXPECT_LE(rt.last_step().predicted_peak_bytes, o.budget_bytes);
  const std::int64_t plans = rt.stats().plans_made;
  EXPECT_NO_THROW(rt.step(b.input, loss));  // the shape's next batch, its margin still raised
  EXPECT_EQ(rt.last_step().retries, 0);
  EXPECT_EQ(rt.stats().plans_made, plans) << "the least plan is cached, not made at every step";
  EXPECT_LE(pools::cpu().stats().peak_reserved_bytes, static_cast<std::size_t>(o.budget_bytes));
}

// What retries add to the margin comes down again after Options::margin_relax_steps steps in a
// row without one, a retry's step at a time: the shape's plans get their room back.
TEST(RuntimeErrors, MarginsRaisedByRetriesComeDownAfterStepsWithoutOne) {
  install();
  auto w = testing::small_transformer(64);
  const auto b = w->batch(5, 0);
  Options o;
  o.budget_bytes = 64 << 20;
  o.margin_relax_steps = 3;
  Runtime rt(w->make_model(4), o);
  int hogs = 0;
  const Runtime::LossFn loss = hogging_loss(*w, b, o.budget_bytes, &hogs);
  rt.step(b.input, loss);  // measured and planned with the margin alone
  const std::int64_t unraised = rt.last_step().budget_bytes;
  hogs = 2;
  rt.step(b.input, loss);
  ASSERT_EQ(rt.last_step().retries, 2);
  const std::int64_t raised = rt.last_step().budget_bytes;
  EXPECT_LT(raised, unraised);
  std::vector<std::int64_t> budgets;  // each step's plan budget from here on
  for (int i = 0; i < 9; ++i) {
    rt.step(b.input, loss);
    budgets.push_back(rt.last_step().budget_bytes);
  }
  // Three steps at the raised margin (the retried one does not count), three at one retry's step
  // less, then the margin alone.
  EXPECT_EQ(budgets[0], raised);
  EXPECT_EQ(budgets[2], raised);
  EXPECT_GT(budgets[3], raised);
  EXPECT_LT(budgets[3], unraised);
  EXPECT_EQ(budgets[5], budgets[3]);
  EXPECT_EQ(budgets[6], unraised);
  EXPECT_EQ(budgets[8], unraised);
  EXPECT_EQ(rt.stats().retries, 2);
}

// What retries added to the margins is saved beside the predictor's state (its path and
// ".margins"): a job that starts again from them plans with them rather than losing a batch to
// learn them again. A job under another budget starts from the margin alone.
TEST(RuntimeErrors, ARestartedJobKeepsTheMarginsItsRetriesRaised) {
  install();
  auto w = testing::small_transformer(64);
  const auto b = w->batch(5, 0);
  const std::string path = testing::fresh_state_path("monet_runtime_margins_state.json");
  Options o;
  o.budget_bytes = 64 << 20;
  o.predictor_state = path;
  std::int64_t unraised = 0;
  std::int64_t raised = 0;
  {
    Runtime first(w->make_model(4), o);
    int hogs = 0;
    const Runtime::LossFn loss = hogging_loss(*w, b, o.budget_bytes, &hogs);
    first.step(b.input, loss);  // measured and planned with the margin alone
    unraised = first.last_step().budget_bytes;
    hogs = 1;
    first.step(b.input, loss);
    ASSERT_EQ(first.last_step().retries, 1);
    raised = first.last_step().budget_bytes;
    ASSERT_LT(raised, unraised);
  }
  ASSERT_TRUE(std::filesystem::exists(path + ".margins"));

  int hogs = 0;
  const Runtime::LossFn loss = hogging_loss(*w, b, o.budget_bytes, &hogs);
  Runtime restarted(w->make_model(4), o);
  restarted.step(b.input, loss);
  EXPECT_EQ(restarted.stats().profiled_steps, 0);
  EXPECT_EQ(restarted.last_step().retries, 0);
  EXPECT_EQ(restarted.last_step().budget_bytes, raised);

  Options other = o;
  other.budget_bytes = (64 << 20) + (1 << 20);
  Runtime elsewhere(w->make_model(4), other);
  elsewhere.step(b.input, loss);
  EXPECT_GT(elsewhere.last_step().budget_bytes, unraised) << "the margin alone, of a larger budget";
}

// MONET_PREDICTOR_STATE: a job that starts again from the state an earlier run saved measures
// none of the shapes that run measured, not even its first; one measured on another dtype is
// measured afresh; a state saved for another model is refused with what to do.
TEST(RuntimeErrors, APredictorStateWarmStartsARestartedJob) {
  install();
  auto w = testing::small_transformer();
  const std::string path = testing::fresh_state_path("monet_runtime_predictor_state.json");
  Options o = testing::half_peak_with_state(*w, path);
  const std::int64_t half_peak = o.budget_bytes;
  std::vector<workloads::Batch> batches = {w->largest_batch()};
  for (int i = 0; i < 12; ++i) batches.push_back(w->batch(5, i));
  const auto train = [&](Runtime& rt) { testing::train(rt, *w, batches); };
  auto first_model = w->make_model(3);
  Runtime first(first_model, o);
  train(first);
  EXPECT_GT(first.stats().profiled_steps, 0);
  ASSERT_TRUE(std::filesystem::exists(path));

  const std::string float32_state = Predictor::load(path).measured_on();
  EXPECT_THAT(float32_state,
              ::testing::MatchesRegex("input int64 on cpu; parameters float32 \\([0-9]+ "
                                      "elements\\); every parameter trains"));

  auto model = w->make_model(3);
  Runtime restarted(model, o);
  train(restarted);
  EXPECT_EQ(restarted.stats().profiled_steps, 0);
  EXPECT_EQ(restarted.stats().steps, first.stats().steps);

  // The same stages made wider (another d_ff) keep other bytes and take other times: measured
  // afresh. Before, the state was taken for them, its stage names and dtypes being the same.
  auto wide = testing::small_transformer(128, /*d_ff=*/128);
  auto wide_model = wide->make_model(3);
  Options wider_budget = o;
  wider_budget.budget_bytes = 3 * half_peak;  // its peak is above the narrow one's
  Runtime widened(wide_model, wider_budget);
  testing::train(widened, *wide, {wide->largest_batch()});
  EXPECT_GT(widened.stats().profiled_steps, 0);
  EXPECT_NE(Predictor::load(path).measured_on(), float32_state);

  // A state saved before monet counted the parameters' elements is taken as it was.
  {
    auto narrow_again = w->make_model(3);
    Runtime again(narrow_again, o);
    train(again);  // measures the narrow model afresh: the file was the wide one's
    EXPECT_GT(again.stats().profiled_steps, 0);
    const std::string older =
        std::regex_replace(testing::read_file(path), std::regex(" \\([0-9]+ elements\\)"), "");
    ASSERT_NE(older.find("\"input int64 on cpu; parameters float32; every parameter trains\""),
              std::string::npos)
        << older;
    std::ofstream(path, std::ios::binary) << older;
  }
  auto from_older_model = w->make_model(3);
  Runtime restarted_from_older(from_older_model, o);
  train(restarted_from_older);
  EXPECT_EQ(restarted_from_older.stats().profiled_steps, 0);

  // The same model in float64 keeps twice the bytes: it measures afresh and writes over the file.
  // Before, it planned from float32's bytes, ran out of memory and lost batches.
  auto doubled = w->make_model(3);
  doubled->to(torch::kDouble);
  o.budget_bytes = 2 * half_peak;
  Runtime converted(doubled, o);
  train(converted);
  EXPECT_GT(converted.stats().profiled_steps, 0);
  EXPECT_EQ(converted.stats().retries, 0);
  EXPECT_THAT(Predictor::load(path).measured_on(),
              ::testing::MatchesRegex("input int64 on cpu; parameters float64 \\([0-9]+ "
                                      "elements\\); every parameter trains"));
  o.budget_bytes = half_peak;

  // Under autocast (mixed precision) the stages keep other bytes again: measured afresh too.
  auto mixed_model = w->make_model(3);
  const kernels::AutocastState bf16 = workloads::autocast_for(torch::kCPU);  // bfloat16
  {
    const kernels::AutocastScope on(bf16);
    Runtime mixed(mixed_model, o);
    train(mixed);
    EXPECT_GT(mixed.stats().profiled_steps, 0);
    EXPECT_EQ(mixed.stats().retries, 0);
  }
  EXPECT_EQ(Predictor::load(path).measured_on(), float32_state + "; autocast bfloat16 on cpu");

  auto cnn = testing::small_resnet();
  auto other = cnn->make_model(3);
  Runtime wrong(other, o);
  const workloads::Batch b = cnn->largest_batch();
  try {
    wrong.step(b.input, [&](const torch::Tensor& out) { return cnn->loss(out, b); });
    FAIL() << "a CNN started from a transformer's predictor state";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("saved for another model"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("delete the state file"));
    EXPECT_THAT(std::string(e.what()),
                ::testing::StartsWith(path + " (MONET_PREDICTOR_STATE): monet predictor:"));
  }
  // A job that goes on after the error meets it again, and the file stays the transformer's.
  const std::string saved = testing::read_file(path);
  EXPECT_THROW(wrong.step(b.input, [&](const torch::Tensor& out) { return cnn->loss(out, b); }),
               ConfigError);
  EXPECT_EQ(testing::read_file(path), saved);

  // A state learnt on two varying dims, for a job that names one: refused at once, rather than
  // every prediction failing step after step; the file stays as it is.
  Options one_dim = o;
  one_dim.varying_dims = {0};
  auto same = w->make_model(3);
  Runtime narrower(same, one_dim);
  const workloads::Batch t = w->largest_batch();
  try {
    narrower.step(t.input, [&](const torch::Tensor& out) { return w->loss(out, t); });
    FAIL() << "a state of two varying dims was taken for one";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr(path + " (MONET_PREDICTOR_STATE) was learnt on 2 varying "
                                            "dims of the input (d0 x d1), and this job's input "
                                            "has 1"));
  }
  EXPECT_EQ(testing::read_file(path), saved);

  // A damaged file is refused naming the knob and the file, and is left as it is for the user to
  // fix or delete.
  std::ofstream(path, std::ios::binary) << "{\"version\": 1, ";
  auto again = w->make_model(3);
  Runtime damaged(again, o);
  try {
    damaged.step(t.input, [&](const torch::Tensor& out) { return w->loss(out, t); });
    FAIL() << "a damaged predictor state was taken";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::StartsWith("monet::Runtime (MONET_PREDICTOR_STATE): monet predictor "
                                      "state '" +
                                      path + "': not valid JSON"));
  }
  EXPECT_EQ(testing::read_file(path), "{\"version\": 1, ");
  std::filesystem::remove(path);
}

// A state measured with regenerated dropout masks (allow_rng_variants) is not taken by a job
// that draws torch's: its operator modes are not that job's, and the job measures afresh.
TEST(RuntimeErrors, AStateOfRegeneratedMasksIsNotTakenWithoutAllowRngVariants) {
  install();
  auto w = testing::small_transformer();
  const std::string path = testing::fresh_state_path("monet_runtime_rng_state.json");
  Options o = testing::half_peak_with_state(*w, path);
  o.allow_rng_variants = true;
  const std::vector<workloads::Batch> batches = {w->largest_batch(), w->batch(5, 1)};
  const auto train = [&](Runtime& rt) { testing::train(rt, *w, batches); };
  auto first_model = w->make_model(3);
  Runtime first(first_model, o);
  train(first);
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_THAT(Predictor::load(path).measured_on(),
              ::testing::HasSubstr("; dropout redrawn in backward"));
  o.allow_rng_variants = false;
  auto model = w->make_model(3);
  Runtime restarted(model, o);
  train(restarted);
  EXPECT_GT(restarted.stats().profiled_steps, 0);
  EXPECT_THAT(Predictor::load(path).measured_on(),
              ::testing::Not(::testing::HasSubstr("dropout redrawn")));
  std::filesystem::remove(path);
}

// A state an older monet saved under allow_rng_variants does not say so in its description: its
// regenerate modes do. A job that does not allow them measures afresh rather than run them; one
// that does takes the state.
TEST(RuntimeErrors, AnOlderStateOfRegeneratedMasksIsKnownByItsModes) {
  install();
  auto w = testing::small_transformer();
  const std::string path = testing::fresh_state_path("monet_runtime_older_rng_state.json");
  Options o = testing::half_peak_with_state(*w, path);
  o.allow_rng_variants = true;
  const std::vector<workloads::Batch> batches = {w->largest_batch(), w->batch(5, 1)};
  const auto train = [&](Runtime& rt) { testing::train(rt, *w, batches); };
  {
    auto model = w->make_model(3);
    Runtime first(model, o);
    train(first);
  }
  std::string older = testing::read_file(path);
  ASSERT_THAT(older, ::testing::HasSubstr("\"regenerate\""));
  const std::string words = "; dropout redrawn in backward";
  const std::size_t at = older.find(words);
  ASSERT_NE(at, std::string::npos);
  older.erase(at, words.size());
  const auto write_older = [&] { std::ofstream(path, std::ios::binary) << older; };
  write_older();
  {
    auto model = w->make_model(3);
    Runtime allowed(model, o);
    train(allowed);
    EXPECT_EQ(allowed.stats().profiled_steps, 0) << "the older state of the same settings";
  }
  write_older();
  o.allow_rng_variants = false;
  auto model = w->make_model(3);
  Runtime restarted(model, o);
  train(restarted);
  EXPECT_GT(restarted.stats().profiled_steps, 0);
  EXPECT_THAT(testing::read_file(path), ::testing::Not(::testing::HasSubstr("\"regenerate\"")));
  std::filesystem::remove(path);
}

// A dim that is not among the varying ones keeps the first input's size: a plan and the
// predictor's laws hold for one size of it. (A Conv1d's length, dim 2, where dims 0 and 1 vary.)
TEST(RuntimeErrors, ADimThatDoesNotVaryMustNotChange) {
  install();
  torch::nn::Sequential model(torch::nn::Conv1d(torch::nn::Conv1dOptions(4, 8, 3).padding(1)),
                              torch::nn::ReLU(),
                              torch::nn::Conv1d(torch::nn::Conv1dOptions(8, 4, 3).padding(1)));
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  rt.step(torch::randn({2, 4, 64}), loss);
  rt.step(torch::randn({3, 4, 64}), loss);  // the batch varies
  try {
    rt.step(torch::randn({2, 4, 4096}), loss);
    FAIL() << "a length the plans were not made for ran";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("dim 2 of the input is 4096 (2x4x4096), where the first "
                                     "input it trained had 64 (2x4x64)"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("(by default 0, 1)"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("Options::varying_dims"));
  }
  EXPECT_EQ(rt.stats().steps, 2);
  o.varying_dims = {0, 2};
  Runtime lengths(model, o);
  lengths.step(torch::randn({2, 4, 64}), loss);
  EXPECT_NO_THROW(lengths.step(torch::randn({2, 4, 256}), loss));
}

// An optimizer makes its state at its first step, after the first plans were made: a cached plan
// that no longer fits is made again from the same chain, before it runs out of memory and without
// measuring the shape again.
TEST(RuntimeErrors, AnOptimizersStateIsPlannedForOnceItAppears) {
  install();
  // Parameters that weigh much against the activations: Adam's two moments are about a seventh of
  // the step's peak, more than a plan leaves free.
  workloads::TransformerConfig c;
  c.vocab = 4096;
  c.d_model = 64;
  c.d_ff = 128;
  c.layers = 4;
  c.max_seq = 64;
  auto w = workloads::make_transformer_workload(c);
  const workloads::Batch b = w->largest_batch();
  const auto train = [&](Runtime& rt, torch::nn::Sequential& model, int steps) {
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
    for (int i = 0; i < steps; ++i) {
      adam.zero_grad();
      rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
      adam.step();
    }
  };
  // The peak of a step with Adam's state, without a budget.
  auto free_model = w->make_model(1);
  Runtime unbudgeted(free_model, Options{});
  train(unbudgeted, free_model, 2);
  const std::int64_t peak = unbudgeted.stats().max_measured_peak_bytes;
  std::int64_t state_bytes = 0;
  for (const auto& p : free_model->parameters()) state_bytes += 2 * p.numel() * 4;
  ASSERT_GT(peak, 0);

  auto model = w->make_model(1);
  Options o;
  o.budget_bytes = peak * 3 / 4;
  Runtime rt(model, o);
  train(rt, model, 4);
  EXPECT_EQ(rt.stats().retries, 0);
  EXPECT_EQ(rt.stats().profiled_steps, 1);
  EXPECT_EQ(rt.stats().plans_made, 2);  // the first plan, and again once Adam's state was there
  EXPECT_GT(state_bytes, o.budget_bytes / 8);  // more than plans leave free
  EXPECT_LE(rt.stats().max_measured_peak_bytes, o.budget_bytes);

  // A plan with room to spare keeps running, and the state it did not count does not make its
  // peak look under-predicted: the shape is not measured again.
  auto roomy_model = w->make_model(1);
  Options roomy;
  roomy.budget_bytes = peak;
  roomy.strategy = Strategy::kAll;
  Runtime roomy_rt(roomy_model, roomy);
  train(roomy_rt, roomy_model, 4);
  EXPECT_EQ(roomy_rt.stats().profiled_steps, 1);
  EXPECT_EQ(roomy_rt.stats().plans_made, 1);
  EXPECT_EQ(roomy_rt.stats().dropped_plans, 0);
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
}

// A first stage that writes the model's input in place would write it again at every run of
// the stage (the measurement's, a recomputation's): refused with what to do. Before, each of the
// measurement pass's runs wrote the input again, and the step's gradients were not the plain
// step's. A first stage that gives a view of the input (Flatten) runs with the stage after it (and
// the Tanh, which keeps not its input, nor the Linear its output, with them).
TEST(RuntimeErrors, AFirstStageThatWritesTheInputInPlaceIsNamed) {
  install();
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  torch::nn::Sequential writes(torch::nn::Functional([](torch::Tensor x) { return x.mul_(2); }),
                               torch::nn::Linear(64, 64), torch::nn::Tanh());
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(writes, o);
  try {
    rt.step(torch::randn({8, 64}), loss);
    FAIL() << "a first stage that writes the input in place was run";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("the first stage, 0:Functional, writes the model's input"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("x.mul(2), not x.mul_(2)"));
  }

  torch::manual_seed(3);
  torch::nn::Sequential views(torch::nn::Flatten(), torch::nn::Linear(64, 64), torch::nn::Tanh());
  torch::manual_seed(3);
  torch::nn::Sequential plain(torch::nn::Flatten(), torch::nn::Linear(64, 64), torch::nn::Tanh());
  Runtime flat(views, o);
  const torch::Tensor x = torch::randn({8, 4, 16});
  flat.step(x, loss);
  loss(plain->forward(x)).backward();
  EXPECT_EQ(flat.stage_names(), (std::vector<std::string>{"0:Flatten+1:Linear+2:Tanh", "3:loss"}));
  EXPECT_TRUE(views->parameters()[0].grad().equal(plain->parameters()[0].grad()));
}

// A 5-D input (video, or a 3-D scan: N, C, D, H, W) learns on its batch, depth, height and width
// by default. Before, every dim was taken, the predictor (which learns on at most 4) refused the
// shape with its own words ("coverage_gap shape [2, 3, 5, 10, 10] has 5 dims"), and no step ran.
// An input of more dims has no default: the first step names Options::varying_dims.
TEST(RuntimeErrors, AFiveDimInputTrainsAndOneOfMoreDimsNamesVaryingDims) {
  install();
  torch::nn::Sequential model(
      torch::nn::Conv3d(torch::nn::Conv3dOptions(3, 8, 3).padding(1)), torch::nn::ReLU(),
      torch::nn::Conv3d(torch::nn::Conv3dOptions(8, 8, 3).padding(1)), torch::nn::Tanh());
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  for (int i = 0; i < 6; ++i) {
    ASSERT_NO_THROW(rt.step(torch::randn({2, 3, 4 + i, 8 + 2 * i, 8 + 2 * i}), loss)) << i;
    const std::string side = std::to_string(8 + 2 * i);
    EXPECT_EQ(rt.last_step().shape, "2x" + std::to_string(4 + i) + "x" + side + "x" + side);
  }
  Runtime six(torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(64, 4)), o);
  try {
    six.step(torch::randn({2, 1, 2, 2, 2, 8}), loss);
    FAIL() << "a 6-D input was taken without varying_dims";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("set Options::varying_dims"));
  }
}

// An input the runtime cannot learn from is refused before anything runs: one with no elements,
// and one of another rank than the first (a 3-D input's dims 0 and 1 would be read as the batch
// and sequence of a 2-D one's).
TEST(RuntimeErrors, AnInputOfAnotherRankOrWithNoElementsIsNamed) {
  install();
  torch::nn::Sequential model(torch::nn::Linear(16, 32), torch::nn::ReLU(),
                              torch::nn::Linear(32, 4));
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  auto loss = [](const torch::Tensor& out) { return out.pow(2).mean(); };
  rt.step(torch::randn({8, 16}), loss);
  model->zero_grad();
  auto refused = [&](const torch::Tensor& input, const std::string& says) {
    try {
      rt.step(input, loss);
      ADD_FAILURE() << "an input of " << input.sizes() << " was trained";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr(says));
    }
  };
  refused(torch::randn({8, 4, 16}),
          "the input is 8x4x16 (3 dims), but the first input it trained "
          "was 8x16 (2 dims)");
  refused(torch::randn({2, 4, 3, 16}), "make a Runtime for each kind of input");
  refused(torch::randn({0, 16}), "the input (0x16) is empty");
  for (const auto& p : model->parameters()) EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(rt.stats().steps, 1);
  EXPECT_NO_THROW(rt.step(torch::randn({12, 16}), loss));
}

// An input whose dims Options::varying_dims does not fit is refused without becoming the first
// input trained: the input of the rank the options name trains after it.
TEST(RuntimeErrors, AnInputRefusedForItsVaryingDimsSetsNoRank) {
  install();
  torch::nn::Sequential model(torch::nn::Linear(4, 4), torch::nn::ReLU(), torch::nn::Linear(4, 1));
  Options o;
  o.budget_bytes = 64 << 20;
  o.varying_dims = {0, 1, 2};
  Runtime rt(model, o);
  const auto loss = [](const torch::Tensor& out) { return out.sum(); };
  EXPECT_THROW(rt.step(torch::randn({8, 4}), loss), ConfigError);
  EXPECT_NO_THROW(rt.step(torch::randn({8, 3, 4}), loss));
  EXPECT_EQ(rt.last_step().shape, "8x3x4");
}

// A first step that the model refuses (an image of one channel for a convolution that takes
// three) sets neither the rank nor the fixed dims: the input the model takes trains after it,
// and is then the first, whose channels a later input must have.
TEST(RuntimeErrors, AFirstStepThatThrowsIsNotTheFirstInputTrained) {
  install();
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)),
                              torch::nn::ReLU(), torch::nn::Flatten());
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  EXPECT_THROW(rt.step(torch::randn({2, 1, 8, 8}), loss), c10::Error);
  EXPECT_EQ(rt.stats().steps, 0);
  ASSERT_NO_THROW(rt.step(torch::randn({2, 3, 8, 8}), loss));
  EXPECT_EQ(rt.last_step().shape, "2x8x8");
  EXPECT_NO_THROW(rt.step(torch::randn({4, 3, 6, 6}), loss));
  try {
    rt.step(torch::randn({2, 1, 8, 8}), loss);
    ADD_FAILURE() << "an input of one channel trained after one of three";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("where the first input it trained had 3 (2x3x8x8)"));
  }
  EXPECT_EQ(rt.stats().steps, 2);
}

// Under plan_once, a first step whose loss threw does not fix the shape every plan is for: the
// first batch that trains does, and its shape is the one measured and planned.
TEST(RuntimeErrors, UnderPlanOnceAFirstStepThatThrowsSetsNoShape) {
  install();
  auto w = testing::small_transformer();
  const std::string path = testing::fresh_state_path("monet_runtime_plan_once_throws.json");
  Options o = testing::half_peak_with_state(*w, path);
  o.plan_once = true;
  Runtime rt(w->make_model(3), o);
  const workloads::Batch largest = w->largest_batch();
  const workloads::Batch small = w->batch(5, 0);
  ASSERT_LT(small.input.size(1), largest.input.size(1));
  EXPECT_THROW(rt.step(small.input,
                       [](const torch::Tensor&) -> torch::Tensor {
                         throw std::runtime_error("labels of another batch");
                       }),
               std::runtime_error);
  const auto step = [&](const workloads::Batch& b) {
    rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
    return rt.last_step();
  };
  step(largest);
  const StepReport at_largest = step(largest);
  const StepReport at_small = step(small);
  EXPECT_FALSE(at_small.profiled);
  EXPECT_EQ(at_small.plan, at_largest.plan);
  const Predictor saved = Predictor::load(path);
  EXPECT_EQ(saved.profiled_shapes(), 1);
  EXPECT_TRUE(saved.is_profiled(Shape{largest.input.size(0), largest.input.size(1)}));
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".margins");
}

// A batch the model refuses (another dtype) or whose loss throws, on inputs other than the steps
// before ran on, leaves what those steps measured and planned: the next batch like theirs is
// neither measured again nor planned afresh, and the predictor's state file still holds every
// shape they measured, also where the refused step's own measurement had written over it.
TEST(RuntimeErrors, AStepOnOtherInputsThatDoesNotTrainKeepsWhatWasMeasured) {
  install();
  const std::string path = testing::fresh_state_path("monet_runtime_refused_batch.json");
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::ReLU(),
                              torch::nn::Linear(256, 1));
  Options o;
  o.budget_bytes = 64 << 20;
  o.predictor_state = path;
  Runtime rt(model, o);
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  for (const std::int64_t batch : {8, 16, 32}) rt.step(torch::randn({batch, 4, 64}), loss);
  ASSERT_EQ(rt.stats().profiled_steps, 3);
  const std::string saved = testing::read_file(path);
  ASSERT_EQ(Predictor::load(path).profiled_shapes(), 3);

  // The model refuses it before anything is measured.
  EXPECT_THROW(rt.step(torch::randn({8, 4, 64}, torch::kDouble), loss), c10::Error);
  rt.step(torch::randn({8, 4, 64}), loss);
  EXPECT_FALSE(rt.last_step().profiled);
  EXPECT_TRUE(rt.last_step().plan_from_cache);
  EXPECT_EQ(rt.stats().profiled_steps, 3);

  // Its input needs its gradient: measured afresh (the measurement writes the state), then the
  // planned run's loss throws.
  const auto throws_when_planned = [](const torch::Tensor& out) -> torch::Tensor {
    if (out.grad_fn()) throw std::runtime_error("labels of another batch");
    return out.square().mean();
  };
  EXPECT_THROW(rt.step(torch::randn({8, 4, 64}).requires_grad_(true), throws_when_planned),
               std::runtime_error);
  EXPECT_EQ(rt.stats().profiled_steps, 4) << "the step with an input gradient was not measured";
  EXPECT_EQ(testing::read_file(path), saved);
  rt.step(torch::randn({16, 4, 64}), loss);
  EXPECT_FALSE(rt.last_step().profiled);
  EXPECT_EQ(rt.stats().steps, 5);
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".margins");
}

// The retry margins saved beside the predictor's state cannot be written (here a folder stands
// where the file goes): a warning, not the batch. The batch that ran out of memory runs again,
// and a step that trained returns its loss when the margins come down.
TEST(RuntimeErrors, MarginsThatCannotBeSavedLoseNoBatch) {
  install();
  auto w = testing::small_transformer(64);
  const auto b = w->batch(5, 0);
  const std::string path = testing::fresh_state_path("monet_runtime_margins_unsaved.json");
  Options o;
  o.budget_bytes = 64 << 20;
  o.predictor_state = path;
  o.margin_relax_steps = 1;
  Runtime rt(w->make_model(4), o);
  int hogs = 0;
  const Runtime::LossFn loss = hogging_loss(*w, b, o.budget_bytes, &hogs);
  rt.step(b.input, loss);
  const std::int64_t unraised = rt.last_step().budget_bytes;
  std::filesystem::remove(path + ".margins");
  ASSERT_TRUE(std::filesystem::create_directory(path + ".margins"));
  hogs = 1;
  ASSERT_NO_THROW(rt.step(b.input, loss));
  EXPECT_EQ(rt.last_step().retries, 1);
  EXPECT_LT(rt.last_step().budget_bytes, unraised) << "the plan that ran out of memory ran again";
  ASSERT_NO_THROW(rt.step(b.input, loss));  // the margins come down: saved again, and refused
  EXPECT_EQ(rt.stats().steps, 3);
  rt.step(b.input, loss);
  EXPECT_EQ(rt.last_step().budget_bytes, unraised);
  std::filesystem::remove_all(path + ".margins");
  std::filesystem::remove(path);
}

// Two runtimes on one device: each step runs under its own runtime's budget, whichever runtime
// was made or stepped last.
TEST(RuntimeErrors, EachRuntimesStepsRunUnderItsOwnBudget) {
  install();
  torch::nn::Sequential big(torch::nn::Linear(64, 256), torch::nn::ReLU(),
                            torch::nn::Linear(256, 1));
  torch::nn::Sequential side(torch::nn::Linear(16, 16));
  Options a_options;
  a_options.budget_bytes = 256 << 20;
  Runtime a(big, a_options);
  Options b_options;
  b_options.budget_bytes = 0;  // no budget
  Runtime b(side, b_options);
  std::size_t seen = 1;
  const auto loss = [&](const torch::Tensor& out) {
    seen = pools::cpu().budget_bytes();
    return out.square().mean();
  };
  a.step(torch::randn({8, 64}), loss);
  EXPECT_EQ(seen, static_cast<std::size_t>(a_options.budget_bytes));
  b.step(torch::randn({8, 16}), loss);
  EXPECT_EQ(seen, 0u);
  a.step(torch::randn({8, 64}), loss);
  EXPECT_EQ(seen, static_cast<std::size_t>(a_options.budget_bytes));
}

// The caller's loss, and what it holds, is let go when the step ends: in training, in eval, and
// where the loss throws.
TEST(RuntimeErrors, TheLossAndWhatItHoldsGoWithTheStep) {
  install();
  torch::nn::Sequential model(torch::nn::Linear(16, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 1));
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  const torch::Tensor held = torch::randn({1 << 16});
  const auto step = [&](bool throws) {
    const auto loss = [held, throws](const torch::Tensor& out) -> torch::Tensor {
      if (throws && out.grad_fn()) throw std::runtime_error("a loss that throws");
      return out.square().mean() + 0 * held.sum();
    };
    return rt.step(torch::randn({8, 16}), loss);
  };
  step(false);
  EXPECT_EQ(held.use_count(), 1) << "the loss of a step that trained is still held";
  EXPECT_THROW(step(true), std::runtime_error);
  EXPECT_EQ(held.use_count(), 1) << "the loss of a step that threw is still held";
  model->eval();
  step(false);
  EXPECT_EQ(held.use_count(), 1) << "the loss of an eval step is still held";
}

// Under plan_once, a batch out of retries is named, with the shape its plan was made for.
TEST(RuntimeErrors, UnderPlanOnceABatchOutOfRetriesNamesItsShapeAndThePlans) {
  install();
  auto w = testing::small_transformer(64);
  const workloads::Batch first = w->batch(5, 0);
  const workloads::Batch later = w->largest_batch();
  ASSERT_NE(first.input.sizes(), later.input.sizes());
  Options o;
  o.budget_bytes = 64 << 20;
  o.plan_once = true;
  o.max_retries = 0;
  Runtime rt(w->make_model(4), o);
  int hogs = 0;
  rt.step(first.input, hogging_loss(*w, first, o.budget_bytes, &hogs));
  hogs = 100;
  const auto dims = [](const workloads::Batch& b) {
    return std::to_string(b.input.size(0)) + "x" + std::to_string(b.input.size(1));
  };
  try {
    rt.step(later.input, hogging_loss(*w, later, o.budget_bytes, &hogs));
    ADD_FAILURE() << "a batch out of memory at every run was not lost";
  } catch (const InfeasibleBudgetError& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("input shape " + dims(later) + " (running the plan made for " +
                                     dims(first) + ", Options::plan_once) ran out of memory"));
  }
}

// A child of the Sequential that gives a tuple (a plain Sequential passes it to the next child)
// is named, with what to do, rather than left to LibTorch's cast error.
struct GivesTupleImpl : torch::nn::Module {
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) { return {x * 2, x}; }
};
TORCH_MODULE(GivesTuple);
struct TakesTupleImpl : torch::nn::Module {
  torch::Tensor forward(std::tuple<torch::Tensor, torch::Tensor> x) { return std::get<0>(x); }
};
TORCH_MODULE(TakesTuple);

TEST(RuntimeErrors, AStageThatGivesATupleIsNamed) {
  install();
  torch::nn::Sequential model(torch::nn::Linear(4, 4), GivesTuple(), TakesTuple(),
                              torch::nn::Linear(4, 1));
  for (const std::int64_t budget : {std::int64_t{0}, std::int64_t{64} << 20}) {
    Options o;
    o.budget_bytes = budget;
    Runtime rt(model, o);
    try {
      rt.step(torch::randn({8, 4}), [](const torch::Tensor& out) { return out.sum(); });
      ADD_FAILURE() << "a stage that gives a tuple ran, budget " << budget;
    } catch (const ConfigError& e) {
      EXPECT_THAT(std::string(e.what()),
                  ::testing::HasSubstr("stage 1:GivesTuple gives a std::tuple"));
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("one module that returns a tensor"));
    }
  }
}

// An error of the caller's loss, or one LibTorch raises that is not out of memory, reaches the
// caller as it was thrown, holding nothing; the next step is exact.
TEST(RuntimeErrors, ALossThatThrowsReachesTheCallerAndTheNextStepIsExact) {
  install();
  auto w = testing::small_resnet();
  auto model = w->make_model(1);
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  const auto b = w->batch(1, 0);
  rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
  model->zero_grad();
  const std::size_t held = pools::cpu().stats().allocated_bytes;
  EXPECT_THROW(
      {
        try {
          rt.step(b.input, [](const torch::Tensor&) -> torch::Tensor {
            throw std::runtime_error("a label out of range");
          });
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "a label out of range");
          throw;
        }
      },
      std::runtime_error);
  // A loss that is not a scalar: LibTorch's own error from backward.
  EXPECT_THROW(rt.step(b.input, [](const torch::Tensor& out) { return out; }), c10::Error);
  EXPECT_EQ(pools::cpu().stats().allocated_bytes, held);
  const std::vector<torch::Tensor> expected = testing::plain_gradients(model, *w, b, 7);
  model->zero_grad();
  torch::manual_seed(7);
  rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
  std::vector<torch::Tensor> got = testing::gradients_of(model);
  EXPECT_LT(testing::worst_relative_difference(got, expected), 1e-6);
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
  Options repeats;
  repeats.measure_repeats = 0;
  EXPECT_THROW(Runtime(w->make_model(1), repeats), ConfigError);
  repeats.measure_repeats = Options::kMaxMeasureRepeats + 1;
  try {
    Runtime rt(w->make_model(1), repeats);
    ADD_FAILURE() << "21 timings of every mode of a new shape were taken";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("monet::Options::measure_repeats is 21; use 1 to 20"));
  }
  Options no_cache;
  no_cache.plan_cache_capacity = 0;
  try {
    Runtime rt(w->make_model(1), no_cache);
    ADD_FAILURE() << "a cache of no plans was taken";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("monet::Options::plan_cache_capacity is 0"));
  }
  // A predictor state in a folder that is not there: named when the runtime is made, not when it
  // first saves, after a measured step.
  Options state;
  state.predictor_state =
      (std::filesystem::temp_directory_path() / "monet-no-such-folder" / "state.json").string();
  try {
    Runtime rt(w->make_model(1), state);
    ADD_FAILURE() << "a state in a folder that is not there was taken";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("MONET_PREDICTOR_STATE): cannot write the predictor's state"));
  }
  for (const std::vector<int>& bad : {std::vector<int>{0, 0}, std::vector<int>{-1}}) {
    Options named;
    named.varying_dims = bad;
    try {
      Runtime rt(w->make_model(1), named);
      ADD_FAILURE() << "varying_dims {" << bad[0] << ", ...} was taken";
    } catch (const ConfigError& e) {
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("name each varying dim"));
    }
  }
  Options five;
  five.varying_dims = {0, 1, 2, 3, 4};
  try {
    Runtime rt(w->make_model(1), five);
    ADD_FAILURE() << "five varying dims were taken";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("learns on at most 4"));
  }
  Options dims;
  dims.varying_dims = {7};
  dims.budget_bytes = 1 << 30;
  Runtime rt(w->make_model(1), dims);
  const auto b = w->batch(1, 0);
  EXPECT_THROW(rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); }),
               ConfigError);
}

// Options::from_env() reads MONET_BUDGET, not the budget a Runtime set on the pool since.
TEST(RuntimeErrors, BudgetFromTheEnvironmentNotFromThePool) {
  install();
  ::unsetenv("MONET_BUDGET");
  {
    Options o;
    o.budget_bytes = 64 << 20;
    Runtime rt(torch::nn::Sequential(torch::nn::Linear(4, 4)), o);
  }
  EXPECT_EQ(Options::from_env().budget_bytes, 0);
  ::setenv("MONET_BUDGET", "32MiB", 1);
  EXPECT_EQ(Options::from_env().budget_bytes, std::int64_t{32} << 20);
  ::unsetenv("MONET_BUDGET");
}

// Sets `variable` to `text` and says what Options::from_env() refused it with: "taken" where it
// took it.
std::string from_env_refusal(const char* variable, const char* text) {
  ::setenv(variable, text, 1);
  try {
    Options::from_env();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "taken";
}

// Options::from_env reads MONET_STAGE_CLOCK; anything but auto or wall names the variable and its
// values.
TEST(RuntimeErrors, StageClockFromTheEnvironment) {
  ::setenv("MONET_STAGE_CLOCK", "wall", 1);
  EXPECT_EQ(Options::from_env().stage_clock, StageClock::kWall);
  const std::string why = from_env_refusal("MONET_STAGE_CLOCK", "cupti");
  EXPECT_THAT(why, ::testing::HasSubstr("MONET_STAGE_CLOCK='cupti'"));
  EXPECT_THAT(why, ::testing::HasSubstr("auto"));
  ::unsetenv("MONET_STAGE_CLOCK");
  EXPECT_EQ(Options::from_env().stage_clock, StageClock::kAuto);
}

// Options::from_env reads MONET_MEASURE_REPEATS: a whole number from 1 to 20.
TEST(RuntimeErrors, MeasureRepeatsFromTheEnvironment) {
  EXPECT_EQ(Options::from_env().measure_repeats, 1);
  ::setenv("MONET_MEASURE_REPEATS", "3", 1);
  EXPECT_EQ(Options::from_env().measure_repeats, 3);
  for (const char* bad : {"0", "-2", "three", "3x", "2.5", "21"}) {
    const std::string why = from_env_refusal("MONET_MEASURE_REPEATS", bad);
    EXPECT_THAT(why, ::testing::HasSubstr(std::string("MONET_MEASURE_REPEATS='") + bad + "'"));
    EXPECT_THAT(why, ::testing::HasSubstr("from 1"));
  }
  ::unsetenv("MONET_MEASURE_REPEATS");
}

// MONET_MARGIN takes 0 to 90% (README, monet-knobs), both ends included, and a Runtime takes the
// margin Options::from_env() read; past 90% it names the variable.
TEST(RuntimeErrors, MarginFromTheEnvironmentUpTo90Percent) {
  install();
  auto w = testing::small_resnet();
  for (const char* text : {"0", "15%", "0.15", "90%", "0.9"}) {
    ::setenv("MONET_MARGIN", text, 1);
    const Options o = Options::from_env();
    EXPECT_NO_THROW(Runtime(w->make_model(1), o)) << "MONET_MARGIN=" << text;
  }
  EXPECT_DOUBLE_EQ(Options::from_env().margin, 0.9);
  for (const char* bad : {"91%", "0.95", "15", "-1%", "ten"}) {
    EXPECT_THAT(from_env_refusal("MONET_MARGIN", bad),
                ::testing::HasSubstr(std::string("MONET_MARGIN='") + bad + "'"));
  }
  ::unsetenv("MONET_MARGIN");
  EXPECT_DOUBLE_EQ(Options::from_env().margin, 0.10);
}

// A custom autograd Function that keeps a tensor in ctx->saved_data: autograd releases that only
// with the node, so the stage holds it until the whole step's backward is over.
struct KeepsInSavedData : torch::autograd::Function<KeepsInSavedData> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->saved_data["doubled"] = x * 2;
    return x * 2;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0] * 2};
  }
};

struct HoldsPastBackwardImpl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) { return KeepsInSavedData::apply(x); }
};
TORCH_MODULE(HoldsPastBackward);

TEST(RuntimeErrors, AStageThatHoldsTensorsPastItsBackwardIsNamed) {
  install();
  torch::nn::Sequential model(torch::nn::Linear(64, 64), HoldsPastBackward(),
                              torch::nn::Linear(64, 1));
  Options o;
  o.budget_bytes = 1 << 30;
  Runtime rt(model, o);
  const torch::Tensor x = torch::randn({32, 64});
  ::testing::internal::CaptureStderr();
  rt.step(x, [](const torch::Tensor& out) { return out.sum(); });
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rt.stats().profiled_steps, 1);
  // The doubled input: 32 x 64 floats.
  EXPECT_THAT(said, ::testing::HasSubstr("stage 1:HoldsPastBackward in mode default still holds "
                                         "8.00 KiB after its backward ran"));
  EXPECT_THAT(said, ::testing::HasSubstr("ctx->save_for_backward"));
  // Torch's own modules release what they keep: only the one stage is named.
  EXPECT_THAT(said, ::testing::Not(::testing::HasSubstr("Linear in mode")));
}

// How the compact mode of HalvesWhatItKeeps keeps its half.
enum class Keeping {
  kSaved,                   // as a saved tensor, released when the node's backward has run
  kSavedData,               // in ctx->saved_data, held until the node is destroyed
  kSavedAndAWorkspaceOnce,  // as a saved tensor, and on its first run it also makes a workspace
                            // that lives on, as a library's lazily made workspace does
};

// A variant-aware operator whose compact mode keeps half of what its default mode keeps.
struct HalvesWhatItKeeps : torch::autograd::Function<HalvesWhatItKeeps> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               int64_t keeping) {
    count_variant_op_call();
    const torch::Tensor half = x.narrow(1, 0, x.size(1) / 2) * 2;
    if (op_mode() == OpMode::kDefault) {
      ctx->save_for_backward({x * 2});
    } else if (static_cast<Keeping>(keeping) == Keeping::kSavedData) {
      ctx->saved_data["half"] = half;
    } else {
      ctx->save_for_backward({half});
      static torch::Tensor workspace;
      if (static_cast<Keeping>(keeping) == Keeping::kSavedAndAWorkspaceOnce &&
          !workspace.defined()) {
        workspace = torch::empty({256});
      }
    }
    return x * 2;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0] * 2, torch::Tensor()};
  }
};

struct LeanModeImpl : torch::nn::Module {
  explicit LeanModeImpl(Keeping keeping) : keeping(keeping) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return HalvesWhatItKeeps::apply(x, static_cast<int64_t>(keeping));
  }
  Keeping keeping;
};
TORCH_MODULE(LeanMode);

// A lean mode that holds what it keeps past its backward is not one of the stage's modes: the
// planner never picks it (the predictor's state lists the modes kept), and the warning says so.
// The same mode freeing what it keeps is kept, and so is one that makes a lasting workspace on its
// first run only.
TEST(RuntimeErrors, ALeanModeThatHoldsTensorsPastItsBackwardIsNotRun) {
  install();
  for (const Keeping keeping :
       {Keeping::kSavedData, Keeping::kSaved, Keeping::kSavedAndAWorkspaceOnce}) {
    SCOPED_TRACE(static_cast<int>(keeping));
    const std::string path = testing::fresh_state_path("monet_runtime_lean_mode_state.json");
    // The Tanh runs with the Linear before it (it keeps not its input, nor the Linear its
    // output) and keeps its output, so the lean stage runs alone.
    torch::nn::Sequential model(torch::nn::Linear(64, 64), torch::nn::Tanh(), LeanMode(keeping),
                                torch::nn::Linear(64, 1));
    Options o;
    o.budget_bytes = 1 << 30;
    o.predictor_state = path;
    Runtime rt(model, o);
    const torch::Tensor x = torch::randn({32, 64});
    ::testing::internal::CaptureStderr();
    rt.step(x, [](const torch::Tensor& out) { return out.sum(); });
    const std::string said = ::testing::internal::GetCapturedStderr();
    const std::string state = testing::read_file(path);
    ASSERT_THAT(state, ::testing::HasSubstr("\"name\": \"2:LeanMode\""));
    if (keeping == Keeping::kSavedData) {
      // Half of the doubled input: 32 x 32 floats.
      EXPECT_THAT(said, ::testing::HasSubstr("stage 2:LeanMode in mode compact still holds "
                                             "4.00 KiB after its backward ran"));
      EXPECT_THAT(said, ::testing::HasSubstr("monet will not run the stage in that mode"));
      EXPECT_THAT(state, ::testing::Not(::testing::HasSubstr("\"compact\"")));
    } else {
      EXPECT_THAT(said, ::testing::Not(::testing::HasSubstr("still holds")));
      EXPECT_THAT(state, ::testing::HasSubstr("\"compact\""));
    }
    std::filesystem::remove(path);
  }
}

// The CNN's basic blocks recompute their second convolution in mode recompute, and keep less
// in it than in compact: the profiler measures it there, and keeps it. Stages whose ops keep the
// same in recompute as in compact (the stem's BatchNorm and ReLU) are not measured in it.
TEST(RuntimeModes, RecomputeIsMeasuredWhereAnOpRecomputesAndNowhereElse) {
  install();
  const std::string path = testing::fresh_state_path("monet_runtime_recompute_state.json");
  auto w = testing::small_resnet(1);
  torch::nn::Sequential model = w->make_model(3);
  Options o;
  o.budget_bytes = 1 << 30;
  o.predictor_state = path;
  Runtime rt(model, o);
  const workloads::Batch b = w->largest_batch();
  rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
  const Predictor state = Predictor::load(path);
  int blocks = 0, lean = 0;
  for (const StageLayout& stage : state.layout()) {
    SCOPED_TRACE(stage.name);
    const std::vector<std::string>& v = stage.variants;
    const bool recomputes = std::find(v.begin(), v.end(), "recompute") != v.end();
    if (stage.name.find("BasicBlock") != std::string::npos) {
      ++blocks;
      EXPECT_EQ(v, (std::vector<std::string>{"default", "compact", "recompute"}));
    } else {
      EXPECT_FALSE(recomputes);
      if (v.size() > 1) ++lean;
    }
  }
  EXPECT_EQ(blocks, 2);
  EXPECT_GT(lean, 0) << "the stem's BatchNorm and ReLU have a compact mode";
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace monet
