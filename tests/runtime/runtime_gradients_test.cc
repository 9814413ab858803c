// Gradients with monet equal gradients without it: for a transformer and a CNN, both with dropout
// or BatchNorm, under every strategy, over several shapes, with checkpointed stages and lean
// variants in the plans; on the CPU, and on a CUDA device where LibTorch has one (the CUDA cases
// skip elsewhere).
//
// Equal means within 1e-6 relative, per parameter, of a plain LibTorch step: recomputation, the
// 1-bit masks and the compact pooling indices give the same numbers. The one exception is a plan
// that runs the output-keeping BatchNorm (alone or fused with ReLU and the next convolution): it
// recovers the normalized input from the rounded output, so its gradients round differently, by
// as much as fp32 itself is off: on the CNN, a plain fp32 step's gradients are 1.8e-6 to 4e-6
// (relative) from the same step in fp64. There, each parameter's gradient must be no further from
// the fp64 step's than twice the plain fp32 step's distance, plus 1e-6.
//
// The CUDA cases run without cuDNN (ATen's own convolutions and BatchNorm): cuDNN picks each
// convolution's algorithm by the workspace it can get, so that a step under a budget may run
// another algorithm than the reference without one (on an H200 the CNN's budgeted steps were
// 3e-4 relative from the reference, TF32 on, its unbudgeted ones within 1e-6): the question
// here is whether monet's recomputation is exact, not whether two cuDNN algorithms agree.
#include <fmt/format.h>

#include "allocator/device_pools.h"
#include "kernels/autocast.h"
#include "monet/bytes.h"
#include "monet/errors.h"
#include "runtime_testing.h"
#include "workloads/harness.h"

