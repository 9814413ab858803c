#include "runtime/profiler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/log.h"
#include "monet/bytes.h"
#include "runtime/autograd_release.h"
#include "runtime/kernel_clock.h"
#include "runtime/rng_state.h"

namespace monet {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Waits for the device of `t` to finish its queued work, so that a stretch timed ends with its
// kernels rather than their launches; nothing to wait for on the CPU.
void settle(const at::Tensor& t) {
  if (t.is_cuda()) torch::cuda::synchronize(t.get_device());
}

// Times one stretch of a stage's run on the device of `on`, synchronised on both sides. With
// `kernel` (on CUDA) the device's busy time from CUPTI (KernelClock), tallied there, else and
// where CUPTI did not time the stretch the wall clock.
class StageTimer {
 public:
  StageTimer(const at::Tensor& on, KernelTimings* kernel) : on_(on), kernel_(kernel) {}
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  // A stretch the stage threw out of: CUPTI's records go off again, or every step would pay them.
  ~StageTimer() {
    if (open_) KernelClock::instance().stop();
  }
  void start() {
    settle(on_);
    if (kernel_ != nullptr) KernelClock::instance().start();
    open_ = kernel_ != nullptr;
    t0_ = now();
  }
  double stop() {
    settle(on_);
    const double wall = now() - t0_;
    if (kernel_ == nullptr) return wall;
    open_ = false;
    const DeviceTime t = KernelClock::instance().stop();
    ++kernel_->stretches;
    if (!t.timed()) {
      ++kernel_->untimed;
      kernel_->why = t.error;
      return wall;
    }
    if (t.records == 0) return wall;
    ++kernel_->with_records;
    return t.seconds;
  }

