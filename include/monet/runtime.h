// monet::Runtime: trains a torch::nn::Sequential inside a memory budget, for every input shape it
// meets, with the least recomputation. Each child of the Sequential is a stage (nested
// Sequentials are opened; a child that gives back its input, as a view or written in place, runs
// with the child before it); per input shape the runtime predicts each stage's bytes and time,
// plans which stages to checkpoint and which operator variant each runs, runs the plan, and
// retries a batch that did not fit. DESIGN.md, "One iteration, as data flows", is the loop.
//
//   monet::Runtime rt(model, monet::Options::from_env());   // MONET_BUDGET=2GiB ...
//   for (auto& [x, y] : batches) {
//     optimizer.zero_grad();
//     torch::Tensor loss = rt.step(x, [&](const torch::Tensor& out) {
//       return torch::nn::functional::cross_entropy(out, y);
//     });                                                   // forward, loss and backward
//     optimizer.step();
//   }
//
// The runtime routes LibTorch's tensors through monet's allocator (monet::install()), and its
// budget is the allocator's: no tensor of the training device is ever held beyond it.
//
// What it keeps exact: gradients equal those of the same model without monet (checkpointed
// stages recompute with the RNG state their forward saw, so dropout draws the same masks, and
// with their BatchNorm running statistics updated once), and a batch that runs out of memory is
// rolled back (gradients, RNG state and module buffers as before it) and run again.
//
// What it asks of the model: a stage's forward may run more than once in a step (a new shape's
// measurement runs each stage in each of its operator modes; a checkpointed stage runs again in
// backward; a batch that ran out of memory runs again). monet puts back the RNG state and the
// module buffers each time; any other effect of a forward (a counter a Functional keeps, a log
// line, a tensor written in place outside the stage) happens once per run. The first stage must
// not write the model's input in place (ConfigError at the first measured step).
//
// One training thread per process: runtimes share the device pools' peak marks and LibTorch's
// random generators, so a step that starts while another runtime's step runs in another thread
// throws UnsupportedError. Runtimes that step one after another are fine, each step under its own
// runtime's budget: the budget is set on the pool of the model's device when the runtime is made,
// and on that of the inputs' device at each step where the pool has another (another runtime's).
// A step lets go of its loss function, and what it captures, when it returns or throws.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "monet/planner.h"

