#include "monet/runtime.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "allocator/device_pools.h"
#include "common/atomic_file.h"
#include "common/log.h"
#include "kernels/autocast.h"
#include "kernels/dtype_name.h"
#include "monet/allocator.h"
#include "monet/bytes.h"
#include "monet/errors.h"
#include "planner/chain_json.h"
#include "planner/chain_model.h"
#include "planner/plan_cache.h"
#include "planner/shape_key.h"
#include "planner/simulate.h"
#include "predictor/monomial_basis.h"
#include "predictor/predictor.h"
#include "runtime/executor.h"
#include "runtime/kernel_clock.h"
#include "runtime/profiler.h"
#include "runtime/retry_margins.h"
#include "runtime/rollback.h"
#include "runtime/stage.h"

namespace monet {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string join_dims(const Shape& shape) {
  std::string out;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += 'x';
    out += std::to_string(shape[i]);
  }
  return out;
}

// Held through a step. Runtimes share the device pools' marks and LibTorch's generators, which
// checkpoints capture and restore: a step that starts while another runs is refused, not left to
// draw another thread's numbers.
class OneStepAtATime {
 public:
  OneStepAtATime() {
    if (running().exchange(true)) {
      throw UnsupportedError(
          "monet: a monet::Runtime step started while another was running in another thread; "
          "monet trains from one thread per process (runtimes share the pools' peak marks and "
          "LibTorch's random generators): run the steps one after another, or one process per "
          "device");
    }
  }
  ~OneStepAtATime() { running() = false; }
  OneStepAtATime(const OneStepAtATime&) = delete;
  OneStepAtATime& operator=(const OneStepAtATime&) = delete;

 private:
  static std::atomic<bool>& running() {
    static std::atomic<bool> flag{false};
    return flag;
  }
};

// What the measurements of a shape depend on besides its dims (RuntimeImpl::measured_on).
struct MeasuredOn {
  at::ScalarType input_type = at::kFloat;
  at::Device input_device = at::kCPU;
  // The caller asks for the input's gradient: a gradient then flows through every stage, frozen
  // ones included, and the first stage's backward makes the input's.
  bool input_needs_grad = false;
  std::vector<at::ScalarType> parameter_types;  // each parameter once, in grad_owners_'s order
  std::vector<int> trained;                     // per stage, how many of its parameters train
  // Their elements in all: the same stages made wider or narrower (another hidden size) keep
  // other bytes and take other times.
  std::int64_t parameter_elements = 0;
  kernels::AutocastState autocast;  // mixed precision: what the stages' ops run in
  bool operator==(const MeasuredOn& o) const {
    return input_type == o.input_type && input_device == o.input_device &&
           input_needs_grad == o.input_needs_grad && parameter_types == o.parameter_types &&
           parameter_elements == o.parameter_elements && trained == o.trained &&
           autocast == o.autocast;
  }
};

// The first `prefix` stages of a chain as one, for stages no gradient flows through (the input
// needs none and none of them trains): autograd keeps nothing of theirs, so each output lives
// only until the next stage has run, and their backward is nothing. The memory model keeps every
// kept stage's output and recomputes a checkpointed segment, which for them holds what a step
// never does. As one stage, default variants (lean ones keep less only of what is kept), it holds
// the last one's output and peaks where the largest of them does; the first stage after them
// makes no gradient of its input, which the model adds to its backward, so that much of its
// measured backward peak is taken off (never below 0: the model stays at or above it).
Chain merge_no_grad_prefix(const Chain& chain, int prefix) {
  Chain out;
  out.fixed_bytes = chain.fixed_bytes;
  VariantCosts merged;
  std::int64_t before = 0;  // the output of the stage before, live during each forward
  std::int64_t peak = 0;
  for (int j = 0; j < prefix; ++j) {
    const VariantCosts& v = chain.stages[j].variants[0];
    peak = std::max(peak, before + v.out_bytes + v.saved_bytes + v.fwd_peak);
    merged.saved_bytes += v.saved_bytes;
    merged.fwd_time += v.fwd_time;
    before = v.out_bytes;
  }
  merged.out_bytes = before;
  merged.fwd_peak = std::max<std::int64_t>(0, peak - merged.out_bytes - merged.saved_bytes);
  Stage first;
  first.name = chain.stages[0].name + ".." + chain.stages[prefix - 1].name;
  first.variants = {merged};
  for (int j = 0; j < prefix; ++j) first.grad_bytes += chain.stages[j].grad_bytes;
  out.stages.push_back(std::move(first));
  out.stages.insert(out.stages.end(), chain.stages.begin() + prefix, chain.stages.end());
  for (VariantCosts& v : out.stages[1].variants) {
    v.bwd_peak = std::max<std::int64_t>(0, v.bwd_peak - merged.out_bytes);
  }
  return out;
}

// A plan of the merged chain for every stage: the merged stage's checkpoint for each of the
// prefix's stages (one segment where checkpointed), in their default variants.
Plan expand_no_grad_prefix(const Plan& merged, int prefix) {
  Plan out;
  for (int j = 0; j < prefix; ++j) {
    StagePlan s;
    s.checkpoint = merged.stages[0].checkpoint;
    s.segment_start = j == 0 && merged.stages[0].segment_start;
    out.stages.push_back(s);
  }
  out.stages.insert(out.stages.end(), merged.stages.begin() + 1, merged.stages.end());
  return out;
}

// The plan of every stage for the merged chain: the prefix's first stage stands for it.
Plan collapse_no_grad_prefix(const Plan& plan, int prefix) {
  Plan out;
  StagePlan first = plan.stages[0];
  first.variant = 0;
  out.stages.push_back(first);
  out.stages.insert(out.stages.end(), plan.stages.begin() + prefix, plan.stages.end());
  return out;
}

}  // namespace

class RuntimeImpl {
 public:
  RuntimeImpl(torch::nn::Sequential model, Options options)
      : model_(std::move(model)),
        options_(checked(std::move(options))),
        planner_(options_.strategy),
        cache_(cache_options(options_.plan_cache_capacity)),
        exact_cache_(cache_options(options_.plan_cache_capacity)),
        margins_(margin_options(options_)) {
    // The predictor's state is saved after each measured shape: a folder that cannot take it is
    // named now, not after the job's first steps.
    if (!options_.predictor_state.empty()) {
      check_writable(options_.predictor_state, "monet::Runtime (MONET_PREDICTOR_STATE)",
                     "the predictor's state");
    }
    install();
    stages_ = cut_stages(model_, options_.substitute_variants);
    RuntimeStage loss;
    loss.name = fmt::format("{}:loss", stages_.size());
    stages_.push_back(std::move(loss));
    cut_ = stages_;
    index_parameters();
    anchor_ = at::zeros({1}).requires_grad_(true);
    const std::vector<torch::Tensor> parameters = model_->parameters();
    // Before the pool takes the budget: a Runtime that cannot be made leaves the pool's as it was.
    check_budget_holds_the_model();
    pool_for(parameters.empty() ? at::Device(at::kCPU) : parameters.front().device());
    load_margins();
  }

  at::Tensor step(const at::Tensor& input, const Runtime::LossFn& loss_fn) {
    if (!loss_fn) throw ConfigError("monet::Runtime::step needs a loss function; it was empty");
    const OneStepAtATime one_step;
    const double start = now();
    last_ = StepReport{};
    stages_.back().fn = [this, loss_fn](const at::Tensor& out) {
      at::Tensor loss = loss_fn(out);
      if (rollback_) rollback_->record_loss_leaves(loss, out);
      return loss;
    };
    // The caller's loss goes when the step ends, however it ends: what it holds (targets, a
    // teacher's logits) must not stay in use into the next batch, outside every plan.
    struct DropLoss {
      std::vector<RuntimeStage>& stages;
      ~DropLoss() { stages.back().fn = nullptr; }
    } drop_loss{stages_};
    follow_training_mode();
    if (!model_->is_training() || !c10::GradMode::is_enabled()) {
      // No backward follows, so nothing is recorded for one: a forward that recorded a graph in
      // eval mode would keep every stage's activations, up to the unplanned peak, over a budget
      // that training fits in.
      const at::NoGradGuard no_grad;
      const at::Tensor out = plain_forward(input);
      return loss_fn(out).detach();
    }
    const Shape shape = varying_shape(input);
    follow_what_is_measured(input);
    // A step that does not train (the model refuses a batch of another dtype or device) leaves
    // what the steps before it measured and planned, as they left it.
    try {
      at::Tensor loss = train(input, shape, start);
      set_aside_.reset();
      return loss;
    } catch (...) {
      put_back_what_was_measured();
      throw;
    }
  }