 private:
  const at::Tensor& on_;
  KernelTimings* kernel_;
  bool open_ = false;  // a CUPTI window is open
  double t0_ = 0.0;
};

std::int64_t requested(CachingAllocator& pool) {
  return static_cast<std::int64_t>(pool.stats().requested_bytes);
}

std::int64_t clamp0(std::int64_t v) { return std::max<std::int64_t>(0, v); }

// References to a tensor's implementation and to its storage: what the graph adds to them over a
// forward is what it keeps of the tensor (a saved variable holds the tensor itself, or a view or
// a copy of its metadata sharing its storage).
struct References {
  std::size_t tensor = 0;
  std::size_t storage = 0;
  explicit References(const at::Tensor& t)
      : tensor(t.use_count()), storage(t.has_storage() ? t.storage().use_count() : 0) {}
};

// Whether the graph of a stage's forward keeps its input `leaf` (references beyond `before`, but
// for the gradient accumulator a leaf that needs a gradient gets, which holds the leaf and which a
// step's non-leaf input does not have) and its output `y` (any reference beyond `y` itself and,
// where `y` is a view, as a 3-D Linear's output is, the base it holds). A tensor without storage
// counts as kept: only a stage known to free a tensor is run with another.
StageKeeps keeps_of(const at::Tensor& leaf, const References& before, const at::Tensor& y) {
  StageKeeps keeps;
  if (!y.defined() || !y.requires_grad() || !leaf.has_storage() || !y.has_storage() ||
      y.is_alias_of(leaf)) {
    return keeps;
  }
  const std::size_t accumulator =
      leaf.requires_grad() && torch::autograd::impl::try_get_grad_accumulator(leaf) ? 1 : 0;
  const References now(leaf);
  keeps.input = now.tensor > before.tensor + accumulator || now.storage > before.storage;
  std::size_t own = 1;
  if (y.is_view()) {
    own = 2;
    if (y._base().use_count() > 1) return keeps;
  }
  keeps.output = y.use_count() > 1 || y.storage().use_count() > own;
  return keeps;
}

// What the first mode's run of a stage leaves for the stages after it and for the other modes.
struct FirstRun {
  at::Tensor output;                // the stage's output, detached: the next stage's input
  at::Tensor grad;                  // ones shaped like it (undefined for the loss): every mode's
                                    // output gradient
  std::optional<RngState> rng;      // the generator right after the forward
  BufferSnapshot buffers;           // the stage's buffers right after the forward
  std::uint64_t variant_calls = 0;  // variant-aware operators the forward called
  std::uint64_t recomputing_calls = 0;  // those of them that keep less under kRecompute
  // The output shares the input's storage: a view of it, or the input written in place.
  bool aliases_input = false;
  bool writes_input = false;  // the forward wrote its input in place
};

// LibTorch's refusal of an operator that writes in place to a leaf that needs a gradient (or to
// a view of one): what a stage made of such an operator meets on the profiler's fresh leaf, and
// at the start of a checkpointed segment.
bool is_in_place_on_leaf(const c10::Error& e) {
  return std::string(e.what()).find("that requires grad is being used in an in-place operation") !=
         std::string::npos;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Says, once per stage and mode, that a stage still held `held` bytes after its backward ran
// (with its graph still alive, as a step's graph is until the step's backward is over). The
// memory model frees a kept stage's saved bytes after its backward; what outlives it there is
// usually a custom autograd Function keeping tensors in ctx->saved_data, which is released only
// with the node. With `dropped`, the mode is a lean one that the runtime will not run.
void warn_if_held(const std::string& stage, const std::string& mode, std::int64_t held,
                  bool dropped) {
  if (held <= 0) return;
  static std::mutex mutex;
  static std::set<std::string> warned;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(stage + "/" + mode).second) return;
  log(LogLevel::kWarn,
      "stage {} in mode {} still holds {} after its backward ran, until the whole step's backward "
      "is over: {}. A custom autograd Function that keeps tensors in ctx->saved_data does this; "
      "keep them with ctx->save_for_backward, which autograd releases when the node's backward "
      "has run",
      stage, mode, format_bytes(static_cast<std::size_t>(held)),
      dropped ? "monet will not run the stage in that mode"
              : "plans that recompute earlier stages may peak above their prediction (and be "
                "measured again, or retried)");
}

// One stage in one mode: forward and backward on a fresh leaf. `grad_out` is the gradient of the
// stage's output (undefined for the loss). With `first`, this is the stage's first run: it also
// gives the output (the plain forward's, since grad mode does not change values and the RNG and
// buffers start where the plain forward would), the RNG and buffers after the forward, and makes
// the output gradient, so that no separate forward without grad is needed. Returns the costs;
// `held` gets the bytes still in use after the backward beyond what the memory model has in use
// there (with the graph alive: 0 for a stage that frees what it keeps after its backward), and
// `keeps` (where not null) whether the forward's graph keeps the stage's input and output.
VariantCosts measure_stage(std::vector<RuntimeStage>& stages, int k, OpMode mode,
                           const at::Tensor& input, bool input_counts, at::Tensor grad_out,
                           bool needs_grad_out, CachingAllocator& pool, KernelTimings* kernel,
                           FirstRun* first, std::int64_t* held, StageKeeps* keeps = nullptr) {
  const RuntimeStage& stage = stages[k];
  VariantCosts c;
  c.name = std::string(op_mode_name(mode));
  *held = 0;
  at::Tensor leaf = input.detach();
  const bool needs_grad = input_counts && leaf.is_floating_point();
  if (needs_grad) leaf.requires_grad_(true);

  const std::int64_t before = requested(pool);
  const Mark fwd_mark = pool.mark();
  StageTimer timer(input, kernel);
  timer.start();
  at::Tensor y;
  const std::uint64_t calls = variant_op_calls();
  const std::uint64_t recomputing_calls = recomputing_op_calls();
  const std::int64_t version = leaf._version();
  const References leaf_before(leaf);
  bool copied = false;
  {
    const at::AutoGradMode grad(true);
    const OpModeScope scope(mode);
    try {
      y = stage.fn(leaf);
    } catch (const c10::Error& e) {
      // A stage after the first that writes its input in place: run on a copy to go on, and
      // reported, so that the runtime runs it with the stage before it (whose output it then
      // writes, as in the plain forward) and measures again. The model's own input is the
      // caller's: writing it in place where it needs a gradient is refused as torch refuses it.
      if (first == nullptr || k == 0 || !needs_grad || !is_in_place_on_leaf(e)) throw;
      copied = true;
      y = stage.fn(leaf.clone());
    }
  }
  c.fwd_time = timer.stop();
  const StageKeeps kept = copied ? StageKeeps{} : keeps_of(leaf, leaf_before, y);
  if (keeps != nullptr) *keeps = kept;
  if (first != nullptr) {
    first->writes_input = copied || leaf._version() != version;
    first->aliases_input = first->writes_input || (y.defined() && y.is_alias_of(leaf));
  }
  std::int64_t after = requested(pool);
  c.out_bytes = static_cast<std::int64_t>(y.nbytes());
  c.saved_bytes = clamp0(after - before - c.out_bytes);
  c.fwd_peak = clamp0(static_cast<std::int64_t>(pool.peak_requested_since(fwd_mark)) - after);
  // The model's output and the loss stay in use to the step's end. Any other stage's output is
  // in use in its backward only while its graph keeps it (a ReLU's, until its node has run): the
  // backward runs from the output's graph with the pass's own reference dropped, and where the
  // next stage needs the output, it takes a copy of one the graph keeps.
  const bool output_held = k + 2 >= static_cast<int>(stages.size());
  const bool drops_output = !output_held && y.requires_grad() && !y.is_alias_of(leaf);
  if (first != nullptr) {
    first->variant_calls = variant_op_calls() - calls;
    first->recomputing_calls = recomputing_op_calls() - recomputing_calls;
    first->rng = RngState::capture();
    first->buffers = BufferSnapshot(stages, k, k);
    first->output = drops_output && kept.output ? y.detach().clone() : y.detach();
    if (needs_grad_out && y.is_floating_point()) {
      first->grad = at::ones_like(first->output);
      grad_out = first->grad;
    }
  }

  std::vector<at::Tensor> inputs;
  if (needs_grad) inputs.push_back(leaf);
  for (const at::Tensor& p : stage.trained_parameters()) inputs.push_back(p);
  if (y.requires_grad() && !inputs.empty()) {
    const c10::Device device = y.device();
    std::vector<at::Tensor> grad_outputs;
    if (grad_out.defined()) grad_outputs.push_back(grad_out);
    // The graph's edges in place of torch::autograd::grad()'s outputs and inputs, so that the
    // pass need not hold the output.
    torch::autograd::edge_list wanted;
    for (const at::Tensor& t : inputs) {
      std::shared_ptr<torch::autograd::Node> fn = t.grad_fn();
      if (!fn) fn = torch::autograd::impl::try_get_grad_accumulator(t);
      if (fn) {
        wanted.emplace_back(std::move(fn), t.output_nr());
      } else {  // not used by the stage: as grad()'s allow_unused
        wanted.emplace_back(std::make_shared<torch::autograd::Identity>(), 0);
      }
    }
    const torch::autograd::edge_list roots = {torch::autograd::impl::gradient_edge(y)};
    if (grad_outputs.empty()) grad_outputs.push_back(at::ones_like(y));  // the loss, a scalar
    const std::int64_t holding = requested(pool);
    if (drops_output) y = at::Tensor();
    // In use now, as a step has it where the model puts the stage's backward (the output
    // gradient is the model's dx), but for the output: in use here where the pass holds it (the
    // model's output, the loss, or the first run's output that the next stage takes, where its
    // graph keeps it not) or the graph does (dropping the pass's reference freed nothing).
    after = requested(pool);
    const bool pass_holds = !drops_output || (first != nullptr && !kept.output);
    const bool graph_holds = !pass_holds && holding - after < c.out_bytes;
    const Mark bwd_mark = pool.mark();
    timer.start();
    // The gradients are dropped at once: only the peak of computing them counts.
    torch::autograd::Engine::get_default_engine().execute(roots, grad_outputs, /*keep_graph=*/false,
                                                          /*create_graph=*/false,
                                                          /*accumulate_grad=*/false, wanted);
    c.bwd_time = timer.stop();
    const std::int64_t peak = static_cast<std::int64_t>(pool.peak_requested_since(bwd_mark));
    // The model counts a later stage's input gradient as its predecessor's output gradient; the
    // model input's gradient (where it needs one) is the first stage's own. The model has freed
    // the output before the stage's backward, and counts it here where the step holds it: where
    // the graph keeps it (up to its node), or to the step's end.
    const std::int64_t in_bytes =
        input_counts && k > 0 ? static_cast<std::int64_t>(input.nbytes()) : 0;
    const bool counted = output_held || graph_holds;
    c.bwd_peak = clamp0(peak - after - in_bytes + (counted ? c.out_bytes : 0));
    // On CUDA the gradients are freed on autograd's device thread, a moment after the engine
    // returns: read before that, they look held by the stage (and a lean mode is dropped), and
    // freed inside the next stage's forward, they hide as many of its bytes.
    await_autograd_release(device);
    // After the backward the saved bytes are gone, and the output with them where only the graph
    // held it.
    *held = requested(pool) - (after - c.saved_bytes - (graph_holds ? c.out_bytes : 0));
  } else {
    timer.start();
    c.bwd_time = timer.stop();
  }
  return c;
}

}  // namespace

