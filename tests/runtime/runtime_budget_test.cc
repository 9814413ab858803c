// Over 1,000 steps of random shapes at 80%, 50% and 33% of the unconstrained peak (the
// transformer; a CNN of three blocks per stage at 80%, monet-train's of twenty at 33%): the
// allocator never holds more than the budget, no step is lost, and the retries are counted. The
// same on a CUDA device where LibTorch has one (RuntimeBudgetCuda; skipped elsewhere).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>

#include "allocator/device_pools.h"
#include "kernels/autocast.h"
#include "monet/errors.h"
#include "planner/shape_key.h"
#include "predictor/predictor.h"
#include "runtime/profiler.h"
#include "runtime/rng_state.h"
#include "runtime/stage.h"
#include "runtime_testing.h"
#include "workloads/harness.h"

namespace monet {
namespace {

void train_within(const workloads::Workload& w, double fraction, int steps,
                  const torch::Device& device = torch::kCPU) {
  install();
  const std::int64_t peak = workloads::unconstrained_peak(w, 1, device).in_use_bytes;
  CachingAllocator& pool = workloads::pool_for(device);
  pool.release_cached();
  Options o;
  o.budget_bytes = static_cast<std::int64_t>(static_cast<double>(peak) * fraction);
  auto model = workloads::model_on(w, 2, device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  pool.reset_peaks();
  Runtime rt(model, o);
  int lost = 0;
  // The first step is the largest batch: a budget too small for it fails there, before the rest.
  for (int i = 0; i < steps; ++i) {
    const workloads::Batch b =
        workloads::to_device(i == 0 ? w.largest_batch() : w.batch(11, i), device);
    optimizer.zero_grad();
    try {
      const auto loss = rt.step(b.input, [&](const torch::Tensor& out) { return w.loss(out, b); });
      if (!std::isfinite(loss.item<double>())) ++lost;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "step " << i << " (shape " << w.shape_of(b) << ") was lost: " << e.what();
      ++lost;
    }
    optimizer.step();
  }
  const MemoryStats s = pool.stats();
  const RuntimeStats r = rt.stats();
  EXPECT_LE(s.peak_reserved_bytes, static_cast<std::size_t>(o.budget_bytes));
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(r.steps, steps);
  std::printf(
      "%s on %s at %.0f%% of %.2f MiB: %d steps, peak reserved %.2f MiB of %.2f MiB, peak in use "
      "%.2f MiB, %lld measured shapes, %lld plans, %lld cache hits, %lld retries, %lld plans "
      "dropped\n",
      w.name().c_str(), device.str().c_str(), 100 * fraction, static_cast<double>(peak) / (1 << 20),
      steps, static_cast<double>(s.peak_reserved_bytes) / (1 << 20),
      static_cast<double>(o.budget_bytes) / (1 << 20),
      static_cast<double>(r.max_measured_peak_bytes) / (1 << 20),
      static_cast<long long>(r.profiled_steps), static_cast<long long>(r.plans_made),
      static_cast<long long>(r.cache_hits), static_cast<long long>(r.retries),
      static_cast<long long>(r.dropped_plans));
  pool.set_budget_bytes(0);
}

TEST(RuntimeBudget, Transformer80Percent) {
  train_within(*testing::small_transformer(), 0.80, 1000);
}
TEST(RuntimeBudget, Transformer50Percent) {
  train_within(*testing::small_transformer(), 0.50, 1000);
}
TEST(RuntimeBudget, Transformer33Percent) {
  train_within(*testing::small_transformer(), 0.33, 1000);
}
// The CNN's stages are whole residual blocks: no plan holds less than every block's input plus one
// block's working set (docs/runtime.md). For this small one that, with room for a retry, is about
// 75% of its peak, so it is held to 80%.
TEST(RuntimeBudget, ResNet80Percent) { train_within(*testing::small_resnet(), 0.80, 150); }
// monet-train's and monet-bench's CNN, twenty blocks per stage: a third of its peak holds every
// block's input and one block's working set (docs/runtime.md, "The memory model against real
// steps").
TEST(RuntimeBudget, DeepResNet33Percent) {
  train_within(*workloads::make_resnet_workload(), 0.33, 1000);
}

// Gradients set to none before each step (LibTorch 2.x's zero_grad) are made by each stage's
// backward, not held from the step's start: the plans count them from there (Stage::grad_bytes),
// so the predicted step peaks match the measured ones (here within 1%), on a transformer with
// heavy parameters. Counted from the step's start, as before, the same steps were predicted 38%
// high on average (and BERT-base's on an H200 ~19%).
void predict_with_gradients_made_in_backward(const torch::Device& device) {
  install();
  workloads::TransformerConfig c;
  c.vocab = 1024;
  c.d_model = 128;
  c.heads = 4;
  c.d_ff = 512;
  c.layers = 6;
  c.max_seq = 64;
  c.batch = 8;
  const auto w = workloads::make_transformer_workload(c);
  const std::int64_t peak = workloads::unconstrained_peak(*w, 1, device).in_use_bytes;
  CachingAllocator& pool = workloads::pool_for(device);
  pool.release_cached();
  Options o;
  o.budget_bytes = peak * 2 / 3;  // its parameters leave little to plan below that
  auto model = workloads::model_on(*w, 2, device);
  std::int64_t grad_bytes = 0;
  for (const auto& p : model->parameters()) grad_bytes += static_cast<std::int64_t>(p.nbytes());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  pool.reset_peaks();
  Runtime rt(model, o);
  int predicted = 0;
  double worst = 0.0, sum = 0.0;
  for (int i = 0; i < 30; ++i) {
    const workloads::Batch b =
        workloads::to_device(i == 0 ? w->largest_batch() : w->batch(17, i), device);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
    optimizer.step();
    const StepReport& r = rt.last_step();
    if (r.predicted_peak_bytes == 0) continue;
    const double error = static_cast<double>(r.predicted_peak_bytes - r.measured_peak_bytes) /
                         static_cast<double>(r.measured_peak_bytes);
    worst = std::max(worst, std::abs(error));
    sum += std::abs(error);
    ++predicted;
  }
  EXPECT_LE(pool.stats().peak_reserved_bytes, static_cast<std::size_t>(o.budget_bytes));
  ASSERT_GT(predicted, 15);
  std::printf(
      "gradients made in backward on %s: %.2f MiB of gradients, peak %.2f MiB; %d predicted "
      "steps, mean |error| %.2f%%, worst %.2f%%\n",
      device.str().c_str(), static_cast<double>(grad_bytes) / (1 << 20),
      static_cast<double>(peak) / (1 << 20), predicted, 100.0 * sum / predicted, 100.0 * worst);
  EXPECT_LT(sum / predicted, 0.03);
  EXPECT_LT(worst, 0.08);
  pool.set_budget_bytes(0);
}

// A model being fine-tuned with its first half frozen: autograd keeps nothing for the frozen
// stages, whose inputs need no gradient, and the plans must know it. Measured as if a gradient
// flowed through them, the predicted peaks were 70% to 90% above the measured ones, and the plans
// checkpointed (and recomputed) the frozen stages; gradients equal a plain step's either way.
TEST(RuntimeBudget, AFrozenPrefixIsPlannedAsAStepKeepsIt) {
  install();
  auto w = testing::small_transformer();
  auto model = w->make_model(1);
  std::vector<torch::Tensor> params = model->parameters();
  for (std::size_t i = 0; i < params.size() / 2; ++i) params[i].requires_grad_(false);
  const workloads::Batch largest = w->largest_batch();
  // Every parameter's gradient after `step` (zeros for the frozen ones, which get none).
  const auto gradients = [&](const std::function<void()>& step) {
    model->zero_grad();
    torch::manual_seed(5);
    step();
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters()) {
      grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    }
    return grads;
  };
  const std::vector<torch::Tensor> expected =
      gradients([&] { w->loss(model->forward(largest.input), largest).backward(); });
  const std::int64_t peak = workloads::unconstrained_peak(*w, 1, torch::kCPU).in_use_bytes;
  for (const double fraction : {0.5, 0.33}) {
    SCOPED_TRACE(fraction);
    pools::cpu().release_cached();
    Options o;
    o.budget_bytes = static_cast<std::int64_t>(static_cast<double>(peak) * fraction);
    Runtime rt(model, o);
    pools::cpu().reset_peaks();
    double worst = 0.0;
    for (int i = 0; i < 30; ++i) {
      const workloads::Batch b = i == 0 ? largest : w->batch(3, i);
      model->zero_grad();
      rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
      const StepReport& r = rt.last_step();
      if (r.predicted_peak_bytes == 0) continue;
      worst = std::max(worst, static_cast<double>(r.predicted_peak_bytes - r.measured_peak_bytes) /
                                  static_cast<double>(r.measured_peak_bytes));
    }
    EXPECT_LT(worst, 0.10) << "predicted peaks above the measured ones";
    EXPECT_EQ(rt.stats().retries, 0);
    EXPECT_LE(pools::cpu().stats().peak_reserved_bytes, static_cast<std::size_t>(o.budget_bytes));
    const std::vector<torch::Tensor> got = gradients([&] {
      rt.step(largest.input, [&](const torch::Tensor& out) { return w->loss(out, largest); });
    });
    EXPECT_LT(testing::worst_relative_difference(got, expected), 1e-6) << rt.last_step().plan;
  }
}

// Stages without parameters before the first that trains, on an input that needs no gradient
// (a model that starts by normalising or mixing its input): autograd keeps none of their outputs,
// and each lives only until the next stage has run. Planned as kept or recomputed stages, a
// budget of 1.5 times a plain step's peak (8 MiB) was refused, the least named being 13 MiB; now
// it is planned, and the predicted peaks are the measured ones.
TEST(RuntimeBudget, StagesNoGradientFlowsThroughHoldOnlyTheirLastOutput) {
  install();
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::GELU(), torch::nn::Tanh(), torch::nn::Dropout(0.2),
                              torch::nn::GELU(), torch::nn::Tanh(), torch::nn::Linear(256, 8));
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  const auto input = [](std::int64_t batch) { return torch::randn({batch, 64, 256}); };
  CachingAllocator& pool = pools::cpu();
  pool.set_budget_bytes(0);
  std::int64_t plain_peak = 0;
  {
    const torch::Tensor x = input(32);
    pool.reset_peaks();
    loss(model->forward(x)).backward();
    plain_peak = static_cast<std::int64_t>(pool.stats().peak_requested_bytes);
    model->zero_grad();
  }
  pool.release_cached();
  Options o;
  o.budget_bytes = plain_peak * 3 / 2;  // the margin's 10%, and room for the allocator's rounding
  Runtime rt(model, o);
  double worst = 0.0;
  for (std::int64_t batch : {32, 8, 20, 14, 32, 26}) {
    pool.set_budget_bytes(0);
    const torch::Tensor x = input(batch);
    pool.set_budget_bytes(static_cast<std::size_t>(o.budget_bytes));
    model->zero_grad();
    ASSERT_NO_THROW(rt.step(x, loss)) << "batch " << batch;
    const StepReport& r = rt.last_step();
    EXPECT_LE(r.measured_peak_bytes, o.budget_bytes) << "batch " << batch;
    if (r.predicted_peak_bytes > 0) {
      worst = std::max(worst, std::abs(static_cast<double>(r.predicted_peak_bytes) /
                                           static_cast<double>(r.measured_peak_bytes) -
                                       1.0));
    }
  }
  EXPECT_LT(worst, 0.10);
  EXPECT_EQ(rt.stats().retries, 0);
}

// Freezing half of a model between steps, then unfreezing it (as fine-tuning schedules do): each
// change is measured afresh, since the bytes kept for backward change with it. Before, the first
// measurement after freezing threw (autograd was asked for the gradient of a frozen parameter).
TEST(RuntimeBudget, FreezingAndUnfreezingBetweenStepsIsMeasuredAfresh) {
  install();
  auto w = testing::small_transformer();
  auto model = w->make_model(1);
  const std::int64_t peak = workloads::unconstrained_peak(*w, 1, torch::kCPU).in_use_bytes;
  pools::cpu().release_cached();
  Options o;
  o.budget_bytes = peak / 2;
  Runtime rt(model, o);
  pools::cpu().reset_peaks();
  std::vector<torch::Tensor> params = model->parameters();
  const auto train = [&](int from, int to) {
    std::int64_t profiled = rt.stats().profiled_steps;
    double worst = 0.0;
    for (int i = from; i < to; ++i) {
      const workloads::Batch b = i == from ? w->largest_batch() : w->batch(3, i);
      model->zero_grad();
      EXPECT_NO_THROW(rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); }))
          << "step " << i;
      worst = std::max(worst, testing::peak_prediction_error(rt.last_step()));
    }
    EXPECT_GT(rt.stats().profiled_steps, profiled) << "steps " << from << " to " << to;
    EXPECT_LT(worst, 0.10) << "steps " << from << " to " << to;
  };
  train(0, 20);
  for (std::size_t i = 0; i < params.size() / 2; ++i) params[i].requires_grad_(false);
  train(20, 40);
  for (torch::Tensor& p : params) p.requires_grad_(true);
  train(40, 60);
  EXPECT_EQ(rt.stats().retries, 0);
  EXPECT_LE(pools::cpu().stats().peak_reserved_bytes, static_cast<std::size_t>(o.budget_bytes));
}

