// What a step leaves behind and what autograd may ask of it: buffers a module reads and writes,
// a module in two stages, leaves of the loss and sparse gradients across a batch run again, an
// out-of-memory error without a budget, gradients of gradients, steps from two threads.
#include <c10/util/Exception.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "allocator/device_pools.h"
#include "monet/errors.h"
#include "runtime_testing.h"

namespace monet {
namespace {

// y = x * s, and in training s grows by one after each forward: a module whose forward reads the
// buffer it updates (as Batch Renormalization, or a quantization observer).
struct ScaledImpl : torch::nn::Module {
  ScaledImpl() { s = register_buffer("s", torch::ones({1})); }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = x * s.clone();
    if (is_training()) {
      const torch::NoGradGuard no_grad;
      s.add_(1);
    }
    return y;
  }
  torch::Tensor s;
};
TORCH_MODULE(Scaled);

Options budget_of(std::int64_t bytes, Strategy strategy = Strategy::kMonet) {
  Options o;
  o.budget_bytes = bytes;
  o.strategy = strategy;
  return o;
}

torch::Tensor sum_loss(const torch::Tensor& out) { return out.sum(); }

TEST(RuntimeState, ACheckpointRecomputesFromTheBuffersItsForwardRead) {
  install();
  const auto make = [] {
    torch::manual_seed(1);
    return torch::nn::Sequential(torch::nn::Linear(4, 4), Scaled(), torch::nn::Linear(4, 1));
  };
  const torch::Tensor x = torch::randn({8, 4});
  auto plain = make();
  for (int step = 0; step < 2; ++step) {
    plain->zero_grad();
    plain->forward(x).sum().backward();
  }

  auto model = make();
  Runtime rt(model, budget_of(256 << 20, Strategy::kAll));
  rt.step(x, sum_loss);  // measured: the measurement puts the buffer back
  model->zero_grad();
  rt.step(x, sum_loss);  // planned: every stage checkpointed
  ASSERT_NE(rt.last_step().plan.find('C'), std::string::npos) << rt.last_step().plan;
  EXPECT_LE(testing::worst_relative_difference(testing::gradients_of(model),
                                               testing::gradients_of(plain)),
            1e-6);
  // Two steps, each one forward as far as the buffer can tell.
  EXPECT_EQ(model[1]->buffers()[0].item<float>(), 3.0f);
}

TEST(RuntimeState, AModuleInTwoStagesEndsAMeasuredStepAsAPlainStepLeavesIt) {
  install();
  const auto make = [] {
    torch::manual_seed(1);
    torch::nn::BatchNorm1d bn(8);
    torch::nn::Sequential s;
    s->push_back(torch::nn::Linear(8, 8));
    s->push_back(bn);
    s->push_back(torch::nn::ReLU());
    s->push_back(torch::nn::Linear(8, 8));
    s->push_back(bn);
    s->push_back(torch::nn::Linear(8, 1));
    return s;
  };
  const torch::Tensor x = torch::randn({16, 8});
  auto plain = make();
  plain->forward(x).sum().backward();

  auto model = make();
  Runtime rt(model, budget_of(256 << 20));
  rt.step(x, sum_loss);
  ASSERT_TRUE(rt.last_step().profiled);
  const auto want = plain[1]->buffers();
  const auto got = model[1]->buffers();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i].to(torch::kDouble), want[i].to(torch::kDouble), 0, 1e-6))
        << "buffer " << i << ": " << got[i] << " against " << want[i];
  }
}

// A loss that raises an out-of-memory error from the backward of the model's output, once, when
// *arm is set: after the loss's own backward has added to its leaves' gradients.
Runtime::LossFn failing_in_backward(const torch::Tensor& weight, bool* arm) {
  return [weight, arm](const torch::Tensor& out) {
    if (torch::GradMode::is_enabled() && *arm) {
      *arm = false;
      out.register_hook([](const torch::Tensor& g) -> torch::Tensor {
        TORCH_CHECK_WITH(OutOfMemoryError, false, "out of memory (a stage's backward, in a test)");
        return g;
      });
    }
    return (out * weight).sum();
  };
}