namespace monet {
namespace {

using testing::plain_gradients;
using testing::relative_differences;
using testing::worst_relative_difference;

struct Case {
  std::string model;
  Strategy strategy;
  bool cuda = false;
};

class GradientsTest : public ::testing::TestWithParam<Case> {};

TEST_P(GradientsTest, EqualWithAndWithoutMonet) {
  const Case c = GetParam();
  if (c.cuda && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (c.cuda) {
    testing::deterministic_small_cuda();
    at::globalContext().setUserEnabledCuDNN(false);  // see the top of this file
  }
  install();
  const torch::Device device = c.cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  CachingAllocator& pool = workloads::pool_for(device);
  auto w = c.model == "transformer" ? testing::small_transformer(128) : testing::small_resnet();
  auto reference = workloads::model_on(*w, 1, device);
  auto model = workloads::model_on(*w, 1, device);
  // The CNN in fp64, the yardstick for plans with the output-keeping BatchNorm (see above).
  const bool has_batch_norm = w->name() == "resnet";
  torch::nn::Sequential exact{nullptr};
  if (has_batch_norm) {
    exact = w->make_model(1);
    exact->to(device, torch::kDouble);
  }
  // Unconstrained peak at the largest batch, to set a budget that forces checkpoints.
  const std::int64_t peak = workloads::unconstrained_peak(*w, 1, device).in_use_bytes;
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
    if (const std::int64_t least = workloads::least_budget_above(*w, 1, o, device); least > 0) {
      o.budget_bytes = least * 21 / 20;
    }
    // And the fp64 model's parameters, their gradients and one copy of them (6 fp32 sizes).
    if (has_batch_norm) {
      for (const auto& p : model->parameters()) o.budget_bytes += 6 * p.nbytes();
    }
  }
  Runtime rt(model, o);
  int checkpointed = 0, lean = 0;
  std::string plans;
  for (std::int64_t i = 0; i < 6; ++i) {
    const workloads::Batch b = workloads::to_device(w->batch(3, i), device);
    const std::uint64_t seed = 100 + static_cast<std::uint64_t>(i);
    // The reference runs without a budget: it keeps everything.
    pool.set_budget_bytes(0);
    std::vector<torch::Tensor> expected64;
    if (has_batch_norm) {
      expected64 =
          plain_gradients(exact, *w, workloads::Batch{b.input.to(torch::kDouble), b.targets}, seed);
    }
    const auto expected = plain_gradients(reference, *w, b, seed);
    const auto after_plain = torch::rand({4}, device);
    pool.set_budget_bytes(static_cast<std::size_t>(o.budget_bytes));
    model->zero_grad();
    torch::manual_seed(seed);
    rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
    std::vector<torch::Tensor> got = testing::gradients_of(model);
    const double diff = worst_relative_difference(got, expected);
    const std::string where =
        fmt::format("{} {} batch {} shape {} plan {}", c.model, strategy_name(c.strategy), i,
                    rt.last_step().shape, rt.last_step().plan);
    if (diff > 1e-6 && has_batch_norm && rt.last_step().variant_stages > 0) {
      const std::vector<double> plain_error = relative_differences(expected, expected64);
      const std::vector<double> monet_error = relative_differences(got, expected64);
      for (std::size_t k = 0; k < got.size(); ++k) {
        EXPECT_LE(monet_error[k], 2 * plain_error[k] + 1e-6)
            << where << " parameter " << k << ": plain fp32 is " << plain_error[k]
            << " from fp64, monet " << monet_error[k];
      }
    } else {
      EXPECT_LE(diff, 1e-6) << where;
    }
    checkpointed += rt.last_step().checkpointed_stages;
    lean += rt.last_step().variant_stages;
    plans += " " + rt.last_step().plan;
    // The RNG after a step is where the plain step leaves it: same draws afterwards.
    EXPECT_TRUE(torch::equal(torch::rand({4}, device), after_plain));
  }
  if (c.strategy == Strategy::kAll || c.strategy == Strategy::kSqrt || budgeted) {
    EXPECT_GT(checkpointed, 0) << "the test must exercise checkpointed stages";
  }
  // monet's plans run lean variants on the CPU: the transformer's dropout masks, the CNN's fused
  // BatchNorm-ReLU-convolution. On a GPU the planner weighs them by the device's times, and on
  // these small models checkpoints cost less there (an H200 chose none); the variants' CUDA
  // paths are checked op by op against torch's (OpsCudaTest).
  if (c.strategy == Strategy::kMonet && !c.cuda) {
    EXPECT_GT(lean, 0) << "and lean variants; the plans were" << plans << " under a budget of "
                       << o.budget_bytes << " bytes, the peak being " << peak;
  }
}

// A stage that stops the gradient (a detach, or an argmax) leaves the parameters before it without
// one, as a plain step does, under every strategy. Before, a checkpointed segment given no
// gradient got zeros from autograd, recomputed and gave its parameters zero gradients, on which
// SGD's weight decay and momentum, and Adam, then acted.
TEST(Gradients, NoneBeforeAStageThatStopsTheGradient) {
  install();
  const auto make = [](bool argmax) {
    torch::manual_seed(5);
    torch::nn::Sequential m(torch::nn::Linear(64, 64), torch::nn::Tanh());
    if (argmax) {
      m->push_back(torch::nn::Functional(
          [](torch::Tensor x) { return x.argmax(-1, true).to(torch::kFloat); }));
      m->push_back(torch::nn::Linear(1, 64));
    } else {
      m->push_back(torch::nn::Functional([](torch::Tensor x) { return x.detach() * 2; }));
      m->push_back(torch::nn::Linear(64, 64));
    }
    m->push_back(torch::nn::Tanh());
    m->push_back(torch::nn::Linear(64, 64));
    return m;
  };
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  for (bool argmax : {false, true}) {
    for (Strategy strategy : all_strategies()) {
      SCOPED_TRACE(fmt::format("{} {}", argmax ? "argmax" : "detach", strategy_name(strategy)));
      auto model = make(argmax);
      auto plain = make(argmax);
      Options o;
      o.budget_bytes = 64 << 20;
      o.strategy = strategy;
      Runtime rt(model, o);
      for (int i = 0; i < 3; ++i) {
        torch::manual_seed(i);
        const torch::Tensor x = torch::randn({16, 32, 64});
        rt.step(x, loss);
        loss(plain->forward(x)).backward();
        const std::vector<torch::Tensor> got = model->parameters();
        const std::vector<torch::Tensor> expected = plain->parameters();
        for (std::size_t k = 0; k < got.size(); ++k) {
          ASSERT_EQ(got[k].grad().defined(), expected[k].grad().defined())
              << "parameter " << k << ", step " << i << ", plan " << rt.last_step().plan;
          if (expected[k].grad().defined()) {
            EXPECT_TRUE(got[k].grad().allclose(expected[k].grad(), 1e-6, 1e-7)) << k;
          }
        }
      }
      pools::cpu().set_budget_bytes(0);
    }
  }
}

// A BatchNorm followed by an activation that writes its input in place (LeakyReLU and ELU with
// inplace, which monet does not substitute): the two run as one stage, whose output-keeping
// BatchNorm the activation would overwrite. That mode is left out, and the steps give the plain
// step's gradients, under a budget with room and at the least one. Before, the measurement of the
// joined stage in its compact mode failed autograd's check of the BatchNorm's saved output, and
// the step threw.
TEST(Gradients, ABatchNormBeforeAnInPlaceActivationTrainsAsAPlainStep) {
  install();
  const auto make = [] {
    torch::manual_seed(4);
    namespace tnn = torch::nn;
    return tnn::Sequential(tnn::Conv2d(tnn::Conv2dOptions(3, 8, 3).padding(1)), tnn::BatchNorm2d(8),
                           tnn::LeakyReLU(tnn::LeakyReLUOptions().inplace(true)),
                           tnn::Conv2d(tnn::Conv2dOptions(8, 8, 3).padding(1)), tnn::BatchNorm2d(8),
                           tnn::ELU(tnn::ELUOptions().inplace(true)), tnn::Flatten(),
                           tnn::Linear(8 * 16 * 16, 4));
  };
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  const auto budget_of = [](std::int64_t bytes) {
    Options o;
    o.budget_bytes = bytes;
    return o;
  };
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({32, 3, 16, 16});
  std::int64_t least = 0;
  {
    auto model = make();
    Runtime rt(model, budget_of(1 << 20));
    try {
      rt.step(x, loss);
    } catch (const InfeasibleBudgetError& e) {
      least = e.min_feasible_bytes;
    }
    pools::cpu().set_budget_bytes(0);
  }
  ASSERT_GT(least, 0);
  for (std::int64_t budget : {std::int64_t{64} << 20, least}) {
    SCOPED_TRACE(format_bytes(static_cast<std::size_t>(budget)));
    auto model = make();
    auto plain = make();
    Runtime rt(model, budget_of(budget));
    for (int i = 0; i < 3; ++i) {
      model->zero_grad();
      plain->zero_grad();
      ASSERT_NO_THROW(rt.step(x, loss)) << "step " << i;
      pools::cpu().set_budget_bytes(0);
      loss(plain->forward(x)).backward();
      pools::cpu().set_budget_bytes(static_cast<std::size_t>(budget));
      std::vector<torch::Tensor> got, expected;
      for (const auto& p : model->parameters()) got.push_back(p.grad());
      for (const auto& p : plain->parameters()) expected.push_back(p.grad());
      EXPECT_LT(worst_relative_difference(got, expected), 1e-5)
          << "step " << i << ", plan " << rt.last_step().plan;
    }
    EXPECT_EQ(rt.stage_names()[1], "1:BatchNorm2d+2:LeakyReLU");
    pools::cpu().set_budget_bytes(0);
  }
}

// A BatchNorm put in eval while the model trains (its statistics frozen, as fine-tuning does), and
// a Dropout put in eval, run so in the modules monet substitutes for them, whether they were put
// in eval before the Runtime was made or after: running statistics and gradients stay those of a
// plain step. Before, the substitutes took the model's flag at every step: they normalized with
// the batch's statistics and updated the frozen ones.
TEST(Gradients, AModuleInEvalWhileTheModelTrainsStaysInEval) {
  install();
  const auto make = [] {
    torch::manual_seed(5);
    return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)),
                                 torch::nn::BatchNorm2d(8), torch::nn::ReLU(),
                                 torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 3).padding(1)),
                                 torch::nn::BatchNorm2d(8), torch::nn::Dropout(0.5),
                                 torch::nn::Flatten(), torch::nn::Linear(8 * 16 * 16, 10));
  };
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  // Both BatchNorms and the Dropout; or the first BatchNorm alone, which the fused module of the
  // two BatchNorms, the ReLU and the convolution between them then runs apart from the second.
  for (const std::vector<std::size_t>& frozen :
       {std::vector<std::size_t>{1, 4, 5}, std::vector<std::size_t>{1}}) {
    for (bool before : {true, false}) {
      for (Strategy strategy : {Strategy::kAll, Strategy::kMonet}) {
        SCOPED_TRACE(fmt::format("{} frozen, {} the Runtime, {}", frozen.size(),
                                 before ? "before" : "after", strategy_name(strategy)));
        auto model = make();
        auto plain = make();
        const auto freeze = [&] {
          for (std::size_t k : frozen) {
            model[k]->eval();
            plain[k]->eval();
          }
        };
        if (before) freeze();
        Options o;
        o.budget_bytes = 64 << 20;
        o.strategy = strategy;
        Runtime rt(model, o);
        if (!before) freeze();
        for (int i = 0; i < 3; ++i) {
          torch::manual_seed(i);
          const torch::Tensor x = torch::randn({4, 3, 16, 16});
          model->zero_grad();
          plain->zero_grad();
          torch::manual_seed(50 + i);
          rt.step(x, loss);
          torch::manual_seed(50 + i);
          loss(plain->forward(x)).backward();
          std::vector<torch::Tensor> got, expected;
          for (const auto& p : model->parameters()) got.push_back(p.grad());
          for (const auto& p : plain->parameters()) expected.push_back(p.grad());
          EXPECT_LT(worst_relative_difference(got, expected), 1e-5) << "step " << i;
          for (std::size_t k : {1, 4}) {
            const auto ours = model[k]->as<torch::nn::BatchNorm2d>();
            const auto theirs = plain[k]->as<torch::nn::BatchNorm2d>();
            EXPECT_TRUE(ours->running_mean.allclose(theirs->running_mean)) << k;
            EXPECT_TRUE(ours->running_var.allclose(theirs->running_var)) << k;
          }
        }
        pools::cpu().set_budget_bytes(0);
      }
    }
  }
}