// An evaluation step (the model in eval mode, grad mode left on, as a validation loop often
// leaves it) fits wherever training does, and gives the plain model's loss. Before, its forward
// recorded a graph for a backward that never comes and kept every stage's activations: it ran out
// of memory at a third of the peak, on the batch training had just run.
TEST(RuntimeBudget, AnEvaluationStepFitsWhereTrainingDoes) {
  install();
  auto w = testing::small_transformer();
  auto model = w->make_model(1);
  auto plain = w->make_model(1);
  const std::int64_t peak = workloads::unconstrained_peak(*w, 1, torch::kCPU).in_use_bytes;
  pools::cpu().release_cached();
  Options o;
  o.budget_bytes = peak / 3;
  Runtime rt(model, o);
  const workloads::Batch b = w->largest_batch();
  const auto loss = [&](const torch::Tensor& out) { return w->loss(out, b); };
  rt.step(b.input, loss);
  model->eval();
  plain->eval();
  pools::cpu().reset_peaks();
  torch::Tensor evaluated;
  ASSERT_NO_THROW(evaluated = rt.step(b.input, loss));
  EXPECT_LE(pools::cpu().stats().peak_reserved_bytes, static_cast<std::size_t>(o.budget_bytes));
  pools::cpu().set_budget_bytes(0);
  EXPECT_NEAR(evaluated.item<double>(), loss(plain->forward(b.input)).item<double>(), 1e-5);
  pools::cpu().set_budget_bytes(static_cast<std::size_t>(o.budget_bytes));
  model->train();
  EXPECT_NO_THROW(rt.step(b.input, loss));
}