bool is_out_of_memory(const c10::Error& e) {
  return std::string(e.what()).find("out of memory") != std::string::npos;
}

MeasuredChain measure_chain(std::vector<RuntimeStage>& stages, const at::Tensor& input,
                            CachingAllocator& pool, bool find_variants,
                            const std::vector<OpMode>& candidate_modes, StageClock clock,
                            int repeats) {
  const double start = now();
  MeasuredChain out;
  out.kernel_times =
      input.is_cuda() && clock == StageClock::kAuto && KernelClock::instance().available();
  KernelTimings* const kernel = out.kernel_times ? &out.kernel_timings : nullptr;
  const int n = static_cast<int>(stages.size());
  std::vector<BufferSnapshot> buffers(n);
  // Put the RNG and every buffer back however the pass ends (it may run out of memory).
  struct Restore {
    RngState rng = RngState::capture();
    const std::vector<BufferSnapshot>* buffers;
    ~Restore() {
      rng.restore();
      // Last stage first: a module that two stages share ends as it was before the first.
      for (auto b = buffers->rbegin(); b != buffers->rend(); ++b) b->restore();
    }
  } restore{RngState::capture(), &buffers};
  // Stage by stage, first to last, holding only the stage's input and output: the pass fits
  // wherever one stage's working set does, as every plan needs. Each stage's backward starts
  // from a gradient of ones shaped like its output (bytes and times do not depend on its values).
  out.chain.stages.resize(n);
  out.aliases_input.assign(n, false);
  out.frees_input.assign(n, false);
  out.frees_output.assign(n, false);
  at::Tensor x = input;
  // Whether a stage's input needs a gradient in a training step: once the input or a stage before
  // has a parameter that trains. Before that (a frozen prefix of a model being fine-tuned) autograd
  // records nothing, and a stage measured from an input that needs one would count what a step
  // never keeps. The model's input needs one where the caller asked for it (input gradients).
  bool grad_flows = input.requires_grad();
  for (int k = 0; k < n; ++k) {
    RuntimeStage& stage = stages[k];
    const bool input_counts = grad_flows;
    grad_flows = grad_flows || stage.trains();
    const RngState rng_before = RngState::capture();
    buffers[k] = BufferSnapshot(stages, k, k);
    Stage& measured = out.chain.stages[k];
    measured.name = stage.name;
    // The default mode first (every stage has it, first): its run gives the output the stages
    // after take, and whether the stage calls variant-aware operators at all.
    FirstRun first;
    std::vector<VariantCosts> costs;
    std::vector<std::int64_t> held(1);
    StageKeeps keeps;
    costs.push_back(measure_stage(stages, k, OpMode::kDefault, x, input_counts, {}, k + 1 < n, pool,
                                  kernel, &first, &held[0], &keeps));
    bool frees_input = !keeps.input, frees_output = !keeps.output;
    std::vector<OpMode> modes = stage.modes;
    out.aliases_input[k] = first.aliases_input;
    if (k == 0) out.first_writes_input = first.writes_input;
    if (first.aliases_input && k > 0) {
      // Measured again once it runs with the stage before it: no other mode, no other timing.
      modes = {OpMode::kDefault};
    } else if (find_variants) {
      modes = {OpMode::kDefault};
      // kRecompute only where an op keeps less in it than in kCompact: elsewhere it is kCompact.
      for (const OpMode mode : candidate_modes) {
        if (first.variant_calls == 0 || mode == OpMode::kDefault) continue;
        if (mode == OpMode::kRecompute && first.recomputing_calls == 0) continue;
        modes.push_back(mode);
      }
    }
    held.resize(modes.size());
    for (std::size_t v = 1; v < modes.size();) {
      buffers[k].restore();
      rng_before.restore();
      try {
        costs.push_back(measure_stage(stages, k, modes[v], x, input_counts, first.grad, k + 1 < n,
                                      pool, kernel, nullptr, &held[v], &keeps));
        frees_input = frees_input || !keeps.input;
        frees_output = frees_output || !keeps.output;
        ++v;
      } catch (const c10::Error& e) {
        // A lean mode the stage cannot run where its default runs: an operator after an
        // output-keeping BatchNorm that writes the output in place (an in-place LeakyReLU joined
        // to the stage) fails the BatchNorm's backward. Not a mode to plan with; modes measured
        // before (find_variants off) must all run, as the predictor has them.
        if (!find_variants || is_out_of_memory(e)) throw;
        log(LogLevel::kInfo, "stage {} cannot run in mode {}, which monet will not use: {}",
            stage.name, op_mode_name(modes[v]), first_line(e.msg()));
        modes.erase(modes.begin() + static_cast<std::ptrdiff_t>(v));
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(v));
      }
    }
    // Runs mode v again, keeping its fastest times and the least it held.
    const auto run_again = [&](std::size_t v) {
      buffers[k].restore();
      rng_before.restore();
      std::int64_t held_again = 0;
      const VariantCosts again = measure_stage(stages, k, modes[v], x, input_counts, first.grad,
                                               k + 1 < n, pool, kernel, nullptr, &held_again);
      costs[v].fwd_time = std::min(costs[v].fwd_time, again.fwd_time);
      costs[v].bwd_time = std::min(costs[v].bwd_time, again.bwd_time);
      held[v] = std::min(held[v], held_again);
    };
    // Further timings, the modes' order reversed on every other round (the first round ran the
    // default first), keeping each mode's fastest: a mode timed once carries its moment's noise
    // into the plan, and the planner, choosing among modes by time, picks the luckiest.
    for (int r = 1; r < repeats && !out.aliases_input[k]; ++r) {
      for (std::size_t i = 0; i < modes.size(); ++i) {
        run_again(r % 2 == 1 ? modes.size() - 1 - i : i);
      }
    }
    // A one-time allocation (a library's workspace made on its first use) is not held twice: a
    // mode that held bytes in its only run runs once more before it is named or dropped.
    if (repeats < 2 && !out.aliases_input[k]) {
      for (std::size_t v = 0; v < modes.size(); ++v) {
        if (held[v] > 0) run_again(v);
      }
    }
    const at::Tensor next = first.output;
    first.output.reset();
    first.grad.reset();
    // The buffers and generator as the plain forward left them, for the stages after.
    first.buffers.restore();
    first.rng->restore();
    for (std::size_t v = 0; v < modes.size(); ++v) {
      warn_if_held(stage.name, costs[v].name, held[v], /*dropped=*/find_variants && v > 0);
    }
    if (find_variants) {
      // Keep a lean mode only when it keeps less than every mode kept before it, and frees what it
      // keeps when its backward has run (a mode that holds it longer would break the plans made
      // on the model; the default mode has no alternative, and is only named).
      std::vector<OpMode> kept = {OpMode::kDefault};
      std::vector<VariantCosts> kept_costs = {costs[0]};
      for (std::size_t v = 1; v < modes.size(); ++v) {
        log(LogLevel::kDebug, "stage {} in mode {}: saves {} bytes ({} in mode default)",
            stage.name, op_mode_name(modes[v]), costs[v].saved_bytes, costs[0].saved_bytes);
        if (held[v] > 0) continue;
        if (costs[v].saved_bytes < kept_costs.back().saved_bytes) {
          kept.push_back(modes[v]);
          kept_costs.push_back(costs[v]);
        }
      }
      stage.modes = kept;
      costs = kept_costs;
    }
    measured.variants = costs;
    out.frees_input[k] = frees_input;
    out.frees_output[k] = frees_output;
    x = next;
  }
  out.seconds = now() - start;
  return out;
}

}  // namespace monet