// Mixed precision: under autocast (bfloat16 on the CPU, float16 on CUDA) a step with monet runs
// each op in the dtype a plain step runs it in (the fused BatchNorm-ReLU-convolution's convolution
// in autocast's dtype, its BatchNorms in their input's), parameters get float32 gradients, and a
// checkpointed segment recomputes under the autocast its forward ran under, also where backward
// runs outside it (the usual mixed-precision loop: forward and loss under autocast, backward
// after). A checkpointed forward (without grad) must not fill autocast's cache of cast parameters,
// from which its recomputation would take them.
//
// Checkpoints and the transformer's variants are exact: under `dp` (checkpoints only) and on the
// transformer the gradients equal a plain autocast step's within 1e-6 (its backward inside or
// outside autocast, as the step's). The CNN's plans under `monet` run the output-keeping
// BatchNorm, which recovers its input from an output rounded to half precision, once more than
// torch's rounds: their gradients (all parameters as one vector) measured 1.9% to 2.0% from a
// plain autocast step's and are held to 5%. (fp64 is no yardstick here: a plain bfloat16 step of
// this 45-stage CNN is 82% to 90% from the fp64 step.)
//
// Before, the first plan with the fused op threw LibTorch's "Input type (CPUBFloat16Type) and
// weight type (CPUFloatType) should be the same"; without the autocast restored, the
// transformer's recomputed gradients were 0.9% off; and a checkpointed first stage filled the
// cache with casts made without grad, from which its recomputation took them: its parameters got
// no gradient (the CNN's gradient, all parameters as one vector, 36% to 95% off).
void expect_mixed_precision_follows_autocast(const torch::Device& device) {
  install();
  CachingAllocator& pool = workloads::pool_for(device);
  // torch's defaults: bfloat16 on the CPU, float16 on CUDA.
  const kernels::AutocastState mixed = workloads::autocast_for(device);
  struct MixedCase {
    std::string model;
    Strategy strategy;
  };
  for (const MixedCase& c :
       {MixedCase{"transformer", Strategy::kMonet}, MixedCase{"resnet", Strategy::kDp},
        MixedCase{"resnet", Strategy::kMonet}}) {
    SCOPED_TRACE(fmt::format("{} {}", c.model, strategy_name(c.strategy)));
    const bool exact = c.model == "transformer" || c.strategy == Strategy::kDp;
    auto w = c.model == "resnet" ? testing::small_resnet(20) : testing::small_transformer(128);
    auto reference = workloads::model_on(*w, 1, device);
    auto model = workloads::model_on(*w, 1, device);
    std::int64_t peak = 0;
    {
      const kernels::AutocastScope on(mixed);
      peak = workloads::unconstrained_peak(*w, 1, device).in_use_bytes;
    }
    pool.release_cached();
    Options o;
    o.strategy = c.strategy;
    o.budget_bytes = peak * 7 / 10;
    Runtime rt(model, o);
    int checkpointed = 0, lean = 0;
    // An autocast region for each step (its cache emptied when it ends), as a loop that enters
    // autocast for each batch has.
    for (std::int64_t i = 0; i < 5; ++i) {
      const workloads::Batch b =
          workloads::to_device(i == 0 ? w->largest_batch() : w->batch(3, i), device);
      const std::uint64_t seed = 100 + static_cast<std::uint64_t>(i);
      const auto loss = [&](const torch::Tensor& out) { return w->loss(out, b); };
      pool.set_budget_bytes(0);  // the references keep everything
      std::vector<torch::Tensor> expected;
      {
        const kernels::AutocastScope on(mixed);
        expected = plain_gradients(reference, *w, b, seed);
      }
      // A backward run outside autocast is held to a plain step whose backward also ran outside.
      // Autocast applies to the ops a backward calls too (on CUDA `sum` runs in float32, for one),
      // so the two plain steps can differ in their last bits: on an H200 with LibTorch 2.11, the
      // transformer's outside-backward gradients were 2.6e-4 to 2.9e-4 from the inside-backward
      // plain step's, also at shapes where nothing was checkpointed.
      const std::vector<torch::Tensor> expected_outside =
          plain_gradients(reference, *w, b, seed, &mixed);
      pool.set_budget_bytes(static_cast<std::size_t>(o.budget_bytes));
      model->zero_grad();
      torch::manual_seed(seed);
      {
        const kernels::AutocastScope on(mixed);
        rt.step(b.input, loss);
      }
      const StepReport r = rt.last_step();
      const std::string where = fmt::format("batch {} shape {} plan {}", i, r.shape, r.plan);
      // Under autocast as without it, planned peaks are the measured ones (within 2.1% here).
      EXPECT_LT(testing::peak_prediction_error(r), 0.10) << where;
      const auto expect_close = [&](const std::vector<torch::Tensor>& got,
                                    const std::vector<torch::Tensor>& expected,
                                    const std::string& where) {
        for (const torch::Tensor& g : got) EXPECT_EQ(g.scalar_type(), torch::kFloat) << where;
        if (exact) {
          EXPECT_LE(worst_relative_difference(got, expected), 1e-6) << where;
        } else {
          EXPECT_LE(testing::whole_relative_difference(got, expected), 0.05) << where;
        }
      };
      std::vector<torch::Tensor> got = testing::gradients_of(model);
      expect_close(got, expected, where);
      checkpointed += r.checkpointed_stages;
      lean += r.variant_stages;
      // The same plan by forward() under autocast, backward outside it. Without a budget: the
      // gradients compared hold memory that forward(), which has no retry, did not plan for.
      pool.set_budget_bytes(0);
      model->zero_grad();
      torch::manual_seed(seed);
      torch::Tensor value;
      {
        const kernels::AutocastScope on(mixed);
        value = loss(rt.forward(b.input));
      }
      value.backward();
      std::vector<torch::Tensor> outside = testing::gradients_of(model);
      expect_close(outside, expected_outside, where + ", backward outside autocast");
    }
    // The CPU pool commits by granule. CUDA's whole segments can hold the budget's free memory in
    // pieces at the largest batch (the runtime then runs it again with more of the budget free,
    // and its gradients are checked above like every other's).
    if (!device.is_cuda()) {
      EXPECT_EQ(rt.stats().retries, 0);
    }
    EXPECT_GT(checkpointed, 0) << "the test must exercise checkpointed stages";
    // On a GPU the planner weighs variants by the device's times (see GradientsTest).
    if (c.strategy == Strategy::kMonet && !device.is_cuda()) {
      EXPECT_GT(lean, 0) << "and lean variants";
    }
    pool.set_budget_bytes(0);
  }
}

TEST(Gradients, MixedPrecisionFollowsAutocast) {
  expect_mixed_precision_follows_autocast(torch::kCPU);
}

// The same with float16 on a CUDA device, where relu and dropout keep their masks through ATen
// operations (their kernels take float32) and max pooling runs torch's op.
TEST(Gradients, MixedPrecisionFollowsAutocastOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  testing::deterministic_small_cuda();
  at::globalContext().setUserEnabledCuDNN(false);  // as GradientsTest's CUDA cases
  expect_mixed_precision_follows_autocast(torch::Device(torch::kCUDA, 0));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool cuda : {false, true}) {
    for (const char* m : {"transformer", "resnet"}) {
      for (Strategy s : all_strategies()) out.push_back({m, s, cuda});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, GradientsTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.model + "_" +
                                  std::string(strategy_name(info.param.strategy)) +
                                  (info.param.cuda ? "_cuda" : "");
                         });

}  // namespace
}  // namespace monet