// 40 steps of `w`'s batches (the largest at steps 0 and 20), each run by `step(i, batch)` through
// `rt`, whose steps change what they run on at step 20: the change is measured afresh (shapes are
// measured again after it), no batch is lost or run again, predicted peaks after it are within 10%
// of the measured ones, and the pool stays within `budget` bytes.
void expect_a_change_at_step_20_measured_afresh(
    Runtime& rt, const workloads::Workload& w, std::int64_t budget,
    const std::function<void(int, workloads::Batch)>& step) {
  pools::cpu().reset_peaks();
  std::int64_t profiled_before = 0;
  double worst = 0.0;
  for (int i = 0; i < 40; ++i) {
    if (i == 20) profiled_before = rt.stats().profiled_steps;
    EXPECT_NO_THROW(step(i, i % 20 == 0 ? w.largest_batch() : w.batch(3, i))) << "step " << i;
    if (i >= 20) worst = std::max(worst, testing::peak_prediction_error(rt.last_step()));
  }
  EXPECT_GT(rt.stats().profiled_steps, profiled_before);
  EXPECT_LT(worst, 0.10);
  EXPECT_EQ(rt.stats().retries, 0);
  EXPECT_EQ(rt.stats().steps, 40);
  EXPECT_LE(pools::cpu().stats().peak_reserved_bytes, static_cast<std::size_t>(budget));
  pools::cpu().set_budget_bytes(0);
}

// A model converted to float64 between steps (module.to()) keeps twice the bytes for the same
// shapes: it is measured afresh, and no batch is lost. Before, the runtime planned from float32's
// measurements, ran out of memory four times on the largest shape and lost that batch.
TEST(RuntimeBudget, AModelConvertedToAnotherDtypeIsMeasuredAfresh) {
  install();
  auto w = testing::small_resnet();
  auto model = w->make_model(1);
  const std::int64_t peak = workloads::unconstrained_peak(*w, 1, torch::kCPU).in_use_bytes;
  pools::cpu().release_cached();
  Options o;
  o.budget_bytes = peak * 21 / 10;  // float64 needs checkpoints at its largest shape
  Runtime rt(model, o);
  expect_a_change_at_step_20_measured_afresh(
      rt, *w, o.budget_bytes, [&](int i, workloads::Batch b) {
        if (i == 20) model->to(torch::kDouble);
        if (i >= 20) b.input = b.input.to(torch::kDouble);
        model->zero_grad();
        rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
      });
}

// A model being fine-tuned with its first half frozen, whose caller starts asking for the input's
// gradient after 20 steps (saliency maps, adversarial examples): a gradient now flows through the
// frozen stages, which keep their activations for it, so shapes are measured afresh. Before, the
// plans made from the measurements without it kept the frozen stages' bytes out of every
// prediction.
// On a CPU where oneDNN lays the stem's three input channels out as sixteen (AVX-512), the stem's
// backward for the input's gradient alone takes several times the input (10 MiB here, at the
// largest shape), above 80% of the peak without it: the budget is then the least the runtime
// names for a batch with it.
TEST(RuntimeBudget, AnInputThatStartsNeedingAGradientIsMeasuredAfresh) {
  install();
  auto w = testing::small_resnet();
  const auto freeze_half = [](torch::nn::Sequential& m) {
    std::vector<torch::Tensor> params = m->parameters();
    for (std::size_t i = 0; i < params.size() / 2; ++i) params[i].requires_grad_(false);
  };
  auto model = w->make_model(1);
  freeze_half(model);
  const std::int64_t peak = workloads::unconstrained_peak(*w, 1, torch::kCPU).in_use_bytes;
  pools::cpu().release_cached();
  Options o;
  o.budget_bytes = peak * 8 / 10;  // with the input's gradient, the largest shape needs a plan
  {
    auto probe = w->make_model(1);
    freeze_half(probe);
    Runtime least(probe, o);
    workloads::Batch b = w->largest_batch();
    b.input = b.input.detach().clone().requires_grad_(true);
    try {
      least.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
    } catch (const InfeasibleBudgetError& e) {
      o.budget_bytes = e.min_feasible_bytes;
    }
    pools::cpu().set_budget_bytes(0);
    pools::cpu().release_cached();
  }
  Runtime rt(model, o);
  expect_a_change_at_step_20_measured_afresh(
      rt, *w, o.budget_bytes, [&](int i, workloads::Batch b) {
        if (i >= 20) b.input = b.input.detach().clone().requires_grad_(true);
        model->zero_grad();
        rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
        if (i >= 20) {
          EXPECT_TRUE(b.input.grad().defined()) << "step " << i;
        }
      });
}

// Autocast turned off after 20 mixed-precision steps: the stages now keep other bytes than they
// did under autocast (on LibTorch 1.13 float32 keeps twice bfloat16's), so shapes are measured
// afresh and planned from that. Before, the plans made from the bfloat16 measurements kept every
// stage, predicted peaks 36% under the measured ones and ran out of memory on the largest shape.
// The budget is 80% of the larger of the two unconstrained peaks. It was 80% of float32's, which
// on LibTorch 2.11's CPU is below what bfloat16 needs at all: there bfloat16's least plan at the
// largest shape (13.4 MiB) is about float32's unconstrained peak (13.55 MiB).
TEST(RuntimeBudget, AutocastTurnedOffIsMeasuredAfresh) {
  install();
  const kernels::AutocastState bf16 = workloads::autocast_for(torch::kCPU);  // bfloat16
  auto w = testing::small_resnet();
  auto model = w->make_model(1);
  const std::int64_t fp32_peak = workloads::unconstrained_peak(*w, 1, torch::kCPU).in_use_bytes;
  std::int64_t bf16_peak = 0;
  {
    const kernels::AutocastScope on(bf16);
    bf16_peak = workloads::unconstrained_peak(*w, 1, torch::kCPU).in_use_bytes;
  }
  pools::cpu().release_cached();
  Options o;
  // The larger of the two needs checkpoints at its largest shape.
  o.budget_bytes = std::max(fp32_peak, bf16_peak) * 8 / 10;
  Runtime rt(model, o);
  expect_a_change_at_step_20_measured_afresh(
      rt, *w, o.budget_bytes, [&](int i, workloads::Batch b) {
        model->zero_grad();
        const kernels::AutocastScope scope(i < 20 ? bf16 : kernels::AutocastState());
        rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
      });
}