TEST(RuntimeState, ABatchRunAgainAddsToTheLossesOwnLeavesOnce) {
  install();
  torch::manual_seed(1);
  auto model =
      torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2));
  const torch::Tensor x = torch::randn({8, 4});
  const torch::Tensor weight = torch::ones({2}).requires_grad_(true);  // learnable, in the loss
  Runtime rt(model, budget_of(256 << 20));
  bool arm = false;
  const Runtime::LossFn loss = failing_in_backward(weight, &arm);
  rt.step(x, loss);                               // measures the shape
  weight.mutable_grad() = torch::full({2}, 0.5);  // a gradient accumulated before the batch
  model->zero_grad();
  arm = true;
  rt.step(x, loss);
  EXPECT_EQ(rt.last_step().retries, 1);
  torch::Tensor want;
  {
    const torch::NoGradGuard no_grad;
    want = 0.5 + model->forward(x).sum(0);
  }
  EXPECT_TRUE(torch::allclose(weight.grad(), want, 1e-6, 1e-6))
      << weight.grad() << " against " << want;
}

// A batch whose input needs a gradient, run again after its backward ran out of memory in a hook
// on a weight of the first stage (which autograd runs after it has added to the input's
// gradient): the input, or the leaf it was made from outside the model, gets the batch's gradient
// once.
TEST(RuntimeState, ABatchRunAgainAddsToTheInputsGradientOnce) {
  install();
  for (const bool made_outside : {false, true}) {
    torch::manual_seed(1);
    torch::nn::Linear first(4, 4);
    torch::nn::Sequential model(first, torch::nn::ReLU(), torch::nn::Linear(4, 1));
    const torch::Tensor leaf = torch::randn({8, 4}).requires_grad_(true);
    const torch::Tensor x = made_outside ? leaf * 2 : leaf;
    Runtime rt(model, budget_of(256 << 20));
    bool arm = false;
    first->weight.register_hook([&arm](const torch::Tensor& g) {
      if (arm) {
        arm = false;
        TORCH_CHECK_WITH(OutOfMemoryError, false, "out of memory (a weight's hook, in a test)");
      }
      return g.clone();
    });
    rt.step(x, sum_loss);                            // measures the shape
    leaf.mutable_grad() = torch::full({8, 4}, 0.5);  // a gradient accumulated before the batch
    arm = true;
    rt.step(x, sum_loss);
    ASSERT_EQ(rt.last_step().retries, 1) << made_outside;
    const torch::Tensor again = leaf.detach().clone().requires_grad_(true);
    model->forward(made_outside ? again * 2 : again).sum().backward();
    EXPECT_TRUE(torch::allclose(leaf.grad(), 0.5 + again.grad(), 1e-6, 1e-6))
        << made_outside << ": " << leaf.grad() << " against " << 0.5 + again.grad();
  }
}

TEST(RuntimeState, SparseGradientsStepAndRunAgain) {
  install();
  const auto make = [] {
    torch::manual_seed(1);
    return torch::nn::Sequential(
        torch::nn::Embedding(torch::nn::EmbeddingOptions(16, 4).sparse(true)),
        torch::nn::Linear(4, 1));
  };
  const torch::Tensor x = torch::randint(16, {8, 5});
  auto plain = make();
  plain->forward(x).sum().backward();

  auto model = make();
  Runtime rt(model, budget_of(256 << 20));
  const torch::Tensor one = torch::ones({1});
  bool arm = false;
  const Runtime::LossFn loss = failing_in_backward(one, &arm);
  for (int step = 0; step < 3; ++step) {
    model->zero_grad();  // LibTorch 1.13 zeroes the gradients, a sparse one included
    arm = step == 2;     // the last batch runs out of memory once, after the loss's backward
    ASSERT_NO_THROW(rt.step(x, loss)) << "step " << step;
  }
  EXPECT_EQ(rt.last_step().retries, 1);
  const torch::Tensor got = model->parameters()[0].grad();
  ASSERT_TRUE(got.is_sparse());
  EXPECT_TRUE(torch::allclose(got.to_dense(), plain->parameters()[0].grad().to_dense()));
}