namespace monet {

// How a Runtime plans. Options::from_env() fills it from the MONET_* variables (README).
// How measurement passes time a stage that runs on a CUDA device (MONET_STAGE_CLOCK). On the CPU
// stages are timed by the wall clock.
enum class StageClock {
  kAuto,  // the device's busy time from CUPTI's kernel, copy and memset records, free of launch
          // gaps and of the host's load; the wall clock where CUPTI does not load (said once)
  kWall,  // the wall clock, with the device synchronised before and after
};

struct Options {
  // Bytes the training device may hold (cached or in use); 0 means no budget: every stage is kept
  // and nothing is measured. It becomes the budget of the training device's pool when the Runtime
  // is made and at each step (0 lifts the pool's cap, MONET_BUDGET's included, so that a baseline
  // runs unconstrained beside budgeted Runtimes). Default: MONET_BUDGET, else 0.
  std::int64_t budget_bytes = 0;
  // How plans are chosen (MONET_PLANNER; default monet).
  Strategy strategy = Strategy::kMonet;
  // Fraction of the budget plans leave free for what the memory model does not count: the
  // allocator's rounding and fragmentation, the optimizer's temporaries; 2 MiB at the least. A
  // batch that runs out of memory raises it by retry_margin_step for its shape, and shapes planned
  // after it start from the raised margin where a plan fits with it (MONET_MARGIN; default 0.10).
  double margin = 0.10;
  double retry_margin_step = 0.10;
  // After this many steps in a row with no batch out of memory, what retries added to the margin
  // (every shape's, and the one carried to new shapes) comes down by retry_margin_step, and the
  // plans made with it are made again: a fragmentation spike or a one-off allocation costs
  // recomputation for a while, not for the rest of the job. 0: never (default 200).
  int margin_relax_steps = 200;
  // Times one batch is retried after running out of memory before the step gives up with an
  // InfeasibleBudgetError (default 3).
  int max_retries = 3;
  // A JSON file the predictor warm-starts from when it exists and saves to after every profiled
  // shape, so that a restarted job need not profile again (MONET_PREDICTOR_STATE; default none).
  // Under a budget, what retries added to the margin is kept beside it, in the file of the same
  // path and ".margins", and taken by a job of the same budget and margin that starts again.
  // The Runtime's constructor throws ConfigError when the file's folder cannot be written; a save
  // that fails later (a full disk) is a warning, and the job goes on. A state measured on another
  // input (dtype, device, its gradient asked for or not), other parameter dtypes or another count
  // of parameter elements, frozen parameters, autocast, or another allow_rng_variants or
  // substitute_variants, is not taken: the job measures afresh and writes over it. A state of
  // another model (other stages), of another number of varying dims, or that cannot be read, is a
  // ConfigError at the first step, and the file is left as it is.
  std::string predictor_state;
  // Which dims of the input vary between batches (the shape the predictor learns on and the plan
  // cache keys by), at most 4. Empty: dims 0 and 1 of a 2-D or 3-D input (batch, sequence); dims
  // 0, 2 and 3 of a 4-D one (batch, height, width); dims 0, 2, 3 and 4 of a 5-D one (batch, depth
  // or time, height, width); the one dim of a 1-D one; a ConfigError at the first step for an
  // input of more dims. A negative or repeated dim, or more than 4, is a ConfigError when the
  // Runtime is made, a dim the input does not have one at the step. A dim not named that differs
  // from the first input's is refused at the step (std::invalid_argument): plans are for one size
  // of it.
  std::vector<int> varying_dims;
  // Plans cached, one per bucket of varying dims (least recently used dropped first).
  std::size_t plan_cache_capacity = 256;
  // Replace torch::nn ReLU, Dropout, BatchNorm2d, MaxPool2d, GELU and Softmax stages by monet::nn
  // modules whose memory-lean variants the planner may choose (parameters are shared).
  bool substitute_variants = true;
  // Allow variants that draw random numbers differently from torch (dropout that regenerates its
  // mask from a seed of its own): they keep the least, but training is then no longer identical,
  // draw for draw, to the same run without monet. Default false.
  bool allow_rng_variants = false;
  // Plan once, for the shape of the first batch that trains, and run that plan for every batch
  // after it, whatever its shape: what a planner for one fixed input shape (MONeT, Checkmate)
  // gives a job whose shapes vary, when the first batch is the largest. Where shapes are measured
  // afresh (the dtype, device, autocast, frozen parameters or the input's need of a gradient
  // changed), the plan is made once more, for the first batch after it. For comparisons
  // (monet-bench's "static" strategy); default false.
  bool plan_once = false;
  // How a CUDA stage is timed when its shape is measured (MONET_STAGE_CLOCK: auto or wall;
  // default auto).
  StageClock stage_clock = StageClock::kAuto;
  // Times each stage's operator modes are timed when a shape is measured, keeping each mode's
  // fastest time (bytes come from the first run). More repeats cost more measuring and give
  // steadier times, so that the planner does not pick a mode for one lucky timing
  // (MONET_MEASURE_REPEATS, 1 to kMaxMeasureRepeats, 20). Default 1.
  int measure_repeats = 1;
  static constexpr int kMaxMeasureRepeats = 20;  // more would measure a shape for too long