// LibTorch's own transformer layers (torch::nn::TransformerEncoderLayer) under autocast, every
// stage checkpointed: gradients equal a plain autocast step's, and predicted peaks are within 10%
// of the measured ones. A recomputation keeps its parameters' casts out of autocast's cache, so
// that they go with the stage's saved tensors, as the memory model counts them. Before, the casts
// made there stayed cached to the region's end and the peaks were 15% to 18% above the predicted.
TEST(RuntimeBudget, RecomputedStagesUnderAutocastAreAsPlanned) {
  install();
  const auto make = [] {
    torch::manual_seed(5);
    torch::nn::Sequential m;
    m->push_back(torch::nn::Embedding(100, 64));
    for (int i = 0; i < 4; ++i) {
      m->push_back(torch::nn::TransformerEncoderLayer(
          torch::nn::TransformerEncoderLayerOptions(64, 4).dim_feedforward(128).dropout(0.1)));
    }
    m->push_back(torch::nn::Linear(64, 100));
    return m;
  };
  auto model = make();
  auto plain = make();
  const kernels::AutocastState bf16 = workloads::autocast_for(torch::kCPU);  // bfloat16
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  Options o;
  o.strategy = Strategy::kAll;
  o.budget_bytes = 32 << 20;
  Runtime rt(model, o);
  for (int i = 0; i < 8; ++i) {
    torch::manual_seed(i);
    const torch::Tensor x = torch::randint(0, 100, {16 + 16 * (i % 4), 16});  // sequence, batch
    model->zero_grad();
    plain->zero_grad();
    {
      const kernels::AutocastScope region(bf16);
      torch::manual_seed(50 + i);
      rt.step(x, loss);
    }
    {
      const kernels::AutocastScope region(bf16);
      torch::manual_seed(50 + i);
      loss(plain->forward(x)).backward();
    }
    std::vector<torch::Tensor> got, expected;
    for (const auto& p : model->parameters()) got.push_back(p.grad());
    for (const auto& p : plain->parameters()) expected.push_back(p.grad());
    EXPECT_LE(testing::worst_relative_difference(got, expected), 1e-6) << "step " << i;
    EXPECT_LT(testing::peak_prediction_error(rt.last_step()), 0.10)
        << "step " << i << ": predicted " << rt.last_step().predicted_peak_bytes << ", measured "
        << rt.last_step().measured_peak_bytes;
  }
  EXPECT_EQ(rt.stats().retries, 0);
}

// Every stage a segment of its own: each segment keeps its input and the generators' state from
// its forward to its backward. The state is kept as values, outside the pool, so that the peak is
// what the memory model predicts to the block (until 2026-11-28 each segment held a 5,056-byte
// tensor of it in the CPU pool: 69 KiB over the prediction on this 13-stage chain, at every shape).
TEST(RuntimeBudget, EveryStageCheckpointedPeaksAsPredicted) {
  install();
  {
    const std::uint64_t before = pools::cpu().stats().allocations;
    const RngState rng = RngState::capture();
    const torch::Tensor drawn = torch::rand({4});
    {
      const ForkedRng fork(rng);
      EXPECT_TRUE(torch::equal(torch::rand({4}), drawn));
    }
    EXPECT_FALSE(torch::equal(torch::rand({4}), drawn));  // the draws after the fork go on
    EXPECT_EQ(pools::cpu().stats().allocations - before, 3u) << "only the three draws allocate";
  }
  const kernels::AutocastState bf16 = workloads::autocast_for(torch::kCPU);
  for (bool autocast : {false, true}) {
    torch::manual_seed(5);
    torch::nn::Sequential model;
    for (int i = 0; i < 6; ++i) {
      model->push_back(torch::nn::Linear(256, 256));
      model->push_back(torch::nn::ReLU());
    }
    model->push_back(torch::nn::Linear(256, 10));
    Options o;
    o.strategy = Strategy::kAll;
    o.budget_bytes = 64 << 20;
    Runtime rt(model, o);
    int planned = 0;
    for (int i = 0; i < 9; ++i) {
      const torch::Tensor x = torch::randn({32 + 32 * (i % 3), 256});
      model->zero_grad();
      std::optional<kernels::AutocastScope> region;
      if (autocast) region.emplace(bf16);
      rt.step(x, [](const torch::Tensor& out) { return out.to(torch::kFloat).square().mean(); });
      region.reset();
      const StepReport& r = rt.last_step();
      if (r.predicted_peak_bytes == 0) continue;  // a step that measured its shape
      ++planned;
      // Under autocast the prediction is 1.5 KiB over: the memory model's conservative side.
      EXPECT_LE(r.measured_peak_bytes, r.predicted_peak_bytes + 512)
          << "autocast " << autocast << ", step " << i;
      EXPECT_LE(r.predicted_peak_bytes, r.measured_peak_bytes + 4096)
          << "autocast " << autocast << ", step " << i;
    }
    EXPECT_EQ(planned, 6) << "autocast " << autocast;
  }
}

// Blocks whose stages give their input back, written in place or as a view (Flatten, Identity,
// Unflatten, an in-place LeakyReLU) between a linear layer, GELU and another linear layer.
torch::nn::Sequential aliasing_model() {
  torch::manual_seed(5);
  torch::nn::Sequential m;
  for (int i = 0; i < 6; ++i) {
    m->push_back(torch::nn::Linear(64, 256));
    m->push_back(torch::nn::Flatten(torch::nn::FlattenOptions().start_dim(1)));
    m->push_back(torch::nn::Identity());
    m->push_back(torch::nn::Unflatten(torch::nn::UnflattenOptions(1, {-1, 256})));
    m->push_back(torch::nn::GELU());
    m->push_back(torch::nn::Linear(256, 64));
    m->push_back(torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().inplace(true)));
  }
  return m;
}