  // The rest of step(): plans, runs and, where the batch runs out of memory, runs it again.
  at::Tensor train(const at::Tensor& input, const Shape& shape, double start) {
    last_.shape = join_dims(shape);
    // Under plan_once every batch runs the plan of the first shape that trained.
    const Shape plan_shape = options_.plan_once && first_shape_ ? *first_shape_ : shape;
    CachingAllocator& pool = pool_for(input.device());
    pool.clear_marks();
    rollback_.emplace(stages_);
    // Where the input needs a gradient, the step's backward adds to it (or to the leaves it came
    // from) too.
    rollback_->record_input_leaves(input);
    const StepRollback& rollback = *rollback_;
    struct Forget {
      std::optional<StepRollback>& rollback;
      ~Forget() { rollback.reset(); }
    } forget{rollback_};
    // An earlier attempt measured the shape: the step began with a measurement pass, whichever
    // attempt ran.
    bool measured_earlier = false;
    for (int attempt = 0;; ++attempt) {
      // Of this attempt (what its plan was made from): an earlier attempt's plan was dropped.
      last_.profiled = false;
      last_.plan_from_cache = false;
      last_.plan_us = 0.0;
      bool measuring = false;
      std::int64_t planned_for = 0;  // the budget the plan that ran was made for
      // Refusals the budget had room for, to tell a plan short of its bytes from a pool in pieces.
      const std::uint64_t in_pieces = pool.stats().out_of_memory_in_pieces;
      try {
        const PlanResult plan = plan_for(input, plan_shape, pool, &measuring);
        planned_for = plan.budget_bytes;
        const int prefix = no_grad_prefix(input);
        std::optional<Chain> chain = predicted_chain(shape, plan.plan, pool);
        Plan walked = plan.plan;
        Plan all_kept = keep_all();
        if (chain && prefix > 0) {
          *chain = merge_no_grad_prefix(*chain, prefix);
          walked = collapse_no_grad_prefix(walked, prefix);
          all_kept = collapse_no_grad_prefix(all_kept, prefix);
        }
        const Simulation walk = chain ? simulate(*chain, walked) : Simulation{};
        last_.predicted_peak_bytes = walk.peak_bytes;
        if (chain && shape != plan_shape) {
          // Under plan_once the plan was made for another shape: priced on this one's chain.
          last_.planned_seconds = walk.time;
          last_.unconstrained_seconds = simulate(*chain, all_kept).time;
        }
        const Held before = held(pool);
        const Mark mark = pool.mark();
        at::Tensor loss = run_plan(stages_, plan.plan, input, anchor_);
        loss.backward();
        last_.measured_peak_bytes = static_cast<std::int64_t>(pool.peak_requested_since(mark));
        // A shape measured by an attempt of this step that ran out of memory is this step's
        // measurement: a peak above its plan is kept free, not measured yet again (feedback).
        last_.profiled = last_.profiled || measured_earlier;
        if (!options_.plan_once) feedback(shape, plan, before);
        if (attempt == 0) relax_margins();
        // Only a step that trained sets the rank and the fixed dims later inputs must have, and
        // under plan_once the shape every plan is for: a first step that threw (the model or the
        // loss refused its input) leaves the next step free to be the first.
        if (first_sizes_.empty()) first_sizes_ = input.sizes().vec();
        if (options_.plan_once && !first_shape_) first_shape_ = shape;
        ++stats_.steps;
        stats_.max_measured_peak_bytes =
            std::max(stats_.max_measured_peak_bytes, last_.measured_peak_bytes);
        last_.seconds = now() - start;
        return loss.detach();
      } catch (const c10::Error& e) {
        if (!is_out_of_memory(e)) throw;
        measured_earlier = measured_earlier || last_.profiled;
        last_.profiled = measured_earlier;  // for a step that ends here, out of retries
        rollback.restore();
        // Without a budget every plan keeps every stage: another would run out the same way.
        if (options_.budget_bytes == 0) throw;
        if (measuring) throw device_too_small(shape);
        const ShapeKey key(plan_shape);
        // What the plan that ran out of memory left free, before this run raises the margin.
        const double kept_free = planned_for > 0
                                     ? 1.0 - static_cast<double>(planned_for) /
                                                 static_cast<double>(options_.budget_bytes)
                                     : margins_.share(key);
        margins_.ran_out_of_memory(key, planned_for);
        cache_.erase(key);
        exact_cache_.erase(ShapeKey(plan_shape, 62));
        save_margins();
        if (attempt >= options_.max_retries) throw out_of_retries(shape, plan_shape, kept_free);
        ++last_.retries;
        ++stats_.retries;
        log(LogLevel::kWarn,
            "batch {} ran out of memory{} (attempt {} of {}); running it again with {:.0f}% of the "
            "budget left free",
            last_.shape,
            pool.stats().out_of_memory_in_pieces > in_pieces
                ? " with room in the budget, its free memory in pieces"
                : "",
            attempt + 1, options_.max_retries + 1, 100.0 * margins_.share(key));
      }
    }
  }

  at::Tensor forward(const at::Tensor& input) {
    follow_training_mode();
    if (!model_->is_training() || !c10::GradMode::is_enabled()) return plain_forward(input);
    const Shape shape = varying_shape(input);
    follow_what_is_measured(input);
    set_aside_.reset();  // no step follows to train, or not, on what forward runs
    const PlanResult* plan = cached_plan(ShapeKey(shape), ShapeKey(shape, 62)).first;
    if (plan == nullptr) {
      log(LogLevel::kInfo, "no plan yet for shape {}: forward keeps every stage (step() plans)",
          join_dims(shape));
      return plain_forward(input);
    }
    Plan p = plan->plan;
    p.stages.pop_back();  // the loss stage: the caller computes its loss
    std::vector<RuntimeStage> model_stages(stages_.begin(), stages_.end() - 1);
    return run_plan(model_stages, p, input, anchor_);
  }

  const StepReport& last_step() const { return last_; }
  RuntimeStats stats() const { return stats_; }
  const Options& options() const { return options_; }
  std::vector<std::string> stage_names() const {
    std::vector<std::string> names;
    for (const RuntimeStage& s : stages_) names.push_back(s.name);
    return names;
  }

 private:
  static RetryMargins::Options margin_options(const Options& o) {
    RetryMargins::Options m;
    m.budget_bytes = o.budget_bytes;
    m.margin = o.margin;
    m.retry_step = o.retry_margin_step;
    m.relax_steps = o.margin_relax_steps;
    return m;
  }
  static PlanCache::Options cache_options(std::size_t capacity) {
    PlanCache::Options o;
    o.capacity = capacity;
    return o;
  }

  // `o`, checked before any member is made from it: a bad value throws ConfigError naming it.
  static Options checked(Options o) {
    if (o.budget_bytes < 0) {
      throw ConfigError(
          fmt::format("monet::Options::budget_bytes is {}; give the budget in bytes, or 0 for none",
                      o.budget_bytes));
    }
    if (!(o.margin >= 0.0 && o.margin <= 0.9)) {
      throw ConfigError(fmt::format(
          "monet::Options::margin (MONET_MARGIN) is {}; use a fraction from 0 to 0.9 (0.10 is "
          "the default)",
          o.margin));
    }
    if (!(o.retry_margin_step > 0.0 && o.retry_margin_step < 0.5)) {
      throw ConfigError(fmt::format(
          "monet::Options::retry_margin_step is {}; use a fraction above 0 and below 0.5",
          o.retry_margin_step));
    }
    if (o.max_retries < 0) {
      throw ConfigError(
          fmt::format("monet::Options::max_retries is {}; use 0 or more", o.max_retries));
    }
    if (o.margin_relax_steps < 0) {
      throw ConfigError(
          fmt::format("monet::Options::margin_relax_steps is {}; use 0 (never) or a count of steps",
                      o.margin_relax_steps));
    }
    for (std::size_t i = 0; i < o.varying_dims.size(); ++i) {
      const int d = o.varying_dims[i];
      const auto rest = o.varying_dims.begin() + static_cast<std::ptrdiff_t>(i) + 1;
      if (d < 0 || std::find(rest, o.varying_dims.end(), d) != o.varying_dims.end()) {
        throw ConfigError(fmt::format(
            "monet::Options::varying_dims names dim {} {}; name each varying dim of the input "
            "once, from 0 (empty: the runtime's default)",
            d, d < 0 ? "(negative)" : "twice"));
      }
    }
    if (o.varying_dims.size() > static_cast<std::size_t>(kMaxDims)) {
      throw ConfigError(fmt::format(
          "monet::Options::varying_dims names {} dims; the predictor learns on at most {}: name "
          "only the dims that change between batches",
          o.varying_dims.size(), kMaxDims));
    }
    if (o.measure_repeats < 1 || o.measure_repeats > Options::kMaxMeasureRepeats) {
      throw ConfigError(fmt::format(
          "monet::Options::measure_repeats is {}; use 1 to {} (3 keeps the planner from choosing "
          "a mode for one lucky timing)",
          o.measure_repeats, Options::kMaxMeasureRepeats));
    }
    if (o.plan_cache_capacity < 1) {
      throw ConfigError(
          "monet::Options::plan_cache_capacity is 0; the runtime caches at least one plan (256 is "
          "the default)");
    }
    return o;
  }