TEST(RuntimeState, WithoutABudgetAnOutOfMemoryErrorReachesTheCallerAsItWas) {
  install();
  auto model =
      torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2));
  Runtime rt(model, budget_of(0));
  int runs = 0;
  try {
    rt.step(torch::randn({8, 4}), [&](const torch::Tensor& out) {
      if (torch::GradMode::is_enabled()) ++runs;
      TORCH_CHECK_WITH(OutOfMemoryError, false, "out of memory (the device, in a test)");
      return out.sum();
    });
    FAIL() << "the step ran out of memory";
  } catch (const InfeasibleBudgetError& e) {
    FAIL() << "a step without a budget blamed the budget: " << e.what();
  } catch (const c10::Error& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("the device, in a test"));
  }
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(rt.stats().retries, 0);
}

// A model whose every stage is checkpointed, after a step made its plan.
struct Checkpointed {
  Checkpointed() {
    install();
    torch::manual_seed(1);
    model =
        torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Tanh(), torch::nn::Linear(4, 1));
    rt.emplace(model, budget_of(256 << 20, Strategy::kAll));
    rt->step(x, sum_loss);
    rt->step(x, sum_loss);
    model->zero_grad();
  }
  ~Checkpointed() { pools::cpu().set_budget_bytes(0); }
  torch::nn::Sequential model;
  torch::Tensor x = torch::randn({8, 4}).requires_grad_(true);
  std::optional<Runtime> rt;
};

TEST(RuntimeState, GradientsOfGradientsThroughACheckpointAreRefused) {
  Checkpointed c;
  const torch::Tensor out = c.rt->forward(c.x);
  ASSERT_TRUE(out.grad_fn());
  try {
    torch::autograd::grad({out.sum()}, {c.x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    FAIL() << "create_graph through a checkpointed segment ran";
  } catch (const UnsupportedError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("create_graph"));
  }
}

// autograd::grad() through a segment would add the segment's parameters' gradients to .grad,
// where the caller asked for none: refused, with .grad left as it was.
TEST(RuntimeState, AutogradGradThroughACheckpointIsRefused) {
  Checkpointed c;
  const torch::Tensor out = c.rt->forward(c.x);
  try {
    torch::autograd::grad({out.sum()}, {c.x});
    FAIL() << "autograd::grad through a checkpointed segment ran";
  } catch (const UnsupportedError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("autograd::grad"));
  }
  for (const auto& p : c.model->parameters()) {
    EXPECT_TRUE(!p.grad().defined() || p.grad().abs().sum().item<float>() == 0.0f);
  }
}

TEST(RuntimeState, AStepWhileAnotherRunsInAnotherThreadIsRefused) {
  install();
  torch::manual_seed(1);
  auto first = torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 1));
  auto second = torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 1));
  Runtime a(first, budget_of(0)), b(second, budget_of(0));
  const torch::Tensor x = torch::randn({8, 4});
  std::promise<void> inside, tried;
  std::shared_future<void> tried_done = tried.get_future().share();
  std::thread other([&] {
    a.step(x, [&](const torch::Tensor& out) {
      if (torch::GradMode::is_enabled()) {
        static std::atomic<bool> once{false};
        if (!once.exchange(true)) {
          inside.set_value();
          tried_done.wait();
        }
      }
      return out.sum();
    });
  });
  inside.get_future().wait();
  EXPECT_THROW(b.step(x, sum_loss), UnsupportedError);
  tried.set_value();
  other.join();
  // One after another, both step.
  EXPECT_NO_THROW(b.step(x, sum_loss));
  EXPECT_NO_THROW(a.step(x, sum_loss));
}

// The budget caps the model's device's pool from the runtime's making: a batch the job makes
// before its first step counts.
TEST(RuntimeState, TheBudgetIsOnThePoolOfTheModelsDeviceFromTheStart) {
  install();
  pools::cpu().set_budget_bytes(0);
  auto model = torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::Linear(4, 1));
  Runtime rt(model, budget_of(200 << 20));
  EXPECT_EQ(pools::cpu().budget_bytes(), std::size_t{200} << 20);
  rt.step(torch::randn({8, 4}), sum_loss);
  EXPECT_EQ(pools::cpu().budget_bytes(), std::size_t{200} << 20);
}

}  // namespace
}  // namespace monet