// Such stages run with the stage before them: an in-place operator cannot take the leaf that needs
// a gradient a measurement or a checkpointed segment starts from, and the memory model counts a
// stage's input and output apart, where a view shares them. Before, the first measurement threw
// LibTorch's "a leaf Variable that requires grad is being used in an in-place operation"; with a
// Tanh in place of the in-place LeakyReLU, no plan fitted in 60% of the 30 MiB peak (the least
// budget named was 22.4 MiB: each view's bytes counted again), where `dp` and `monet` now train
// within it. A job that starts again from the predictor's state joins the same stages.
TEST(RuntimeBudget, StagesThatGiveBackTheirInputRunWithTheStageBefore) {
  install();
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  const auto batch = [](int i) {
    torch::manual_seed(100 + i);
    return torch::randn({16, i == 0 ? 128 : 8 + (i * 37) % 120, 64});
  };
  std::int64_t peak = 0;
  {
    auto plain = aliasing_model();
    pools::cpu().release_cached();
    pools::cpu().reset_peaks();
    const std::size_t before = pools::cpu().stats().requested_bytes;
    loss(plain->forward(batch(0))).backward();
    peak = static_cast<std::int64_t>(pools::cpu().stats().peak_requested_bytes - before);
  }
  const std::string path = ::testing::TempDir() + "/monet_aliasing_stages_state.json";
  for (Strategy strategy : {Strategy::kDp, Strategy::kMonet}) {
    SCOPED_TRACE(std::string(strategy_name(strategy)));
    std::filesystem::remove(path);
    auto model = aliasing_model();
    auto plain = aliasing_model();
    Options o;
    o.budget_bytes = peak * 3 / 5;
    o.strategy = strategy;
    o.predictor_state = path;
    Runtime rt(model, o);
    double worst = 0.0;
    for (int i = 0; i < 20; ++i) {
      const torch::Tensor x = batch(i);
      model->zero_grad();
      plain->zero_grad();
      ASSERT_NO_THROW(rt.step(x, loss)) << "step " << i;
      worst = std::max(worst, testing::peak_prediction_error(rt.last_step()));
      pools::cpu().set_budget_bytes(0);
      loss(plain->forward(x)).backward();
      pools::cpu().set_budget_bytes(static_cast<std::size_t>(o.budget_bytes));
      std::vector<torch::Tensor> got, expected;
      for (const auto& p : model->parameters()) got.push_back(p.grad());
      for (const auto& p : plain->parameters()) expected.push_back(p.grad());
      EXPECT_LT(testing::worst_relative_difference(got, expected), 1e-6) << "step " << i;
    }
    const std::vector<std::string> names = rt.stage_names();
    EXPECT_EQ(names.size(), 6 * 3 + 1u);  // linear+views, GELU, linear+LeakyReLU; the loss
    EXPECT_EQ(names[0], "0:Linear+1:Flatten+2:Identity+3:Unflatten");
    EXPECT_EQ(names[2], "5:Linear+6:LeakyReLU");
    EXPECT_LT(worst, 0.10);
    EXPECT_EQ(rt.stats().retries, 0);
    // The allocator holds the budget (the plain steps run without one, so its peak is theirs).
    EXPECT_LE(rt.stats().max_measured_peak_bytes, o.budget_bytes);

    auto again = aliasing_model();
    Runtime restarted(again, o);
    restarted.step(batch(0), loss);
    EXPECT_EQ(restarted.stats().profiled_steps, 0);
    EXPECT_EQ(restarted.stage_names(), names);
    pools::cpu().set_budget_bytes(0);
  }
  std::filesystem::remove(path);
}

// The measurement pass tells what each stage's graph keeps of its input and output: a Linear its
// input, a ReLU, Tanh or Softmax their output, a Dropout neither (its mask only), GELU its input,
// the loss (a mean of squares) its input.
TEST(RuntimeBudget, TheMeasurementSaysWhatAStageKeepsOfItsInputAndOutput) {
  install();
  torch::manual_seed(1);
  torch::nn::Sequential model(torch::nn::Linear(16, 32), torch::nn::ReLU(), torch::nn::Dropout(0.5),
                              torch::nn::Tanh(), torch::nn::Softmax(-1), torch::nn::GELU(),
                              torch::nn::Linear(32, 4));
  std::vector<RuntimeStage> stages = cut_stages(model, /*substitute=*/false);
  RuntimeStage loss;
  loss.name = "loss";
  loss.fn = [](const at::Tensor& y) { return y.square().mean(); };
  stages.push_back(loss);
  for (bool input_needs_grad : {false, true}) {
    SCOPED_TRACE(input_needs_grad ? "an input that needs a gradient" : "an input without one");
    const torch::Tensor x = torch::randn({8, 16}).requires_grad_(input_needs_grad);
    const MeasuredChain m = measure_chain(stages, x, pools::cpu(), /*find_variants=*/false,
                                          {OpMode::kDefault}, StageClock::kWall);
    const std::vector<bool> frees_input = {false, true, true, true, true, false, false, false};
    const std::vector<bool> frees_output = {true, false, true, false, false, true, true, true};
    EXPECT_EQ(m.frees_input, frees_input);
    EXPECT_EQ(m.frees_output, frees_output);
  }
  // A stage that gives its input back (Identity) is not said to free it: its output is its input.
  std::vector<RuntimeStage> viewing =
      cut_stages(torch::nn::Sequential(torch::nn::Linear(16, 16), torch::nn::Identity()), false);
  viewing.push_back(loss);
  const MeasuredChain v = measure_chain(viewing, torch::randn({8, 16}), pools::cpu(), false,
                                        {OpMode::kDefault}, StageClock::kWall);
  EXPECT_FALSE(v.frees_input[1]);
  EXPECT_TRUE(v.aliases_input[1]);
}

// A Sequential of single operators: a stage that keeps not its input after one that keeps not its
// output (ReLU, Dropout or Tanh after a Linear, Tanh after a Dropout) runs with the stage before
// it, and the plans' peaks are the steps'. Before, each such tensor was counted as kept from its
// stage's forward to its backward, and keeping every stage was predicted 1.4 to 1.6 times the peak
// measured here.
TEST(RuntimeBudget, AStageThatKeepsNotItsInputRunsWithOneThatKeepsNotItsOutput) {
  install();
  torch::manual_seed(2);
  torch::nn::Sequential model(
      torch::nn::Linear(128, 256), torch::nn::ReLU(), torch::nn::Linear(256, 256),
      torch::nn::Dropout(0.3), torch::nn::Tanh(), torch::nn::Linear(256, 256), torch::nn::Tanh(),
      torch::nn::Linear(256, 256), torch::nn::GELU(), torch::nn::Linear(256, 8));
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  Options o;
  o.budget_bytes = 256 << 20;  // every stage kept
  Runtime rt(model, o);
  int planned = 0;
  for (int i = 0; i < 8; ++i) {
    const torch::Tensor x = torch::randn({16 + 16 * (i % 3), 64, 128});
    model->zero_grad();
    ASSERT_NO_THROW(rt.step(x, loss)) << "step " << i;
    const StepReport& r = rt.last_step();
    if (r.predicted_peak_bytes == 0) continue;  // a step that measured its shape
    ++planned;
    EXPECT_LT(testing::peak_prediction_error(r), 0.03)
        << "step " << i << ": predicted " << r.predicted_peak_bytes << ", measured "
        << r.measured_peak_bytes << ", plan " << r.plan;
  }
  EXPECT_GT(planned, 3);
  const std::vector<std::string> expected = {"0:Linear+1:ReLU", "2:Linear+3:Dropout+4:Tanh",
                                             "5:Linear+6:Tanh", "7:Linear",
                                             "8:GELU",          "9:Linear",
                                             "10:loss"};
  EXPECT_EQ(rt.stage_names(), expected);
  // After a Linear that narrows, a ReLU runs alone: a segment that starts at it keeps the narrow
  // tensor, where one that starts at the Linear would keep the wide one.
  torch::nn::Sequential narrowing(torch::nn::Linear(256, 64), torch::nn::ReLU(),
                                  torch::nn::Linear(64, 8));
  Runtime narrow(narrowing, o);
  narrow.step(torch::randn({16, 64, 256}), loss);
  EXPECT_EQ(narrow.stage_names(),
            (std::vector<std::string>{"0:Linear", "1:ReLU", "2:Linear", "3:loss"}));
}