  // A budget that cannot hold the model's parameters and buffers and the gradients of those that
  // train (on the device the budget caps) is refused now, saying what it must hold, rather than at
  // the first step's allocation.
  void check_budget_holds_the_model() const {
    if (options_.budget_bytes == 0) return;
    const std::vector<torch::Tensor> parameters = model_->parameters();
    if (parameters.empty()) return;
    const at::Device device = parameters.front().device();
    std::int64_t weights = 0, gradients = 0;
    for (const torch::Tensor& p : parameters) {
      if (p.device() != device) continue;
      weights += static_cast<std::int64_t>(p.nbytes());
      if (p.requires_grad()) gradients += static_cast<std::int64_t>(p.nbytes());
    }
    for (const torch::Tensor& b : model_->buffers()) {
      if (b.device() == device) weights += static_cast<std::int64_t>(b.nbytes());
    }
    if (weights + gradients <= options_.budget_bytes) return;
    throw BudgetBelowModelError(
        fmt::format(
            "monet::Runtime: a budget of {} cannot hold the model on {}: its parameters and "
            "buffers take {} and the gradients of those that train {}, {} before any activation "
            "or optimizer state. Raise MONET_BUDGET (Options::budget_bytes) well above {}",
            format_bytes(options_.budget_bytes), device.str(), format_bytes(weights),
            format_bytes(gradients), format_bytes(weights + gradients),
            format_bytes(weights + gradients)),
        weights + gradients);
  }

  // The substitutes take their originals' training flags: the model's train() or eval(), and a
  // BatchNorm or Dropout the user put in eval on its own.
  void follow_training_mode() {
    for (const RuntimeStage& s : stages_) {
      for (const nn::Substitution& m : s.substitutions) nn::follow_originals(m);
    }
  }

  // The pool of `device`, under the runtime's budget (0 lifts its cap): the pool of the model's
  // device from the runtime's making (what the job makes before its first step, its batches,
  // counts), and of the inputs' device at each step, where another runtime on that device (or
  // the caller) set another budget since.
  CachingAllocator& pool_for(const at::Device& device) {
    CachingAllocator& pool = device.is_cuda() ? pools::cuda(device.index()) : pools::cpu();
    const auto budget = static_cast<std::size_t>(options_.budget_bytes);
    if (pool.budget_bytes() != budget) pool.set_budget_bytes(budget);
    return pool;
  }

  // The varying dims of a training input. An input with no elements, or of another rank than the
  // first one trained (its dims would mean other things to the predictor and the plan cache), is
  // refused before anything runs. The first input trained is set by step(), once it has trained.
  Shape varying_shape(const at::Tensor& input) {
    const Shape sizes = input.sizes().vec();
    if (input.numel() == 0) {
      throw std::invalid_argument(fmt::format(
          "monet::Runtime: the input ({}) is empty; give a batch with at least one element in "
          "every dim",
          join_dims(sizes)));
    }
    if (!first_sizes_.empty() && sizes.size() != first_sizes_.size()) {
      throw std::invalid_argument(fmt::format(
          "monet::Runtime: the input is {} ({} dims), but the first input it trained was {} ({} "
          "dims); a Runtime learns and plans for inputs of one rank: give every input as many "
          "dims as the first, or make a Runtime for each kind of input",
          join_dims(sizes), sizes.size(), join_dims(first_sizes_), first_sizes_.size()));
    }
    std::vector<int> dims = options_.varying_dims;
    const int rank = static_cast<int>(input.dim());
    if (dims.empty()) {
      if (rank == 2 || rank == 3) {
        dims = {0, 1};
      } else if (rank == 4) {
        dims = {0, 2, 3};
      } else if (rank == 5) {
        dims = {0, 2, 3, 4};  // batch, depth or time, height, width (N, C, D, H, W)
      } else if (rank <= kMaxDims) {
        for (int d = 0; d < rank; ++d) dims.push_back(d);
      } else {
        throw ConfigError(fmt::format(
            "monet::Runtime: the input ({}) has {} dims, and monet has no default for which of "
            "them change between batches; it learns on at most {}: set Options::varying_dims to "
            "the dims that do",
            join_dims(sizes), rank, kMaxDims));
      }
    }
    Shape shape;
    for (int d : dims) {
      if (d >= rank) {  // a negative dim was refused when the Runtime was made
        throw ConfigError(fmt::format(
            "monet::Options::varying_dims names dim {}, but the input has {} dims ({}); name "
            "dims from 0 to {}",
            d, rank, join_dims(sizes), rank - 1));
      }
      shape.push_back(input.size(d));
    }
    // The other dims are the first input's: a plan and what the predictor learnt hold for them.
    if (!first_sizes_.empty()) {
      for (int d = 0; d < rank; ++d) {
        if (sizes[d] == first_sizes_[d] || std::find(dims.begin(), dims.end(), d) != dims.end()) {
          continue;
        }
        std::string named;
        for (int v : dims) named += (named.empty() ? "" : ", ") + std::to_string(v);
        throw std::invalid_argument(fmt::format(
            "monet::Runtime: dim {} of the input is {} ({}), where the first input it trained had "
            "{} ({}), and it is not among the dims that vary ({}{}): plans and predictions hold "
            "for one size of it. Name every dim that changes between batches in "
            "Options::varying_dims",
            d, sizes[d], join_dims(sizes), first_sizes_[d], join_dims(first_sizes_),
            options_.varying_dims.empty() ? "by default " : "Options::varying_dims: ", named));
      }
    }
    return shape;
  }

  // Counts a step that ran without running out of memory; once what retries added to the margins
  // comes down (RetryMargins::step_ran), drops the plans made with them.
  void relax_margins() {
    if (!margins_.step_ran()) return;
    save_margins();
    cache_.clear();
    exact_cache_.clear();
    log(LogLevel::kInfo,
        "no batch ran out of memory in {} steps: the margins retries raised come down by {:.0f} "
        "points (new shapes now leave {:.0f}% of the budget free)",
        options_.margin_relax_steps, 100.0 * options_.retry_margin_step,
        100.0 * margins_.new_shape_share());
  }

  // What retries added to the margins is kept beside the predictor's state (MONET_PREDICTOR_STATE),
  // so that a job that starts again does not run batches again to learn it.
  std::string margins_path() const {
    return options_.predictor_state.empty() || options_.budget_bytes == 0
               ? std::string()
               : options_.predictor_state + ".margins";
  }
  // A margins file that cannot be written costs a restarted job a retry, not this batch: the
  // error is a warning (a step that had trained would otherwise throw after its backward).
  void save_margins() const {
    const std::string path = margins_path();
    if (path.empty()) return;
    try {
      margins_.save(path);
    } catch (const std::exception& e) {
      log(LogLevel::kWarn,
          "the retry margins were not saved, and a restarted job learns them again: {}", e.what());
    }
  }
  // The predictor's state (MONET_PREDICTOR_STATE) after a measured shape. A file that cannot be
  // written costs a restarted job the shapes measured since, not this batch: the error is a
  // warning, as the margins' is (the constructor has checked that the folder can be written).
  void save_state() {
    ++state_saves_;
    try {
      predictor_->save(options_.predictor_state);
    } catch (const std::exception& e) {
      log(LogLevel::kWarn,
          "the predictor's state was not saved (MONET_PREDICTOR_STATE), and a restarted job "
          "measures again the shapes measured since its last save: {}",
          e.what());
    }
  }
  void load_margins() {
    const std::string path = margins_path();
    if (path.empty() || !std::filesystem::exists(path)) return;
    if (margins_.load(path)) {
      log(LogLevel::kInfo, "retry margins from {}: new shapes leave {:.0f}% of the budget free",
          path, 100.0 * margins_.new_shape_share());
    } else {
      log(LogLevel::kInfo,
          "{} holds the retry margins of another budget or margin; plans start from the margin",
          path);
    }
  }

  // Parameters, the gradients that exist, the optimizer's state and the batch: everything in use
  // now, which stays through the step.
  static std::int64_t fixed_bytes(CachingAllocator& pool) {
    return static_cast<std::int64_t>(pool.stats().requested_bytes);
  }

  // Per stage, the bytes of the gradients its backward will create and that stay to the step's
  // end: those of its parameters without a gradient now (zero_grad with set_to_none, LibTorch
  // 2.x's default), and of those earlier stages use too (see the constructor).
  std::vector<std::int64_t> new_grad_bytes() const {
    std::vector<std::int64_t> bytes(stages_.size(), 0);
    for (const GradOwner& o : grad_owners_) {
      if (o.parameter.requires_grad() && (o.shared || !o.parameter.grad().defined())) {
        bytes[o.stage] += static_cast<std::int64_t>(o.parameter.nbytes());
      }
    }
    return bytes;
  }

