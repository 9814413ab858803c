#include "workloads/harness.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "allocator/device_pools.h"
#include "monet/errors.h"
#include "monet/planner.h"

namespace monet::workloads {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Waits for the work queued on `device` (nothing to wait for on the CPU).
void wait_for(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

}  // namespace

kernels::AutocastState autocast_for(const torch::Device& device) {
  kernels::AutocastState s;
  (device.is_cuda() ? s.cuda : s.cpu) = true;
  return s;
}

torch::nn::Sequential model_on(const Workload& w, std::uint64_t seed, const torch::Device& device) {
  torch::nn::Sequential model = w.make_model(seed);
  if (!device.is_cpu()) model->to(device);
  return model;
}

Batch to_device(const Batch& b, const torch::Device& device) {
  if (device.is_cpu()) return b;
  return Batch{b.input.to(device), b.targets.to(device)};
}

CachingAllocator& pool_for(const torch::Device& device) {
  return device.is_cuda() ? pools::cuda(device.has_index() ? device.index() : 0) : pools::cpu();
}

torch::Device default_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

torch::Device device_named(const std::string& name, const std::string& flag) {
  if (name.empty()) return default_device();
  std::optional<torch::Device> device;
  try {
    device.emplace(name);
  } catch (const c10::Error&) {
  }
  if (!device || !(device->is_cpu() || device->is_cuda())) {
    throw ConfigError(fmt::format(
        "{}='{}' is not a device monet trains on. Use cpu, cuda or cuda:N", flag, name));
  }
  if (device->is_cpu()) return torch::Device(torch::kCPU);
  const int count = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  const int index = device->has_index() ? device->index() : 0;
  if (index >= count) {
    throw ConfigError(fmt::format(
        "{}='{}': LibTorch sees {} CUDA device{} here. Use {}", flag, name, count,
        count == 1 ? "" : "s", count == 0 ? "cpu" : fmt::format("cuda:0 to cuda:{}", count - 1)));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

PeakProbe unconstrained_peak(const Workload& w, std::uint64_t seed, const torch::Device& device) {
  CachingAllocator& pool = pool_for(device);
  pool.release_cached();
  pool.reset_peaks();
  Options none;
  none.budget_bytes = 0;
  PeakProbe probe;
  {
    Runtime rt(model_on(w, seed, device), none);
    const Batch b = to_device(w.largest_batch(), device);
    rt.step(b.input, [&](const torch::Tensor& out) { return w.loss(out, b); });
    probe.in_use_bytes = rt.last_step().measured_peak_bytes;
  }
  probe.reserved_bytes = pool.stats().peak_reserved_bytes;
  pool.release_cached();
  return probe;
}

std::int64_t least_budget_above(const Workload& w, std::uint64_t seed, const Options& options,
                                const torch::Device& device, std::string* error) {
  CachingAllocator& pool = pool_for(device);
  pool.release_cached();
  std::int64_t least = 0;
  {
    // A probe on a model of its own: it neither starts from the job's predictor state nor saves
    // its measurement (or its margins) there, which would count as the job's.
    Options probe = options;
    probe.predictor_state.clear();
    Runtime rt(model_on(w, seed, device), probe);
    const Batch b = to_device(w.largest_batch(), device);
    try {
      rt.step(b.input, [&](const torch::Tensor& out) { return w.loss(out, b); });
    } catch (const InfeasibleBudgetError& e) {
      least = e.min_feasible_bytes;
      if (error) *error = e.what();
    }
  }
  pool.set_budget_bytes(0);
  pool.release_cached();
  return least;
}

TrainResult train(const Workload& w, const Options& options, const TrainSpec& spec) {
  CachingAllocator& pool = pool_for(spec.device);
  pool.set_budget_bytes(0);
  pool.release_cached();
  pool.reset_peaks();
  torch::nn::Sequential model = model_on(w, spec.seed, spec.device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  Runtime rt(model, options);
  // One step on `b`: where the spec asks for autocast, in an autocast region of its own; else
  // under whatever the caller's thread has (nothing, in monet's tools).
  const auto step = [&](const Batch& b) {
    std::optional<kernels::AutocastScope> region;
    if (spec.autocast) region.emplace(autocast_for(spec.device));
    return rt.step(b.input, [&](const torch::Tensor& out) { return w.loss(out, b); });
  };
  if (spec.start_with_largest) step(to_device(w.largest_batch(), spec.device));
  TrainResult result;
  if (spec.before_steps) spec.before_steps();
  for (int i = spec.first_step; i < spec.first_step + spec.steps; ++i) {
    // Making the batch and copying it over is a data loader's work, which overlaps the steps in
    // a real job: untimed. Synthesising a CNN's batch on the host can take longer than the
    // device's step, and counted, it would dilute every overhead.
    const Batch b = to_device(w.batch(spec.seed, i), spec.device);
    wait_for(spec.device);
    const double start = now();
    optimizer.zero_grad();
    const torch::Tensor loss = step(b);
    optimizer.step();
    const double loss_value = loss.item<double>();
    wait_for(spec.device);  // the optimizer's kernels too
    const double seconds = now() - start;
    result.seconds += seconds;
    const StepReport& r = rt.last_step();
    result.peak_in_use = std::max(result.peak_in_use, r.measured_peak_bytes);
    ++result.steps_done;
    if (spec.on_step) spec.on_step(i, b, r, loss_value, seconds);
  }
  result.peak_reserved = pool.stats().peak_reserved_bytes;
  result.stats = rt.stats();
  return result;
}

}  // namespace monet::workloads