// Joins follow what the stages keep now. A frozen Linear keeps not its input: freezing the second
// of two Linears joins it, with the ReLU after it, to the first at the measurement made afresh,
// and unfreezing it parts them again, so that a segment can again start between the two. Before,
// joins were never parted, and the unfrozen stages stayed one. Each step's gradients are a plain
// step's throughout.
TEST(RuntimeBudget, StagesAreJoinedAfreshWhenTheStepIsMeasuredAfresh) {
  install();
  torch::manual_seed(4);
  torch::nn::Linear second(128, 128);
  torch::nn::Sequential model(torch::nn::Linear(64, 128), second, torch::nn::ReLU(),
                              torch::nn::Linear(128, 8));
  torch::nn::Sequential plain(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));
  const auto loss = [](const torch::Tensor& out) { return out.square().mean(); };
  Options o;
  o.budget_bytes = 256 << 20;
  Runtime rt(model, o);
  const auto train = [&](bool frozen) {
    for (torch::nn::Sequential m : {model, plain}) {
      for (auto& p : m[1]->parameters()) p.requires_grad_(!frozen);
    }
    for (int i = 0; i < 4; ++i) {
      const torch::Tensor x = torch::randn({32 + 32 * (i % 2), 64, 64});
      plain->zero_grad();
      loss(plain->forward(x)).backward();
      model->zero_grad();
      ASSERT_NO_THROW(rt.step(x, loss)) << "step " << i << (frozen ? ", frozen" : "");
      const std::vector<torch::Tensor> got = model->parameters(), expected = plain->parameters();
      for (std::size_t k = 0; k < got.size(); ++k) {
        ASSERT_EQ(got[k].grad().defined(), expected[k].grad().defined()) << "gradient " << k;
        if (!got[k].grad().defined()) continue;
        EXPECT_TRUE(torch::allclose(got[k].grad(), expected[k].grad(), 1e-5, 1e-7))
            << "gradient " << k << ", step " << i << (frozen ? ", frozen" : "");
      }
      if (rt.last_step().predicted_peak_bytes > 0) {
        EXPECT_LT(testing::peak_prediction_error(rt.last_step()), 0.03)
            << "step " << i << (frozen ? ", frozen" : "") << ", plan " << rt.last_step().plan
            << " predicted " << rt.last_step().predicted_peak_bytes << " measured "
            << rt.last_step().measured_peak_bytes;
      }
    }
  };
  const std::vector<std::string> apart = {"0:Linear", "1:Linear+2:ReLU", "3:Linear", "4:loss"};
  train(false);
  EXPECT_EQ(rt.stage_names(), apart);
  train(true);
  EXPECT_EQ(rt.stage_names(),
            (std::vector<std::string>{"0:Linear+1:Linear+2:ReLU", "3:Linear", "4:loss"}));
  train(false);
  EXPECT_EQ(rt.stage_names(), apart);
}

// A checkpointed segment holds its output's gradient through the backward of every stage in it:
// autograd hands the segment's backward that gradient and holds it until the backward returns.
// Here `sqrt` runs the two Linears before the head as one segment, and the first one's backward
// (its weight's gradient and the input's, a wide tensor) peaks with the second one's wide output
// gradient still held. Before the model held it, the plan's peak at 128 rows was predicted
// 942,312 bytes (7.9%) under the step's.
TEST(RuntimeBudget, ASegmentHoldsItsOutputGradientThroughItsWholeBackward) {
  install();
  torch::manual_seed(5);
  torch::nn::Sequential model(torch::nn::Linear(4096, 64), torch::nn::Linear(64, 4096),
                              torch::nn::Linear(4096, 8));
  Options o;
  o.strategy = Strategy::kSqrt;
  o.budget_bytes = 256 << 20;
  Runtime rt(model, o);
  int planned = 0;
  for (int i = 0; i < 5; ++i) {
    const torch::Tensor x = torch::randn({128 + 64 * (i % 3), 4096}).requires_grad_(true);
    model->zero_grad();
    rt.step(x, [](const torch::Tensor& out) { return out.square().mean(); });
    const StepReport& r = rt.last_step();
    if (r.predicted_peak_bytes == 0) continue;  // a step that measured its shape
    ++planned;
    EXPECT_EQ(r.plan.substr(0, 2), "CC") << "the two Linears as one segment";
    EXPECT_LE(r.measured_peak_bytes, r.predicted_peak_bytes + 512) << "step " << i;
    EXPECT_LT(testing::peak_prediction_error(r), 0.001)
        << "step " << i << ": predicted " << r.predicted_peak_bytes << ", measured "
        << r.measured_peak_bytes;
  }
  EXPECT_GT(planned, 1);
}

// An input that needs a gradient (adversarial training, saliency): it gets the plain step's, under
// every strategy, and the plans count its bytes in the first stage's backward. Before, a plan that
// checkpointed the first stage peaked 4 MiB (22%) above its prediction here.
TEST(RuntimeBudget, AnInputThatNeedsAGradientGetsItAndIsPlannedWithIt) {
  install();
  auto w = testing::small_resnet();
  auto model = w->make_model(1);
  const workloads::Batch b = w->largest_batch();
  const auto input_gradient = [&](const std::function<void(const torch::Tensor&)>& step) {
    torch::Tensor x = b.input.detach().clone().requires_grad_(true);
    model->zero_grad();
    torch::manual_seed(5);
    step(x);
    return x.grad();
  };
  const torch::Tensor expected =
      input_gradient([&](const torch::Tensor& x) { w->loss(model->forward(x), b).backward(); });
  for (const Strategy strategy :
       {Strategy::kNone, Strategy::kAll, Strategy::kDp, Strategy::kMonet}) {
    SCOPED_TRACE(static_cast<int>(strategy));
    Options o;
    o.budget_bytes = 40 << 20;
    o.strategy = strategy;
    Runtime rt(model, o);
    torch::Tensor got;
    for (int i = 0; i < 3; ++i) {  // a measured step, then planned ones
      got = input_gradient([&](const torch::Tensor& x) {
        rt.step(x, [&](const torch::Tensor& out) { return w->loss(out, b); });
      });
    }
    ASSERT_TRUE(got.defined());
    EXPECT_LT((got - expected).norm().item<double>() / expected.norm().item<double>(), 1e-6);
    const StepReport& r = rt.last_step();
    EXPECT_GE(static_cast<double>(r.predicted_peak_bytes),
              0.98 * static_cast<double>(r.measured_peak_bytes))
        << r.plan;
  }
}