  // Per stage, the bytes of the shared parameters' gradients its backward sums (see the
  // constructor), of those that train now.
  std::vector<std::int64_t> shared_sum_bytes() const {
    std::vector<std::int64_t> bytes(stages_.size(), 0);
    for (const auto& [stage, p] : shared_uses_) {
      if (p.requires_grad()) bytes[stage] += static_cast<std::int64_t>(p.nbytes());
    }
    return bytes;
  }

  // grad_owners_ and shared_uses_ from stages_.
  void index_parameters() {
    grad_owners_.clear();
    shared_uses_.clear();
    // Each parameter once, with the last stage that uses it: its gradient is made in that stage's
    // backward, which runs first. A parameter that earlier stages use too (tied weights) has
    // autograd hold that stage's part of its gradient until theirs arrive, and sum them out of
    // place in each earlier stage's backward: its bytes stay from the last stage's backward on
    // (as a gradient made there, whether or not one exists), and come once more, transiently, in
    // each earlier stage's backward.
    // Every parameter counts here, frozen or not: which train is read at each step.
    std::unordered_map<const void*, std::size_t> owner;
    for (std::size_t k = stages_.size(); k-- > 0;) {
      std::unordered_set<const void*> in_stage;
      for (const at::Tensor& p : stages_[k].parameters) {
        const void* id = p.unsafeGetTensorImpl();
        if (!in_stage.insert(id).second) continue;
        const auto [it, first] = owner.emplace(id, grad_owners_.size());
        if (first) {
          grad_owners_.push_back({k, p, false});
        } else {
          grad_owners_[it->second].shared = true;
          shared_uses_.push_back({k, p});
        }
      }
    }
  }

  // What the measurements of a shape depend on besides its dims, now: the input's dtype and
  // device and whether it needs its gradient, each parameter's dtype, the parameters' elements in
  // all, how many parameters of each stage train, and autocast.
  MeasuredOn measured_on(const at::Tensor& input) const {
    MeasuredOn m;
    m.input_type = input.scalar_type();
    m.input_device = input.device();
    m.input_needs_grad = input.requires_grad();
    for (const GradOwner& o : grad_owners_) {
      m.parameter_types.push_back(o.parameter.scalar_type());
      m.parameter_elements += o.parameter.numel();
    }
    for (const RuntimeStage& s : stages_) m.trained.push_back(s.trained_count());
    m.autocast = kernels::AutocastState::current();
    return m;
  }

  // "input float32 on cpu; parameters float32 (1048576 elements); every parameter trains;
  // autocast bfloat16 on cpu" (autocast named only where it is on): what the predictor's state
  // says it was measured on, to compare with at a warm start. `with_rng` and `with_elements`:
  // false to leave out allow_rng_variants or the parameters' elements, as monet described a state
  // before it said them.
  std::string describe(const MeasuredOn& m, bool with_rng = true, bool with_elements = true) const {
    // Its gradient named only where it is asked for, so that a state saved before monet followed
    // it still matches.
    std::string out =
        fmt::format("input {} on {}{}; parameters ", kernels::dtype_name(m.input_type),
                    m.input_device.str(), m.input_needs_grad ? " with its gradient" : "");
    const bool one_type =
        std::all_of(m.parameter_types.begin(), m.parameter_types.end(),
                    [&](at::ScalarType t) { return t == m.parameter_types.front(); });
    if (m.parameter_types.empty()) {
      out += "none";
    } else if (one_type) {
      out += kernels::dtype_name(m.parameter_types.front());
    } else {
      std::vector<std::string> per_stage(stages_.size());
      for (std::size_t i = 0; i < grad_owners_.size(); ++i) {
        std::string& s = per_stage[grad_owners_[i].stage];
        const std::string name = kernels::dtype_name(m.parameter_types[i]);
        if (s.find(name) == std::string::npos) s += (s.empty() ? "" : "/") + name;
      }
      std::string sep;
      for (std::size_t k = 0; k < stages_.size(); ++k) {
        if (per_stage[k].empty()) continue;
        out += fmt::format("{}{} {}", sep, stages_[k].name, per_stage[k]);
        sep = ", ";
      }
    }
    if (with_elements && !m.parameter_types.empty()) {
      out += fmt::format(" ({} elements)", m.parameter_elements);
    }
    std::string frozen;
    for (std::size_t k = 0; k < stages_.size(); ++k) {
      const int all = static_cast<int>(stages_[k].parameters.size());
      if (m.trained[k] == all) continue;
      frozen += fmt::format("{}{} ({} of {})", frozen.empty() ? "" : ", ", stages_[k].name,
                            all - m.trained[k], all);
    }
    out += frozen.empty() ? "; every parameter trains" : "; frozen: " + frozen;
    // Only where it is on, so that a state saved before monet followed autocast still matches.
    if (m.autocast != kernels::AutocastState()) out += "; autocast " + m.autocast.describe();
    // And the options that change which operator modes a stage has, only where not the default:
    // a state measured with regenerated dropout masks must not give its modes to a job that
    // draws torch's (allow_rng_variants), nor lean modes to torch's own modules.
    if (with_rng && options_.allow_rng_variants) out += "; dropout redrawn in backward";
    if (!options_.substitute_variants) out += "; torch's modules, no variants";
    return out;
  }

  // An input of another dtype or device, or that needs its gradient where the one before did not
  // (or the other way), a model converted to another dtype (module.to()), parameters frozen or
  // unfrozen, or autocast turned on or off since the last step: the stages keep other bytes and
  // take other times, so what was measured and planned before no longer holds, and shapes are
  // measured afresh.
  void follow_what_is_measured(const at::Tensor& input) {
    MeasuredOn now = measured_on(input);
    if (now == measured_on_) return;
    const bool first = measured_on_.trained.empty();
    std::string before = first ? std::string() : describe(measured_on_);
    MeasuredOn earlier = std::move(measured_on_);
    measured_on_ = std::move(now);
    if (!predictor_) return;
    log(LogLevel::kInfo,
        "shapes are measured afresh: this step runs on \"{}\", the steps before ran on \"{}\"",
        describe(measured_on_), before);
    // Set aside until the step trains (step() puts it back where it does not), then dropped.
    set_aside_.emplace(SetAside{std::move(earlier), std::move(predictor_), std::move(cache_),
                                std::move(exact_cache_), std::move(remeasure_),
                                std::move(unmodelled_), stages_, first_shape_, state_saves_});
    cache_ = PlanCache(set_aside_->cache.options());
    exact_cache_ = PlanCache(set_aside_->exact_cache.options());
    remeasure_.clear();
    unmodelled_.clear();
    part_joined_stages(input);
    // Under plan_once the plan is made once more, for this step's shape: the first shape's chain
    // must be measured again, and this step's input is the only one the runtime holds.
    first_shape_.reset();
  }

  // What a step that did not train leaves: what follow_what_is_measured() set aside, back in place
  // (the stages as they were joined, the predictor, its plans), and the predictor's state file
  // written again where the step's measurement had written over it.
  void put_back_what_was_measured() {
    if (!set_aside_) return;
    SetAside a = std::move(*set_aside_);
    set_aside_.reset();
    set_stages(std::move(a.stages));
    measured_on_ = std::move(a.measured_on);
    predictor_ = std::move(a.predictor);
    cache_ = std::move(a.cache);
    exact_cache_ = std::move(a.exact_cache);
    remeasure_ = std::move(a.remeasure);
    unmodelled_ = std::move(a.unmodelled);
    first_shape_ = std::move(a.first_shape);
    if (state_saves_ != a.state_saves && predictor_ && !options_.predictor_state.empty()) {
      save_state();  // within the step's catch: a failed save must not stand for its error
    }
    log(LogLevel::kInfo,
        "the step did not train: what the steps before it measured and planned is kept, on \"{}\"",
        describe(measured_on_));
  }

  // What stays from the steps before this one, as a plan counts it: fixed bytes, and the
  // gradients backward will create.
  struct Held {
    std::int64_t fixed = 0;
    std::int64_t new_grads = 0;
  };
  Held held(CachingAllocator& pool) const {
    Held h{fixed_bytes(pool), 0};
    for (std::int64_t b : new_grad_bytes()) h.new_grads += b;
    return h;
  }

  // Sets the chain's fixed_bytes and each stage's grad_bytes to what holds now, and adds the sums
  // of shared parameters' gradients to the backward peaks of the stages that make them. The
  // chain must come from the predictor or the measurement pass (not have them added already).
  void set_held(Chain* chain, CachingAllocator& pool) const {
    chain->fixed_bytes = fixed_bytes(pool);
    const std::vector<std::int64_t> grads = new_grad_bytes();
    const std::vector<std::int64_t> sums = shared_sum_bytes();
    for (std::size_t k = 0; k < chain->stages.size() && k < grads.size(); ++k) {
      chain->stages[k].grad_bytes = grads[k];
      for (VariantCosts& v : chain->stages[k].variants) v.bwd_peak += sums[k];
    }
  }

