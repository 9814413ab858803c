// Training a built-in workload under monet::Runtime, as monet-train, monet-bench and the runtime's
// tests do: the unconstrained peak a budget is a share of, the least budget a strategy can plan
// the largest batch in, and a run of N steps from fixed weights on a fixed stream of batches.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "allocator/caching_allocator.h"
#include "kernels/autocast.h"
#include "monet/runtime.h"
#include "workloads/workloads.h"

namespace monet::workloads {

// A fresh model of `w` (weights from `seed`) on `device`.
torch::nn::Sequential model_on(const Workload& w, std::uint64_t seed, const torch::Device& device);

// `b` with its input and targets on `device` (the same tensors on the CPU).
Batch to_device(const Batch& b, const torch::Device& device);

// The pool monet's allocator serves `device`'s tensors from (CPU, or a CUDA device).
CachingAllocator& pool_for(const torch::Device& device);

// The device monet-train and monet-bench train on: the first CUDA device when LibTorch has one,
// the CPU otherwise.
torch::Device default_device();

// The device a --device flag names: "cpu", "cuda" (device 0) or "cuda:N"; empty is
// default_device(). Throws ConfigError, naming `flag` and what to write, for a name that is not a
// device, a device that is neither, or a CUDA device LibTorch does not see here.
torch::Device device_named(const std::string& name, const std::string& flag = "--device");

// Autocast on for `device`'s type alone, in torch's default dtype there (bfloat16 on the CPU,
// float16 on CUDA): what --autocast turns on.
kernels::AutocastState autocast_for(const torch::Device& device);

// One step on the largest batch with every stage kept and no budget, on a throwaway model.
struct PeakProbe {
  std::int64_t in_use_bytes = 0;   // the allocator's peak of requested bytes in the step
  std::size_t reserved_bytes = 0;  // its peak of reserved bytes (what a budget caps)
};
PeakProbe unconstrained_peak(const Workload& w, std::uint64_t seed,
                             const torch::Device& device = torch::kCPU);

// The least budget, in bytes, in which a runtime with `options` can plan the largest batch, when
// options.budget_bytes is below it (the InfeasibleBudgetError's min_feasible_bytes, and its
// message into `error` when given); 0 when it is enough. One step on a throwaway model, without
// options.predictor_state (it neither reads nor writes it); the pool is left uncapped and emptied.
std::int64_t least_budget_above(const Workload& w, std::uint64_t seed, const Options& options,
                                const torch::Device& device = torch::kCPU,
                                std::string* error = nullptr);

// What one training run is.
struct TrainSpec {
  int steps = 0;           // timed steps, on batches first_step..first_step+steps-1
  int first_step = 0;      // of the stream of `seed`
  std::uint64_t seed = 1;  // of the weights and the batches
  torch::Device device = torch::kCPU;
  // Before the timed steps, one untimed step on the largest batch (forward and backward, no
  // optimizer step: the timed steps start from the same weights): the shape a static plan is
  // made for, and the same start for every run it is compared with.
  bool start_with_largest = false;
  // Each step's forward and backward under autocast for `device` (mixed precision: bfloat16 on
  // the CPU, float16 on CUDA), an autocast region a step; the optimizer's step outside it.
  bool autocast = false;
  // Called once, right before the first timed step.
  std::function<void()> before_steps;
  // Called after each timed step: its index in the stream, the batch, the step's report, the
  // loss, and the step's time in seconds (as TrainResult::seconds counts it).
  std::function<void(int, const Batch&, const StepReport&, double, double)> on_step;
};

struct TrainResult {
  // The timed steps' wall clock, each from its batch on the device (the device idle) to the
  // optimizer's step done (the device waited for): making and copying the batches, a data
  // loader's work, is not counted.
  double seconds = 0.0;
  std::size_t peak_reserved = 0;  // the pool's peak of reserved bytes over the whole run
  std::int64_t peak_in_use = 0;   // the largest StepReport::measured_peak_bytes
  RuntimeStats stats;             // the runtime's totals, the untimed step included
  int steps_done = 0;             // timed steps that completed
};

// Trains a fresh model of `w` (weights from spec.seed) with SGD (lr 0.01, momentum 0.9) under a
// Runtime with `options`, from an empty pool with its peaks reset. The pool keeps
// options.budget_bytes as its cap afterwards (0: none). An InfeasibleBudgetError escapes.
TrainResult train(const Workload& w, const Options& options, const TrainSpec& spec);

}  // namespace monet::workloads