// Where a plan checkpoints stages that no gradient flows through (here `all`, which checkpoints
// every stage), they run once, plainly: recomputing them in backward would buy nothing.
TEST(RuntimeBudget, AStageNoGradientFlowsThroughIsNotRecomputed) {
  install();
  int calls = 0;
  torch::nn::Linear frozen(16, 32);
  for (auto& p : frozen->parameters()) p.requires_grad_(false);
  torch::nn::Sequential model(frozen, torch::nn::Functional([&](const torch::Tensor& x) {
                                ++calls;
                                return torch::relu(x);
                              }),
                              torch::nn::Linear(32, 4),
                              torch::nn::Functional([&](const torch::Tensor& x) {
                                ++calls;
                                return torch::tanh(x);
                              }));
  Options o;
  o.budget_bytes = 1 << 30;
  o.strategy = Strategy::kAll;
  Runtime rt(model, o);
  const auto loss = [](const torch::Tensor& out) { return out.pow(2).mean(); };
  rt.step(torch::randn({8, 16}), loss);  // measures the shape
  calls = 0;
  rt.step(torch::randn({8, 16}), loss);
  EXPECT_EQ(rt.last_step().plan.find('K'), std::string::npos) << rt.last_step().plan;
  // The relu after the frozen Linear once; the tanh after the trained one twice (its segment is
  // recomputed in backward).
  EXPECT_EQ(calls, 3);
}

TEST(RuntimeBudget, GradientsMadeInBackwardArePlannedWhereTheyAppear) {
  predict_with_gradients_made_in_backward(torch::kCPU);
}

// A parameter two stages use (tied weights): autograd holds the later stage's part of its
// gradient until the earlier stage's arrives and sums them out of place. Without counting that,
// the step peaks were one weight (gradients set to none) or two (zeroed) above the prediction,
// and the shape was measured again at every step.
TEST(RuntimeBudget, ASharedParametersGradientIsPredicted) {
  install();
  torch::nn::Linear shared(512, 512);
  torch::nn::Sequential model(shared, torch::nn::ReLU(), shared, torch::nn::ReLU(),
                              torch::nn::Linear(512, 8));
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  const torch::Tensor x = torch::randn({4, 512});
  // Gradients set to none before each step, then zeroed (kept) from step to step.
  for (bool none : {true, false}) {
    for (int i = 0; i < 4; ++i) {
      if (none) {
        for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
      } else {
        model->zero_grad();
      }
      rt.step(x, [](const torch::Tensor& out) { return out.square().mean(); });
    }
    const StepReport& r = rt.last_step();
    ASSERT_GT(r.predicted_peak_bytes, 0) << (none ? "none" : "zeroed");
    EXPECT_NEAR(static_cast<double>(r.predicted_peak_bytes),
                static_cast<double>(r.measured_peak_bytes),
                0.02 * static_cast<double>(r.measured_peak_bytes))
        << (none ? "none" : "zeroed");
  }
  EXPECT_EQ(rt.stats().profiled_steps, 1);
}

// A stage that allocates, in a training step, memory its measurement does not show (here a
// temporary it makes only when its input is not a leaf, which it is in the measurement pass):
// the shape's steps peak above plans made on its own measurement, so measuring it again would
// change nothing. The excess is kept free for the shape instead, and it is measured once.
struct HiddenTemporaryImpl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) {
    if (!x.is_leaf()) {
      const torch::Tensor hog = torch::ones({1 << 20});  // 4 MiB, freed at once
    }
    return x;
  }
};
TORCH_MODULE(HiddenTemporary);

TEST(RuntimeBudget, WhatMeasurementsDoNotShowIsKeptFreeNotMeasuredAgain) {
  install();
  torch::nn::Sequential model(torch::nn::Linear(64, 64), HiddenTemporary(), torch::nn::ReLU(),
                              torch::nn::Linear(64, 8));
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  const torch::Tensor x = torch::randn({4, 64});
  for (int i = 0; i < 6; ++i) {
    model->zero_grad();
    rt.step(x, [](const torch::Tensor& out) { return out.square().mean(); });
  }
  const RuntimeStats stats = rt.stats();
  EXPECT_EQ(stats.profiled_steps, 1);
  EXPECT_EQ(stats.retries, 0);
  const StepReport& r = rt.last_step();
  EXPECT_GT(r.measured_peak_bytes, 4 << 20);
  // The plan's budget left the 4 MiB free.
  EXPECT_LE(r.budget_bytes, (64 << 20) - (4 << 20));
}

// The same where the step's first run ran out of memory after the shape was measured: the run
// again plans on that measurement, and its peak above the plan is kept free, not measured again.
struct HiddenTemporaryOfItsOwnImpl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) {
    if (!x.is_leaf()) {
      const torch::Tensor hog = torch::ones({1 << 20});  // 4 MiB, freed at once
    }
    return x.clone();  // a stage of its own, whose input is a leaf in the measurement pass
  }
};
TORCH_MODULE(HiddenTemporaryOfItsOwn);

TEST(RuntimeBudget, AShapeMeasuredBeforeARetryIsNotMeasuredAgain) {
  install();
  torch::nn::Sequential model(torch::nn::Linear(64, 64), torch::nn::Tanh(),
                              HiddenTemporaryOfItsOwn(), torch::nn::ReLU(),
                              torch::nn::Linear(64, 8));
  Options o;
  o.budget_bytes = 64 << 20;
  const torch::Tensor x = torch::randn({4, 64});
  int calls = 0, throw_at = 0;
  const auto loss = [&](const torch::Tensor& out) {
    if (++calls == throw_at) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "out of memory (a step's first run, in a test)");
    }
    return out.square().mean();
  };
  {
    Runtime probe(model, o);  // how many times the first step calls the loss: the last is its run
    probe.step(x, loss);
    ASSERT_TRUE(probe.last_step().profiled);
  }
  throw_at = calls;
  calls = 0;
  Runtime rt(model, o);
  for (int i = 0; i < 3; ++i) {
    model->zero_grad();
    rt.step(x, loss);
  }
  const RuntimeStats stats = rt.stats();
  EXPECT_EQ(stats.retries, 1);
  EXPECT_EQ(stats.profiled_steps, 1);
  EXPECT_LE(rt.last_step().budget_bytes, (64 << 20) - (4 << 20));
}

// The same at one batch size alone (101 rows): the bytes kept free for it hold for its steps
// after another shape of its plan-cache bucket (102 rows) has planned for the bucket. Before, the
// batch of 101 ran the bucket's plan, made without them.
struct HiddenTemporaryAt101Impl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) {
    if (!x.is_leaf() && x.size(0) == 101) {
      const torch::Tensor hog = torch::ones({1 << 20});  // 4 MiB, freed at once
    }
    return x.clone();  // a stage of its own, whose input is a leaf in the measurement pass
  }
};
TORCH_MODULE(HiddenTemporaryAt101);