  // `plan`'s peak were it run with `now` held: what the fixed bytes grew by counts in full, and
  // so do gradients that now exist from the start where the plan had them made in backward (an
  // upper bound: a gradient made earlier can only raise the peak by its size).
  static std::int64_t peak_with(const PlanResult& plan, const Held& now) {
    return plan.peak_bytes + (now.fixed - plan.fixed_bytes) +
           std::max<std::int64_t>(0, now.new_grads - plan.grad_bytes);
  }

  at::Tensor plain_forward(const at::Tensor& input) {
    at::Tensor x = input;
    for (std::size_t k = 0; k + 1 < stages_.size(); ++k) x = stages_[k].fn(x);
    return x;
  }

  // The predictor's point estimate of `shape`'s chain, with what stays between steps, for walking
  // `plan` over; none without a budget, on a step that measured the shape, or where the plan runs
  // a variant the prediction does not have yet (one appears in predictions once profiled at
  // enough shapes).
  std::optional<Chain> predicted_chain(const Shape& shape, const Plan& plan,
                                       CachingAllocator& pool) const {
    if (options_.budget_bytes == 0 || last_.profiled || !predictor_) return std::nullopt;
    Chain chain = predictor_->predict(shape);
    no_variant_faster_than_the_first(&chain);
    for (std::size_t k = 0; k < chain.stages.size(); ++k) {
      if (plan.stages[k].variant >= static_cast<int>(chain.stages[k].variants.size())) {
        return std::nullopt;
      }
    }
    set_held(&chain, pool);
    return chain;
  }

  // How many stages, from the first, no gradient flows through in a step on `input`: none when
  // the input needs one, else those before the first that trains (the loss stage never counted).
  int no_grad_prefix(const at::Tensor& input) const {
    if (input.requires_grad()) return 0;
    int prefix = 0;
    const int last = static_cast<int>(stages_.size()) - 1;
    while (prefix < last && !stages_[prefix].trains()) ++prefix;
    return prefix;
  }

  // A cached plan no longer fits: the bytes that stay between steps grew since it was made, by
  // more than the room it left under its budget.
  bool outgrown(const PlanResult& plan, CachingAllocator& pool) const {
    return peak_with(plan, held(pool)) > plan.budget_bytes;
  }

  // The plan cached for a shape of bucket `key` and exact key `exact`, and the cache that holds
  // it: the bucket's, else the shape's own. Where bytes are kept free for the shape beyond its
  // plans (feedback), only its own: a plan its bucket's other shapes made and share does not keep
  // them free.
  std::pair<const PlanResult*, PlanCache*> cached_plan(const ShapeKey& key, const ShapeKey& exact) {
    if (unmodelled_for(exact) == 0) {
      if (const PlanResult* hit = cache_.find(key)) return {hit, &cache_};
    }
    return {exact_cache_.find(exact), &exact_cache_};
  }

  // Every stage kept in its default variant.
  Plan keep_all() const {
    Plan p;
    p.stages.resize(stages_.size());
    return p;
  }

  PlanResult plan_for(const at::Tensor& input, const Shape& shape, CachingAllocator& pool,
                      bool* measuring) {
    PlanResult result;
    if (options_.budget_bytes == 0) {
      result.strategy = Strategy::kNone;
      result.plan = keep_all();
      last_.plan = describe_plan(result.plan);
      return result;
    }
    const ShapeKey key(shape);
    const ShapeKey exact(shape, 62);
    const bool remeasure = remeasure_.count(exact) > 0;
    // What steps of this shape held beyond plans made on its own measurement is kept free too.
    const std::int64_t unmodelled = unmodelled_for(exact);
    std::int64_t budget = margins_.plan_budget(key) - unmodelled;
    last_.budget_bytes = budget;
    // Such a shape plans for itself alone (cached_plan).
    const bool own_plan = unmodelled > 0;
    if (!remeasure) {
      auto [hit, hit_cache] = cached_plan(key, exact);
      const ShapeKey* hit_key = hit_cache == &cache_ ? &key : &exact;
      if (hit != nullptr && outgrown(*hit, pool)) {
        // What stays between steps grew since the plan was made (an optimizer makes its state
        // at its first step): planned again from the same chain, not measured again.
        log(LogLevel::kInfo,
            "shape {}: fixed bytes grew from {} to {} since its plan was made; planned again",
            join_dims(shape), format_bytes(static_cast<std::size_t>(hit->fixed_bytes)),
            format_bytes(static_cast<std::size_t>(fixed_bytes(pool))));
        hit_cache->erase(*hit_key);
        hit = nullptr;
      }
      if (hit != nullptr) {
        ++stats_.cache_hits;
        last_.plan_from_cache = true;
        report_plan(*hit);
        return *hit;
      }
    }
    if (!predictor_ && !warm_start_tried_) warm_start(input);
    Chain chain;
    PlanCache* cache = nullptr;
    const ShapeKey* cache_key = nullptr;
    std::optional<Chain> predicted = remeasure ? std::nullopt : upper_prediction(key.dims());
    if (predicted) {
      chain = std::move(*predicted);
      cache = own_plan ? &exact_cache_ : &cache_;
      cache_key = own_plan ? &exact : &key;
    } else if (!remeasure && predictor_ && predictor_->is_profiled(shape)) {
      chain = predictor_->predict(shape);
      cache = &exact_cache_;
      cache_key = &exact;
    } else {
      chain = measure_within_budget(input, shape, pool, measuring);
      cache = &exact_cache_;
      cache_key = &exact;
    }
    // Lean modes do the default's work and more: one timed faster is noise, not a free choice.
    no_variant_faster_than_the_first(&chain);
    set_held(&chain, pool);
    const int prefix = no_grad_prefix(input);
    if (prefix > 0) chain = merge_no_grad_prefix(chain, prefix);
    if (log_level() >= LogLevel::kDebug) {
      log(LogLevel::kDebug, "chain of shape {}: {}", join_dims(shape), chain_to_json(chain));
    }
    PlanResult plan = planner_.try_plan(chain, budget);
    if (!plan.feasible && margins_.plan_budget(key, false) > budget) {
      // The margin learned from other shapes' retries is a guess for this one: where no plan
      // fits with it, plan with this shape's own.
      budget = margins_.plan_budget(key, false) - unmodelled;
      last_.budget_bytes = budget;
      const double first_us = plan.plan_us;
      plan = planner_.try_plan(chain, budget);
      plan.plan_us += first_us;
    }
    ++stats_.plans_made;
    stats_.plan_seconds += plan.plan_us * 1e-6;
    last_.plan_us = plan.plan_us;
    if (!plan.feasible) {
      PlanResult least = least_plannable(chain, plan);
      if (least.feasible && least.peak_bytes <= budget) {
        // The planner missed at this budget a plan it finds at a smaller one.
        least.budget_bytes = budget;
        plan = std::move(least);
      } else if (least.feasible &&
                 least.peak_bytes <= margins_.unraised_plan_budget() - unmodelled) {
        // Retries raised this shape's margin past what any plan leaves free, though a plan fits
        // the budget: the batch runs the plan that leaves the most free rather than being lost.
        // Should that run out of memory too, the step's retries bound it as for any plan.
        log(LogLevel::kWarn,
            "shape {}: no plan leaves the {:.0f}% of the budget free that its retries asked for; "
            "running the plan that holds the least ({}, {:.0f}% of the budget)",
            join_dims(shape), 100.0 * margins_.share(key, false),
            format_bytes(static_cast<std::size_t>(least.peak_bytes)),
            100.0 * static_cast<double>(least.peak_bytes) /
                static_cast<double>(options_.budget_bytes));
        // Made for the budget it was checked against: a few bytes more held between steps do not
        // make it outgrown (and planned again, with this warning, at every step).
        least.budget_bytes = margins_.unraised_plan_budget() - unmodelled;
        last_.budget_bytes = least.budget_bytes;
        plan = std::move(least);
      } else {
        plan.min_feasible_bytes =
            std::max(least.min_feasible_bytes, least_with_grads_held(chain)) + unmodelled;
        throw infeasible(shape, key, plan);
      }
    }
    if (prefix > 0) plan.plan = expand_no_grad_prefix(plan.plan, prefix);
    report_plan(plan);
    return cache->insert(*cache_key, std::move(plan));
  }

  // The plan at the least budget at which the planner finds one that fits: its
  // min_feasible_bytes, made sure of by planning at it (at that edge a plan may miss by a few
  // bytes). Its min_feasible_bytes is that budget; feasible is false if none was found.
  PlanResult least_plannable(const Chain& chain, const PlanResult& failed) const {
    std::int64_t least = failed.min_feasible_bytes;
    PlanResult p;
    for (int i = 0; i < 8; ++i) {
      p = planner_.try_plan(chain, least);
      if (p.feasible) break;
      least = std::max({least + 1, p.peak_bytes, p.min_feasible_bytes});
    }
    p.min_feasible_bytes = least;
    return p;
  }