  // The fields above from MONET_BUDGET, MONET_PLANNER, MONET_MARGIN, MONET_PREDICTOR_STATE,
  // MONET_STAGE_CLOCK and MONET_MEASURE_REPEATS.
  // Throws ConfigError naming the variable for a malformed value.
  static Options from_env();
};

// What one step did.
struct StepReport {
  std::string shape;      // the input's varying dims, "16x128"
  bool profiled = false;  // a measurement pass ran first (a shape the predictor was unsure of)
  bool plan_from_cache = false;
  int retries = 0;                       // times the batch ran out of memory and ran again
  std::int64_t planned_peak_bytes = 0;   // simulate()'s peak of the plan that ran
  std::int64_t measured_peak_bytes = 0;  // the allocator's peak of requested bytes in the step
  // simulate()'s peak of the plan that ran on the predictor's point estimate for this shape (no
  // error bound added): against measured_peak_bytes, how well the predictor knew the shape.
  // 0 when the step measured the shape, or runs without a budget.
  std::int64_t predicted_peak_bytes = 0;
  std::int64_t budget_bytes = 0;  // what the plan was made for (budget less margin)
  double plan_us = 0.0;           // microseconds spent planning (0 on a cache hit)
  // simulate()'s time of the plan that ran and of keeping every stage, seconds, on the chain it
  // was planned for (measured or predicted; under plan_once, this step's shape's predicted chain
  // where it has one): their ratio is the recomputation the plan meant to add, free of the
  // machine's noise. 0 without a budget.
  double planned_seconds = 0.0;
  double unconstrained_seconds = 0.0;
  double seconds = 0.0;  // the whole step, measurement pass included
  int checkpointed_stages = 0;
  int variant_stages = 0;  // stages running a non-default variant
  // One letter per stage: K kept, C checkpointed, S checkpointed and starting a new segment right
  // after another; lower case: a lean variant.
  std::string plan;
};

// Totals since the runtime was made.
struct RuntimeStats {
  std::int64_t steps = 0;
  std::int64_t profiled_steps = 0;  // steps that began with a measurement pass
  std::int64_t plans_made = 0;      // planner calls
  std::int64_t cache_hits = 0;
  std::int64_t retries = 0;        // out-of-memory retries, over all steps
  std::int64_t dropped_plans = 0;  // cached plans dropped because the measured peak differed
  std::int64_t max_measured_peak_bytes = 0;
  double plan_seconds = 0.0;
  double profile_seconds = 0.0;  // time in measurement passes
};

class RuntimeImpl;

class Runtime {
 public:
  using LossFn = std::function<torch::Tensor(const torch::Tensor& output)>;

  // Wraps `model` (its modules and parameters are used as they are, not copied). Installs monet's
  // allocator. Throws ConfigError for bad options or an empty model, and BudgetBelowModelError (a
  // ConfigError, monet/errors.h) for a budget that cannot hold the model's parameters and buffers
  // and the gradients of those that train (on the parameters' device), saying what it must hold.
  explicit Runtime(torch::nn::Sequential model, Options options = Options::from_env());
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // One training step on `input`: forward as planned, loss_fn on the output, backward (gradients
  // accumulate into the parameters as loss.backward() would). Returns the loss, detached.
  // Runs out of memory at most max_retries times per batch, each time rolled back and replanned
  // with a larger margin; then, or when no plan fits at all, throws InfeasibleBudgetError, with
  // gradients, RNG and buffers as before the call. Where no plan fits, its min_feasible_bytes is
  // the least budget that would fit this shape; where plans fit but the batch ran out of memory
  // every time (or the device could not hold even the measurement), what the memory model does
  // not see is unknown, and it is the budget plus one byte: raise the budget or MONET_MARGIN.
  // Without a budget, running out of memory is rethrown as LibTorch threw it, after the rollback
  // (every plan keeps every stage; another run would fail the same way). In eval mode or under
  // torch::NoGradGuard it is a plain forward and loss, recording nothing for a backward, which
  // does not run.
  // A step whose input dtype, device or need of a gradient, parameter dtypes or elements, trained
  // parameters or autocast differ from the step before measures its shapes afresh. Under autocast
  // the step runs each op in the dtype a plain step would; checkpointed stages recompute under the
  // autocast of their forward, also where the caller runs backward outside it (after forward()).
  // Throws std::invalid_argument, before anything runs, for an input with no elements or with
  // another number of dims than the first input trained; ConfigError for an empty loss_fn and
  // where a stage gives something other than a tensor (a tuple); UnsupportedError where a step
  // of any Runtime is running in another thread. An exception from loss_fn or from LibTorch (other
  // than running out of memory) reaches the caller as it was thrown.
  torch::Tensor step(const torch::Tensor& input, const LossFn& loss_fn);

  // The forward alone, for evaluation: in eval mode or without grad it is the model's plain
  // forward (in eval mode with grad enabled it records a graph, as the model would, for a caller
  // that wants an input's gradient: evaluate under torch::NoGradGuard, or with step(), to keep
  // only what a forward needs). In training with grad enabled it runs the plan of the input's
  // shape and the caller runs backward (no retry: use step() for that); where step() has made no
  // plan for the shape yet, it is the plain forward, keeping every stage.
  torch::Tensor forward(const torch::Tensor& input);

  const StepReport& last_step() const;
  RuntimeStats stats() const;
  const Options& options() const;
  // The stages as the runtime cut the model, "0:Linear", "1:ReLU", ...; children joined after the
  // first measured step are one stage, "2:Linear+3:Flatten".
  std::vector<std::string> stage_names() const;

 private:
  std::unique_ptr<RuntimeImpl> impl_;
};

}  // namespace monet