TEST(RuntimeBudget, WhatMeasurementsDoNotShowIsKeptFreeOverItsBucketsPlan) {
  install();
  // The Tanh keeps its output: the module is not run with the stages before it (its input would
  // not be the pass's leaf then), as it would be after the Linear alone.
  torch::nn::Sequential model(torch::nn::Linear(64, 64), torch::nn::Tanh(), HiddenTemporaryAt101(),
                              torch::nn::ReLU(), torch::nn::Linear(64, 8));
  Options o;
  o.budget_bytes = 64 << 20;
  Runtime rt(model, o);
  ASSERT_EQ(ShapeKey({101, 64}), ShapeKey({102, 64}));
  const auto step = [&](std::int64_t rows) {
    model->zero_grad();
    rt.step(torch::randn({rows, 64}), [](const torch::Tensor& out) { return out.square().mean(); });
    return rt.last_step();
  };
  const StepReport first = step(101);  // measured, and above its plan by the 4 MiB
  ASSERT_TRUE(first.profiled);
  step(64);
  step(128);
  const StepReport bucket = step(102);
  ASSERT_FALSE(bucket.profiled) << "102 rows should be predicted after 3 shapes";
  const StepReport again = step(101);
  EXPECT_FALSE(again.profiled);
  // What the 4 MiB exceeded its plan by, 3.9 MiB, is left free.
  EXPECT_LE(again.budget_bytes, bucket.budget_bytes - (3 << 20));
  EXPECT_GT(again.measured_peak_bytes, 4 << 20);
  // The bucket's other shapes keep to the bucket's plan.
  const StepReport other = step(102);
  EXPECT_TRUE(other.plan_from_cache);
  EXPECT_EQ(other.budget_bytes, bucket.budget_bytes);
  EXPECT_EQ(rt.stats().profiled_steps, 3);
  EXPECT_EQ(rt.stats().retries, 0);
}

// A plan made once, for the largest shape (Options::plan_once, monet-bench's `static`), runs at
// every shape; what it and keeping every stage cost is priced on the shape that ran, from a
// predictor that knows it, not reported as the largest shape's at every step.
TEST(RuntimeBudget, APlanMadeOnceIsPricedOnTheShapeThatRan) {
  install();
  auto w = testing::small_transformer();
  const std::string path = testing::fresh_state_path("monet_runtime_plan_once_state.json");
  Options o = testing::half_peak_with_state(*w, path);
  const workloads::Batch largest = w->largest_batch();
  const workloads::Batch small = w->batch(5, 0);
  ASSERT_LT(small.input.size(1), largest.input.size(1));
  const auto step = [&](Runtime& rt, const workloads::Batch& b) {
    rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
    return rt.last_step();
  };
  {  // a job that planned per shape leaves a predictor that knows both shapes
    Runtime per_shape(w->make_model(3), o);
    for (int i = 0; i < 2; ++i) {
      step(per_shape, largest);
      step(per_shape, small);
    }
  }
  o.plan_once = true;
  Runtime once(w->make_model(3), o);
  step(once, largest);  // the gradients it leaves are planned for from the next step on
  const StepReport at_largest = step(once, largest);
  const StepReport at_small = step(once, small);
  EXPECT_EQ(once.stats().profiled_steps, 0);
  EXPECT_EQ(at_small.plan, at_largest.plan);
  ASSERT_GT(at_largest.unconstrained_seconds, 0.0);
  EXPECT_LT(at_small.unconstrained_seconds, at_largest.unconstrained_seconds);
  EXPECT_LT(at_small.planned_seconds, at_largest.planned_seconds);
  EXPECT_GE(at_small.planned_seconds, at_small.unconstrained_seconds);
  EXPECT_GT(at_small.predicted_peak_bytes, 0);
  std::filesystem::remove(path);
}

// Under plan_once, shapes measured afresh (here: half the parameters frozen) make the plan once
// more, for the batch that runs then: its measurement is filed under its own shape. Before, the
// plan stayed the first shape's, and this batch's measurement was filed under the first shape.
TEST(RuntimeBudget, APlanMadeOnceIsMadeAgainForTheShapeMeasuredAfresh) {
  install();
  auto w = testing::small_transformer();
  const std::string path = testing::fresh_state_path("monet_runtime_plan_once_afresh.json");
  auto model = w->make_model(3);
  Options o = testing::half_peak_with_state(*w, path);
  o.plan_once = true;
  Runtime rt(model, o);
  const workloads::Batch largest = w->largest_batch();
  const workloads::Batch small = w->batch(5, 0);
  ASSERT_LT(small.input.size(1), largest.input.size(1));
  const auto step = [&](const workloads::Batch& b) {
    rt.step(b.input, [&](const torch::Tensor& out) { return w->loss(out, b); });
    return rt.last_step();
  };
  step(largest);
  const StepReport at_largest = step(largest);
  std::vector<torch::Tensor> params = model->parameters();
  for (std::size_t i = 0; i < params.size() / 2; ++i) params[i].requires_grad_(false);
  const StepReport at_small = step(small);
  EXPECT_TRUE(at_small.profiled);
  const Predictor saved = Predictor::load(path);
  EXPECT_EQ(saved.profiled_shapes(), 1);
  EXPECT_TRUE(saved.is_profiled(Shape{small.input.size(0), small.input.size(1)}));
  // The next batches run the plan made for the small shape, priced on their own.
  const StepReport again = step(small);
  EXPECT_FALSE(again.profiled);
  EXPECT_TRUE(again.plan_from_cache);
  EXPECT_EQ(again.plan, at_small.plan);
  EXPECT_NE(at_largest.shape, at_small.shape);
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".margins");
}

// On a CUDA device: the budget caps monet's CUDA pool, and the runtime's measurement passes time
// stages by CUPTI's kernel records.
class RuntimeBudgetCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    testing::deterministic_small_cuda();
  }
  const torch::Device cuda{torch::kCUDA, 0};
};

TEST_F(RuntimeBudgetCuda, Transformer80Percent) {
  train_within(*testing::small_transformer(), 0.80, 1000, cuda);
}
TEST_F(RuntimeBudgetCuda, Transformer50Percent) {
  train_within(*testing::small_transformer(), 0.50, 1000, cuda);
}
TEST_F(RuntimeBudgetCuda, Transformer33Percent) {
  train_within(*testing::small_transformer(), 0.33, 1000, cuda);
}
// A third of this CNN's peak is 22 MiB: at that size whole segments (cudaMalloc, the default)
// fragmented so that the first optimizer step, outside monet's step, found no room for a 1.5 MiB
// momentum buffer with 6 MiB in use (an H200). Expandable segments commit by 2 MiB granule, as
// the CPU pool does.
TEST_F(RuntimeBudgetCuda, DeepResNet33Percent) {
  setenv("MONET_CUDA_SEGMENTS", "expandable", /*overwrite=*/0);
  train_within(*workloads::make_resnet_workload(), 0.33, 1000, cuda);
}
TEST_F(RuntimeBudgetCuda, GradientsMadeInBackwardArePlannedWhereTheyAppear) {
  predict_with_gradients_made_in_backward(cuda);
}

}  // namespace
}  // namespace monet