  // The least feasible budget were the gradients the chain has made in backward held from the
  // step's start instead, as they are from the second step on when an optimizer zeroes them
  // rather than setting them to none: a budget named to the user must hold every step. 0 when
  // the chain makes none.
  std::int64_t least_with_grads_held(const Chain& chain) const {
    Chain held = chain;
    for (Stage& stage : held.stages) {
      held.fixed_bytes += stage.grad_bytes;
      stage.grad_bytes = 0;
    }
    if (held.fixed_bytes == chain.fixed_bytes) return 0;
    return least_plannable(held, planner_.try_plan(held, 0)).min_feasible_bytes;
  }

  void report_plan(const PlanResult& plan) {
    // What the plan was made for: a cached plan's, not the budget a new plan would have now.
    last_.budget_bytes = plan.budget_bytes;
    last_.planned_peak_bytes = plan.peak_bytes;
    last_.planned_seconds = plan.time;
    last_.unconstrained_seconds = plan.unconstrained_time;
    last_.plan = describe_plan(plan.plan);
    last_.checkpointed_stages = 0;
    last_.variant_stages = 0;
    for (const StagePlan& s : plan.plan.stages) {
      last_.checkpointed_stages += s.checkpoint ? 1 : 0;
      last_.variant_stages += s.variant != 0 ? 1 : 0;
    }
  }

  // The chain at `dims` with every byte number raised by its error bound, when the predictor can
  // give one: `dims` covered (Predictor::coverage_gap) and every byte law validated. Planning on
  // upper bounds is safe wherever the laws hold; a plan they still under-predict is caught by
  // feedback(). Times are the predictions: they only rank plans.
  std::optional<Chain> upper_prediction(const Shape& dims) const {
    if (!predictor_) return std::nullopt;
    if (const std::string gap = predictor_->coverage_gap(dims); !gap.empty()) {
      log(LogLevel::kDebug, "shape {}: {}", join_dims(dims), gap);
      return std::nullopt;
    }
    Prediction p = predictor_->predict_with_bounds(dims);
    constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
    for (std::size_t i = 0; i < p.chain.stages.size(); ++i) {
      for (std::size_t v = 0; v < p.chain.stages[i].variants.size(); ++v) {
        VariantCosts& c = p.chain.stages[i].variants[v];
        const VariantCosts& b = p.bounds.stages[i].variants[v];
        for (auto [value, bound] :
             {std::pair{&c.out_bytes, b.out_bytes}, std::pair{&c.saved_bytes, b.saved_bytes},
              std::pair{&c.fwd_peak, b.fwd_peak}, std::pair{&c.bwd_peak, b.bwd_peak}}) {
          if (bound >= kNone) {
            log(LogLevel::kDebug, "shape {}: stage {} variant {} has a byte law not validated yet",
                join_dims(dims), p.chain.stages[i].name, c.name);
            return std::nullopt;
          }
          *value += bound;
        }
      }
    }
    return std::move(p.chain);
  }

  // The measurement pass holds one stage at a time: it fits wherever a plan does, but for the
  // margin a plan leaves free. When it does not fit, it runs once without the cap (`measuring`
  // tells step() not to retry): the chain it gives either has a plan within the budget, and the
  // step goes on, or names the least budget in the error.
  Chain measure_within_budget(const at::Tensor& input, const Shape& shape, CachingAllocator& pool,
                              bool* measuring) {
    try {
      return measure(input, shape, pool);
    } catch (const c10::Error& e) {
      if (!is_out_of_memory(e)) throw;
    }
    log(LogLevel::kWarn,
        "measuring shape {} one stage at a time does not fit the budget of {}; "
        "measuring it once without the cap",
        join_dims(shape), format_bytes(options_.budget_bytes));
    *measuring = true;
    pool.set_budget_bytes(0);
    struct Recap {
      CachingAllocator& pool;
      std::size_t budget;
      ~Recap() {
        pool.release_cached();
        pool.set_budget_bytes(budget);
      }
    } recap{pool, static_cast<std::size_t>(options_.budget_bytes)};
    Chain chain = measure(input, shape, pool);
    *measuring = false;
    return chain;
  }

  Chain measure(const at::Tensor& input, const Shape& shape, CachingAllocator& pool) {
    const bool first = !predictor_;
    // From the most kept to the least: the profiler keeps a mode only where it keeps less than
    // every mode before it.
    std::vector<OpMode> candidates = {OpMode::kDefault, OpMode::kCompact, OpMode::kRecompute};
    if (options_.allow_rng_variants) candidates.push_back(OpMode::kRegenerate);
    MeasuredChain m = measure_chain(stages_, input, pool, first, candidates, options_.stage_clock,
                                    options_.measure_repeats);
    if (first && m.first_writes_input) {
      // Each run of the stage would write the input again: the measurement's, a recomputation's.
      throw ConfigError(fmt::format(
          "monet::Runtime: the first stage, {}, writes the model's input in place; monet runs a "
          "stage more than once (to measure it, and to recompute it under a budget), and would "
          "write the input again each time. Make it write a new tensor (x.mul(2), not x.mul_(2); "
          "inplace=false) or run it on the input before the step",
          stages_[0].name));
    }
    if (first && (join_aliasing_stages(m.aliases_input, input) ||
                  join_stages_that_free_their_input(m, input))) {
      stats_.profile_seconds += m.seconds;
      return measure(input, shape, pool);
    }
    if (input.is_cuda() && options_.stage_clock == StageClock::kAuto && !m.kernel_times &&
        !clock_warned_) {
      clock_warned_ = true;
      log(LogLevel::kWarn,
          "stages are timed by the wall clock, not by CUPTI's kernel records: {}. Set "
          "MONET_STAGE_CLOCK=wall to choose the wall clock and silence this",
          KernelClock::instance().unavailable_reason());
    }
    warn_of_untimed_stretches(m);
    ++stats_.profiled_steps;
    stats_.profile_seconds += m.seconds;
    last_.profiled = true;
    if (first) make_predictor(m.chain);
    predictor_->observe(shape, m.chain);
    remeasure_.erase(ShapeKey(shape, 62));
    if (!options_.predictor_state.empty()) {
      predictor_->set_measured_on(describe(measured_on_));
      save_state();
    }
    log(LogLevel::kInfo, "measured shape {} in {:.3f} s ({} shapes profiled; stage times from {})",
        join_dims(shape), m.seconds, predictor_->profiled_shapes(),
        !m.kernel_times ? "the wall clock"
        : m.kernel_timings.untimed == 0 && m.kernel_timings.with_records > 0
            ? "CUPTI's kernel records"
            : "CUPTI's kernel records and the wall clock");
    return m.chain;
  }

  // Where CUPTI timed the pass only in part, says so once: the stretches it could not time, or
  // a pass in which it recorded no device work at all (another profiler took its callbacks after
  // monet's clock opened), are timed by the wall clock, which on a GPU also counts host time.
  void warn_of_untimed_stretches(const MeasuredChain& m) {
    const KernelTimings& k = m.kernel_timings;
    if (!m.kernel_times || clock_warned_ || k.stretches == 0) return;
    if (k.untimed > 0) {
      clock_warned_ = true;
      log(LogLevel::kWarn,
          "{} of the measurement pass's {} timed stretches were timed by the wall clock, not by "
          "CUPTI's kernel records: {}. Set MONET_STAGE_CLOCK=wall to choose the wall clock and "
          "silence this",
          k.untimed, k.stretches, k.why);
    } else if (k.with_records == 0) {
      clock_warned_ = true;
      log(LogLevel::kWarn,
          "CUPTI recorded no device work in the measurement pass, so its stages were timed by "
          "the wall clock; another profiler may have taken CUPTI's activity callbacks. Set "
          "MONET_STAGE_CLOCK=wall to choose the wall clock and silence this");
    }
  }

  // Stages whose output shares their input's storage (a view, or the input written in place) are
  // run with the stage before them (the first stage's with the stage after it): the memory model
  // counts a stage's input and output apart, and an operator that writes in place cannot start a
  // checkpointed segment. Returns whether any stage was joined; the caller measures again.
  bool join_aliasing_stages(const std::vector<bool>& aliases, const at::Tensor& input) {
    const std::size_t loss = stages_.size() - 1;
    std::vector<bool> joins(stages_.size(), false);
    std::string joined;
    int count = 0;
    for (std::size_t k = 0; k < loss && k < aliases.size(); ++k) {
      if (!aliases[k]) continue;
      const std::size_t j = k == 0 ? 1 : k;  // the first stage takes the one after it
      if (j >= loss) continue;
      joins[j] = true;
      joined += fmt::format("{}{}", joined.empty() ? "" : ", ", stages_[k].name);
      ++count;
    }
    if (count == 0) return false;
    log(LogLevel::kInfo,
        "{} {} {} input, or a view of it, as {} output: {} with the stage before it (the first "
        "stage with the one after it)",
        count == 1 ? "stage" : "stages", joined, count == 1 ? "gives its" : "give their",
        count == 1 ? "its" : "their", count == 1 ? "it runs" : "each runs");
    restage(joins, input);
    return true;
  }

  // A stage whose graph keeps not its input, after a stage whose graph keeps not its output (in
  // some of their modes: a ReLU or a Dropout after a Linear, a compact BatchNorm after a
  // convolution), runs with the stage before it: a step frees the tensor between them once the
  // later stage's forward has run, where the memory model keeps a stage's input to its backward.
  // Joined, the tensor is inside one stage, and its measurement has what a step keeps. Joining
  // takes away a place to start a checkpointed segment, which then keeps the earlier stage's
  // input instead: so only where that input is no larger (not after a pooling or a narrowing
  // Linear, whose output is the better tensor to keep). The loss is not joined (each step sets its
  // function). Returns whether any stage was joined; the caller measures again.
  bool join_stages_that_free_their_input(const MeasuredChain& m, const at::Tensor& input) {
    const std::size_t loss = stages_.size() - 1;
    std::vector<bool> joins(stages_.size(), false);
    std::string joined;
    int count = 0;
    const auto out_bytes = [&](std::size_t k) { return m.chain.stages[k].variants[0].out_bytes; };
    // The input of the stage that stage k - 1 is now part of: where a segment would start instead.
    std::int64_t joined_input = static_cast<std::int64_t>(input.nbytes());
    for (std::size_t k = 1; k < loss && k < m.frees_input.size(); ++k) {
      if (!m.frees_input[k] || !m.frees_output[k - 1] || out_bytes(k - 1) < joined_input) {
        joined_input = out_bytes(k - 1);
        continue;
      }
      joins[k] = true;
      joined += fmt::format("{}{}", joined.empty() ? "" : ", ", stages_[k].name);
      ++count;
    }
    if (count == 0) return false;
    log(LogLevel::kInfo,
        "{} {} {} not {} input, nor the stage before {} its output: {} with the stage before it, "
        "so that the tensor between them, which a step frees, is not counted as kept",
        count == 1 ? "stage" : "stages", joined, count == 1 ? "keeps" : "keep",
        count == 1 ? "its" : "their", count == 1 ? "it" : "each",
        count == 1 ? "it runs" : "each runs");
    restage(joins, input);
    return true;
  }

  void restage(const std::vector<bool>& joins, const at::Tensor& input) {
    stages_ = merge_stages(std::move(stages_), joins);
    index_parameters();
    measured_on_ = measured_on(input);
  }

  // `stages` in place of the runtime's, with the step's loss kept in the last.
  void set_stages(std::vector<RuntimeStage> stages) {
    std::function<at::Tensor(const at::Tensor&)> loss_fn = std::move(stages_.back().fn);
    stages_ = std::move(stages);
    stages_.back().fn = std::move(loss_fn);
    index_parameters();
  }

  // Back to the stages as cut from the model, before a measurement made afresh: what the stages
  // keep changes with what is measured afresh (a frozen Linear keeps not its input, an unfrozen
  // one does), and the first measurement after it joins stages again where they keep what makes
  // a join right now. Without this an unfrozen stage stayed joined, and a segment could no longer
  // start between its parts.
  void part_joined_stages(const at::Tensor& input) {
    if (stages_.size() == cut_.size()) return;
    set_stages(cut_);
    measured_on_ = measured_on(input);
    log(LogLevel::kInfo,
        "the joined stages are parted again ({} stages) for the measurement made afresh, which "
        "joins them where what they keep now calls for it",
        stages_.size() - 1);
  }

  // Before the first measurement: the predictor saved by an earlier run (MONET_PREDICTOR_STATE),
  // with each stage's operator modes from its variants, so that a restarted job measures no shape
  // the saved state covers, not even its first. Throws ConfigError when the state was saved for
  // another model; passes over, with a warning, one measured on another dtype, device or set of
  // trained parameters.
  //
  // Tried again at the next step where it throws, with the stages parted again: a job that goes on
  // after the error neither measures afresh nor writes over a state saved for another model.
  void warm_start(const at::Tensor& input) {
    try {
      warm_start_from_file(input);
    } catch (...) {
      part_joined_stages(input);
      throw;
    }
    warm_start_tried_ = true;
  }

  void warm_start_from_file(const at::Tensor& input) {
    const std::string& path = options_.predictor_state;
    if (path.empty() || !std::filesystem::exists(path)) return;
    // The predictor's own messages name the file; these say which knob named it.
    Predictor loaded = [&] {
      try {
        return Predictor::load(path);
      } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("monet::Runtime (MONET_PREDICTOR_STATE): {}", e.what()));
      }
    }();
    // A state saved after stages were joined (join_aliasing_stages) names them
    // "3:Linear+4:Flatten": the same stages are joined first.
    std::vector<bool> joins(stages_.size(), false);
    std::size_t k = 0;
    bool joined = true;
    for (const StageLayout& l : loaded.layout()) {
      std::size_t from = 0;
      for (bool first_part = true; joined; first_part = false) {
        const std::size_t plus = l.name.find('+', from);
        const std::string part = l.name.substr(from, plus - from);
        joined = k < stages_.size() && stages_[k].name == part;
        if (joined) joins[k++] = !first_part;
        if (plus == std::string::npos) break;
        from = plus + 1;
      }
    }
    if (joined && k == stages_.size() &&
        std::find(joins.begin(), joins.end(), true) != joins.end()) {
      restage(joins, input);
    }
    std::vector<StageLayout> layout;
    std::vector<std::vector<OpMode>> modes;
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      StageLayout l;
      l.name = stages_[i].name;
      l.variants.clear();
      std::vector<OpMode> stage_modes;
      if (i < loaded.layout().size()) {
        for (const std::string& name : loaded.layout()[i].variants) {
          int m = 0;
          while (m < kOpModes && op_mode_name(static_cast<OpMode>(m)) != name) ++m;
          if (m == kOpModes) {
            throw ConfigError(fmt::format(
                "{} (MONET_PREDICTOR_STATE): stage {} '{}' has variant '{}', which is no operator "
                "mode ('default', 'compact', 'recompute' or 'regenerate'); delete the file to "
                "measure "
                "afresh",
                path, i, l.name, name));
          }
          l.variants.push_back(name);
          stage_modes.push_back(static_cast<OpMode>(m));
        }
      }
      layout.push_back(std::move(l));
      modes.push_back(std::move(stage_modes));
    }
    try {
      loaded.check_layout(layout);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{} (MONET_PREDICTOR_STATE): {}", path, e.what()));
    }
    // Learnt on another number of varying dims, every prediction it was asked for would fail.
    const Shape shape = varying_shape(input);
    if (loaded.num_dims() != 0 && loaded.num_dims() != static_cast<int>(shape.size())) {
      throw ConfigError(fmt::format(
          "{} (MONET_PREDICTOR_STATE) was learnt on {} varying dims of the input ({}), and this "
          "job's input has {} ({} in this batch); delete the file to measure afresh, or name "
          "the dims the job that saved it did in Options::varying_dims",
          path, loaded.num_dims(), loaded.describe_dims(), shape.size(), join_dims(shape)));
    }
    // Measured on another dtype, device or set of trained parameters: its bytes and times are not
    // this job's. A state that does not say (an older monet's) is taken.
    const std::string here = describe(measured_on_);
    const auto regenerates = [&] {
      for (const std::vector<OpMode>& m : modes) {
        if (std::find(m.begin(), m.end(), OpMode::kRegenerate) != m.end()) return true;
      }
      return false;
    };
    // A state an older monet saved under allow_rng_variants says so only by its regenerate modes,
    // not in its description: such a state is this job's where it allows them, and not otherwise.
    // One saved before monet counted the parameters' elements is taken as it was before.
    const auto described_as = [&](bool with_rng, bool with_elements) {
      return describe(measured_on_, with_rng, with_elements) == loaded.measured_on();
    };
    const bool older_with_rng = options_.allow_rng_variants && !loaded.measured_on().empty() &&
                                (described_as(false, true) || described_as(false, false)) &&
                                regenerates();
    const bool older_without_elements = described_as(true, false);
    if (!options_.allow_rng_variants && regenerates()) {
      log(LogLevel::kWarn,
          "{} (MONET_PREDICTOR_STATE) was measured with dropout masks redrawn in backward "
          "(mode 'regenerate'), which this job does not allow (Options::allow_rng_variants): its "
          "shapes are measured afresh, and the file is written over after the first",
          path);
      part_joined_stages(input);
      return;
    }
    if (!loaded.measured_on().empty() && loaded.measured_on() != here && !older_with_rng &&
        !older_without_elements) {
      log(LogLevel::kWarn,
          "{} (MONET_PREDICTOR_STATE) was measured on \"{}\", and this job runs on \"{}\": its "
          "shapes are measured afresh, and the file is written over after the first",
          path, loaded.measured_on(), here);
      part_joined_stages(input);  // joined as the file's were: its stages kept what it measured
      return;
    }
    for (std::size_t i = 0; i < stages_.size(); ++i) stages_[i].modes = modes[i];
    predictor_ = std::make_unique<Predictor>(std::move(loaded));
    log(LogLevel::kInfo, "predictor warm-started from {} ({} shapes profiled)", path,
        predictor_->profiled_shapes());
  }

  void make_predictor(const Chain& measured) {
    std::vector<StageLayout> layout;
    for (const Stage& s : measured.stages) {
      StageLayout l;
      l.name = s.name;
      l.variants.clear();
      for (const VariantCosts& v : s.variants) l.variants.push_back(v.name);
      layout.push_back(std::move(l));
    }
    predictor_ = std::make_unique<Predictor>(std::move(layout));
  }

  // Compares the step's measured peak with its plan's. `before`: what stayed from the steps
  // before this one, as the plan counts it; what it grew by since the plan was made (an
  // optimizer's first state) is no fault of the chain. A plan that fell short is dropped and its
  // shape measured again, unless the plan was made on a measurement of this very step: measuring
  // again would give the same chain, so what the memory model does not see is kept free for the
  // shape from then on instead.
  void feedback(const Shape& shape, const PlanResult& plan, const Held& before) {
    if (options_.budget_bytes == 0 || plan.peak_bytes == 0) return;
    const double tolerance = cache_.options().peak_tolerance;
    const ShapeKey exact(shape, 62);
    const std::int64_t planned = peak_with(plan, before) + unmodelled_for(exact);
    if (static_cast<double>(last_.measured_peak_bytes) >
        static_cast<double>(planned) * (1.0 + tolerance)) {
      const ShapeKey key(shape);
      const bool dropped = cache_.erase(key) | exact_cache_.erase(exact);
      if (dropped) ++stats_.dropped_plans;
      if (last_.profiled) {
        unmodelled_[exact] = unmodelled_for(exact) + (last_.measured_peak_bytes - planned);
        log(LogLevel::kWarn,
            "shape {}: measured peak {} above the planned {}, on a measurement of this very "
            "shape: {} the memory model does not see is kept free for it from now on",
            last_.shape, format_bytes(last_.measured_peak_bytes),
            format_bytes(static_cast<std::size_t>(planned)),
            format_bytes(static_cast<std::size_t>(unmodelled_[exact])));
        return;
      }
      remeasure_.insert(exact);
      log(LogLevel::kInfo,
          "shape {}: measured peak {} above the planned {}; its plan is dropped and the shape "
          "measured again",
          last_.shape, format_bytes(last_.measured_peak_bytes),
          format_bytes(static_cast<std::size_t>(planned)));
    }
  }

  std::int64_t unmodelled_for(const ShapeKey& exact) const {
    const auto it = unmodelled_.find(exact);
    return it == unmodelled_.end() ? 0 : it->second;
  }

  InfeasibleBudgetError infeasible(const Shape& shape, const ShapeKey& key,
                                   const PlanResult& plan) const {
    // The least budget whose share for plans holds the least plan even after one retry has
    // raised the margin (at the very edge, what the memory model does not count can make the
    // first run fall short), with 2% more for what a new measurement of the shape may differ by,
    // rounded up to 64 KiB: a budget named here must be enough when the user sets it.
    constexpr std::int64_t kRound = 64 << 10;
    const double kept_free =
        std::min(RetryMargins::kMaxShare, margins_.share(key, false) + options_.retry_margin_step);
    const double plan_bytes = static_cast<double>(plan.min_feasible_bytes) * 1.02;
    const double needed = std::max(plan_bytes / (1.0 - kept_free),
                                   plan_bytes + static_cast<double>(RetryMargins::kFloorBytes));
    const std::int64_t least =
        (static_cast<std::int64_t>(std::ceil(needed)) + kRound - 1) / kRound * kRound;
    return InfeasibleBudgetError(
        fmt::format("monet: no plan fits input shape {} in the budget of {}: the least budget "
                    "that fits it is {} ({} bytes, room for the least plan with {:.0f}% of it kept "
                    "free for what plans do not count, as after a retry). Set MONET_BUDGET (or "
                    "Options::budget_bytes) to at least that, or use "
                    "smaller batches.",
                    join_dims(shape), format_bytes(options_.budget_bytes),
                    format_bytes(static_cast<std::size_t>(least)), least, 100.0 * kept_free),
        options_.budget_bytes, least);
  }

  // `kept_free`: the share of the budget the last plan that ran left free.
  // `plan_shape`: the shape the plan that ran was made for (under plan_once, the first's).
  InfeasibleBudgetError out_of_retries(const Shape& shape, const Shape& plan_shape,
                                       double kept_free) const {
    return InfeasibleBudgetError(
        fmt::format("monet: input shape {}{} ran out of memory {} within the budget of {}, "
                    "the last time with {:.0f}% of it kept free for what the plan does not "
                    "count; the plan itself peaked at {}. Raise MONET_BUDGET above {}.",
                    join_dims(shape),
                    shape == plan_shape
                        ? std::string()
                        : fmt::format(" (running the plan made for {}, Options::plan_once)",
                                      join_dims(plan_shape)),
                    options_.max_retries == 0 ? std::string("once")
                                              : fmt::format("{} times", options_.max_retries + 1),
                    format_bytes(options_.budget_bytes), 100.0 * kept_free,
                    format_bytes(last_.planned_peak_bytes), format_bytes(options_.budget_bytes)),
        options_.budget_bytes, options_.budget_bytes + 1);
  }

  InfeasibleBudgetError device_too_small(const Shape& shape) const {
    return InfeasibleBudgetError(
        fmt::format("monet: the device cannot hold input shape {} even one stage at a time, "
                    "beyond the budget of {}. Use smaller batches or a larger device.",
                    join_dims(shape), format_bytes(options_.budget_bytes)),
        options_.budget_bytes, options_.budget_bytes + 1);
  }

  torch::nn::Sequential model_;
  Options options_;
  Planner planner_;
  PlanCache cache_;        // plans predicted for a bucket of shapes
  PlanCache exact_cache_;  // plans of measured shapes that the predictor cannot cover yet
  std::vector<RuntimeStage> stages_;
  struct GradOwner {
    std::size_t stage;  // the last stage that uses the parameter
    at::Tensor parameter;
    bool shared;  // earlier stages use it too
  };
  std::vector<GradOwner> grad_owners_;  // every parameter, once
  // A parameter used by a stage before the last one that uses it: that stage's backward sums its
  // gradient (constructor).
  std::vector<std::pair<std::size_t, at::Tensor>> shared_uses_;
  MeasuredOn measured_on_;  // what the last step ran on (none before the first)
  at::Tensor anchor_;
  std::unique_ptr<Predictor> predictor_;
  // The share of the budget plans keep free, per shape, as retries raised it. A shape no plan fits
  // with the share other shapes' retries carried to it plans with its own (plan_for).
  RetryMargins margins_;
  std::unordered_set<ShapeKey, ShapeKeyHash> remeasure_;
  // Per exact shape: bytes its steps held above plans made on its own measurement (feedback).
  std::unordered_map<ShapeKey, std::int64_t, ShapeKeyHash> unmodelled_;
  std::optional<Shape> first_shape_;  // the shape every plan is for, under plan_once
  // What was measured and planned before the step that now runs on other inputs, a model changed
  // or autocast (follow_what_is_measured), kept until that step trains.
  struct SetAside {
    MeasuredOn measured_on;
    std::unique_ptr<Predictor> predictor;
    PlanCache cache, exact_cache;
    std::unordered_set<ShapeKey, ShapeKeyHash> remeasure;
    std::unordered_map<ShapeKey, std::int64_t, ShapeKeyHash> unmodelled;
    std::vector<RuntimeStage> stages;
    std::optional<Shape> first_shape;
    int state_saves;
  };
  std::optional<SetAside> set_aside_;
  int state_saves_ = 0;                   // the predictor states written (MONET_PREDICTOR_STATE)
  Shape first_sizes_;                     // the sizes of the first input trained (its rank is kept)
  std::vector<RuntimeStage> cut_;         // the stages as cut from the model, before any join
  bool warm_start_tried_ = false;         // warm_start() runs once, before the first measurement
  bool clock_warned_ = false;             // said once that CUPTI could not time the stages
  std::optional<StepRollback> rollback_;  // the step's, while one runs
  StepReport last_;
  RuntimeStats stats_;
};

Runtime::Runtime(torch::nn::Sequential model, Options options)
    : impl_(std::make_unique<RuntimeImpl>(std::move(model), std::move(options))) {}
Runtime::~Runtime() = default;
torch::Tensor Runtime::step(const torch::Tensor& input, const LossFn& loss_fn) {
  return impl_->step(input, loss_fn);
}
torch::Tensor Runtime::forward(const torch::Tensor& input) { return impl_->forward(input); }
const StepReport& Runtime::last_step() const { return impl_->last_step(); }
RuntimeStats Runtime::stats() const { return impl_->stats(); }
const Options& Runtime::options() const { return impl_->options(); }
std::vector<std::string> Runtime::stage_names() const { return impl_->stage_names(); }

}  // namespace monet
