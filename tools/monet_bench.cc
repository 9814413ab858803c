// monet-bench: every strategy, budget and workload side by side in one process, on the same
// batches from the same weights, as ratios against the run without a budget.
//
//   monet-bench [--model transformer|resnet|all] [--strategies LIST] [--budgets LIST]
//               [--steps N] [--rounds R] [--quick] [--size cpu|gpu] [--warm] [--json]
//               [--out DIR] [--seed S] [--device D]
//
// Per workload: the unconstrained peak at the largest input (what the budgets are shares of),
// the baseline without a budget (run first and after each budget's cells: each cell's overhead is
// against the two baseline runs around it, interpolated to its time), then each budget and
// strategy. Every run starts with one untimed step on the largest batch (a static plan is made for
// it) and then trains the same N batches. Beside the measured overhead, each cell has its planned
// one: the memory model's time of the plans that ran against keeping every stage, free of the
// machine's noise and of measurement passes. Writes results.json, overhead.svg and planned.svg
// (measured and planned overhead against budget per strategy) and timeline.svg (memory within
// one run against its budget) to --out. With --warm, a first run of each workload, untimed,
// measures the shapes the runs will meet and saves its predictor (MONET_PREDICTOR_STATE), and every
// cell starts from a copy of it: the cells then show a job's steady state, measuring a shape only
// where a plan missed its measured peak, and every per-shape strategy plans on the same chains.
// With --rounds R (5 with --warm), each run's steps are split into R rounds: every round runs the
// baselines and every cell on its share of the batches, in an order turned from round to round,
// and a cell's overhead is the sum of its rounds against the sum of its baselines', with the
// standard error of the rounds' overheads beside it. --quick runs fewer steps, warm.
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/cell.h"
#include "bench/flags.h"
#include "common/atomic_file.h"
#include "crash_report.h"
#include "monet/allocator.h"
#include "monet/bytes.h"
#include "monet/errors.h"
#include "monet/runtime.h"
#include "progress.h"
#include "report/charts.h"
#include "workloads/harness.h"
#include "workloads/workloads.h"

namespace {

using monet::bench::Baselines;
using monet::bench::Cell;
using monet::bench::Chunk;
using monet::bench::Flags;
using monet::bench::kWarmRounds;
using monet::bench::kWarmUpRepeats;
using monet::bench::PoolWork;
using monet::workloads::Workload;

// The memory of the training pool sampled from a thread while a run trains.
class Sampler {
 public:
  explicit Sampler(monet::CachingAllocator& pool) : pool_(pool) {}
  ~Sampler() { stop(); }

  void start() {
    start_ = std::chrono::steady_clock::now();
    thread_ = std::thread([this] {
      while (!done_.load()) {
        const monet::MemoryStats s = pool_.stats();
        const std::chrono::duration<double> t = std::chrono::steady_clock::now() - start_;
        timeline_.seconds.push_back(t.count());
        timeline_.in_use_bytes.push_back(static_cast<double>(s.requested_bytes));
        timeline_.reserved_bytes.push_back(static_cast<double>(s.reserved_bytes));
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
  }
  void stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  monet::report::Timeline& timeline() { return timeline_; }

 private:
  monet::CachingAllocator& pool_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<bool> done_{false};
  std::thread thread_;
  monet::report::Timeline timeline_;
};

class Bench {
 public:
  explicit Bench(Flags flags)
      : flags_(std::move(flags)),
        device_(monet::workloads::device_named(flags_.device)),
        autocast_(flags_.autocast ? monet::workloads::autocast_for(device_)
                                  : monet::kernels::AutocastState()) {}

  int run() {
    prepare_out_folder(flags_.out);
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    std::vector<monet::report::Panel> panels, planned_panels;
    // An earlier run's timeline would stand beside this run's results as if it were theirs: it
    // goes when this run's first results are written, and comes back only from this run.
    bool timeline_removed = false;
    for (const std::string& name : flags_.models) {
      const auto w = monet::workloads::make_workload(name, flags_.size);
      const std::vector<Cell> cells = run_workload(*w);
      for (const Cell& c : cells) all.push_back(to_json(c));
      panels.push_back(panel(*w, cells, false));
      planned_panels.push_back(panel(*w, cells, true));
      results_.insert(results_.end(), cells.begin(), cells.end());
      // Each workload's results and charts as soon as they exist: a run stopped at a time bound
      // (the GPU checks' device calls) or failed in a later workload keeps the ones it finished,
      // and no earlier run's charts stand beside them.
      write(flags_.out + "/results.json", all.dump(2) + "\n");
      write(flags_.out + "/overhead.svg", monet::report::line_chart_svg(panels));
      write(flags_.out + "/planned.svg", monet::report::line_chart_svg(planned_panels));
      if (!timeline_removed) {
        std::error_code ignored;
        std::filesystem::remove(flags_.out + "/timeline.svg", ignored);
        timeline_removed = true;
      }
      if (!flags_.json) {
        print_table(*w, cells);
        std::fflush(stdout);
      }
    }
    // The timeline is one more run, after every cell: if it fails, the results stand without it.
    bool timeline = false;
    try {
      timeline = record_timeline();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "monet-bench: no timeline.svg: its run failed: %s\n", e.what());
    }
    if (flags_.json) {
      std::cout << all.dump(2) << std::endl;
    } else {
      print_verdict();
      std::printf("\nwrote %s/results.json, overhead.svg, planned.svg%s\n", flags_.out.c_str(),
                  timeline ? " and timeline.svg" : "");
    }
    return 0;
  }

 private:
  int steps_for(const Workload& w) const {
    if (flags_.steps > 0) return flags_.steps;
    const bool transformer = w.name() == "transformer";
    if (flags_.quick) return transformer ? 12 : 6;
    return transformer ? 150 : 60;
  }

  int rounds_for(const Workload& w) const {
    const int rounds = flags_.rounds > 0              ? flags_.rounds
                       : flags_.warm && !flags_.quick ? kWarmRounds
                                                      : 1;
    return std::min(rounds, steps_for(w));
  }

  monet::Options options_for(const std::string& strategy, std::int64_t budget,
                             const std::string& predictor_state, int measure_repeats = 1) const {
    monet::Options o;
    o.budget_bytes = budget;
    o.margin = flags_.margin / 100.0;
    o.predictor_state = predictor_state;
    o.measure_repeats = measure_repeats;
    if (strategy == "static") {
      o.strategy = monet::Strategy::kMonet;
      o.plan_once = true;
    } else if (strategy != "none") {
      o.strategy = monet::parse_strategy(strategy, "--strategies");
    }
    return o;
  }

  // The budget at `percent` of the unconstrained peak.
  std::int64_t budget_at(int percent) const {
    return static_cast<std::int64_t>(static_cast<double>(peak_) * percent / 100.0);
  }

  // One run. `predictor_state`: the file its predictor starts from and saves to (none: it starts
  // empty).
  Cell run_cell(const Workload& w, const std::string& strategy, int percent, std::int64_t budget,
                Chunk chunk, const std::string& predictor_state = "",
                const std::string& label_text = "", int measure_repeats = 1) {
    Cell c;
    c.model = w.name();
    c.strategy = strategy;
    c.budget_percent = percent;
    c.budget_bytes = budget;
    c.margin_percent = flags_.margin;
    c.autocast = autocast_.describe();
    const int steps = chunk.steps;
    std::string label = !label_text.empty()  ? label_text
                        : strategy == "none" ? "baseline"
                                             : fmt::format("{}@{}%", strategy, percent);
    if (chunk.rounds > 1) label += fmt::format(" {}/{}", chunk.round + 1, chunk.rounds);
    const monet::tools::Progress progress(fmt::format("{} {}", w.name(), label), steps,
                                          flags_.json);
    double error_sum = 0.0, bias_sum = 0.0;
    const auto start = std::chrono::steady_clock::now();
    c.started = std::chrono::duration<double>(start - bench_start_).count();
    monet::workloads::TrainSpec spec;
    spec.steps = steps;
    spec.first_step = chunk.first;
    spec.seed = flags_.seed;
    spec.device = device_;
    spec.autocast = flags_.autocast;
    spec.start_with_largest = true;
    // The allocator's counters cover the timed steps only: the run's start empties the cache and
    // fills it again, which is no step's work (a run that fails before its steps counts from here).
    monet::MemoryStats pool_before = monet::workloads::pool_for(device_).stats();
    spec.before_steps = [&] { pool_before = monet::workloads::pool_for(device_).stats(); };
    spec.on_step = [&](int i, const monet::workloads::Batch& b, const monet::StepReport& r, double,
                       double seconds) {
      c.steps_by_shape[w.shape_of(b)].add({1, seconds, r.planned_seconds, r.unconstrained_seconds});
      c.iterations = i - chunk.first + 1;
      c.planned_seconds += r.planned_seconds;
      if (!r.plan.empty()) c.plans_by_shape[w.shape_of(b)] = r.plan;
      c.unconstrained_seconds += r.unconstrained_seconds;
      if (r.predicted_peak_bytes > 0 && r.measured_peak_bytes > 0 && strategy != "static") {
        const double signed_error = (static_cast<double>(r.predicted_peak_bytes) -
                                     static_cast<double>(r.measured_peak_bytes)) /
                                    static_cast<double>(r.measured_peak_bytes);
        const double e = std::abs(signed_error);
        error_sum += e;
        bias_sum += signed_error;
        c.predictor_error_max = c.predicted_steps == 0 ? e : std::max(c.predictor_error_max, e);
        ++c.predicted_steps;
      }
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      progress.update(c.iterations, elapsed.count(),
                      fmt::format("shape {:<9} {}", w.shape_of(b), r.plan.empty() ? "" : r.plan));
    };
    // A cell no plan or no allocation fit: `least` is the least budget the runtime named, 0 when
    // none is known.
    const auto infeasible = [&](const std::string& error, std::int64_t least) {
      progress.finish();
      c.feasible = false;
      c.least_budget_bytes = least;
      c.error = error;
      c.peak_bytes = monet::workloads::pool_for(device_).stats().peak_reserved_bytes;
    };
    const auto count_pool = [&] {
      const monet::MemoryStats after = monet::workloads::pool_for(device_).stats();
      c.pool = PoolWork::between(pool_before, after);
    };
    try {
      const monet::workloads::TrainResult r = monet::workloads::train(
          w, options_for(strategy, budget, predictor_state, measure_repeats), spec);
      c.seconds = r.seconds;
      c.peak_bytes = r.peak_reserved;
      c.peak_in_use_bytes = r.peak_in_use;
      c.stats = r.stats;
    } catch (const monet::InfeasibleBudgetError& e) {
      infeasible(e.what(), e.min_feasible_bytes);
    } catch (const monet::BudgetBelowModelError& e) {
      // A share of the peak below the model's weights and gradients: the cell, not the run.
      infeasible(e.what(), 0);
    } catch (const c10::OutOfMemoryError& e) {
      // Outside a step (the model or a batch did not fit): no plan was tried, so no least budget
      // is known.
      infeasible(e.what_without_backtrace(), 0);
    }
    count_pool();
    monet::workloads::pool_for(device_).set_budget_bytes(0);
    c.ended =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - bench_start_).count();
    if (c.predicted_steps > 0) {
      c.predictor_error = error_sum / c.predicted_steps;
      c.predictor_bias = bias_sum / c.predicted_steps;
    }
    return c;
  }

  std::vector<Cell> run_workload(const Workload& w) {
    monet::workloads::PeakProbe probe;
    {
      const monet::kernels::AutocastScope region(autocast_);
      probe = monet::workloads::unconstrained_peak(w, flags_.seed, device_);
    }
    peak_ = probe.reserved_bytes;
    largest_ = w.shape_of(w.largest_batch());
    const int steps = steps_for(w);
    const int rounds = rounds_for(w);
    if (!flags_.json) {
      std::fprintf(
          stderr,
          "\n%s%s: unconstrained peak %s at %s; %d steps per run%s; plans keep %d%% "
          "of each budget free\n",
          w.name().c_str(),
          flags_.autocast ? (" under autocast (" + autocast_.describe() + ")").c_str() : "",
          monet::format_bytes(peak_).c_str(), largest_.c_str(), steps,
          rounds > 1 ? fmt::format(", in {} rounds", rounds).c_str() : "", flags_.margin);
    }
    const std::string warm_state = flags_.out + "/predictor-" + w.name() + ".json";
    if (flags_.warm) {
      // The shapes are the same in every run and measured alike at any budget: one run at the
      // largest budget measures them all. It times each stage's modes kWarmUpRepeats times,
      // keeping the fastest: every cell plans on these times, and a mode timed once in a burst of
      // load would send the plans that choose among modes to a time they do not get.
      std::filesystem::remove(warm_state);
      const int percent = *std::max_element(flags_.budgets.begin(), flags_.budgets.end());
      const Cell warm_up = run_cell(w, "monet", percent, budget_at(percent), Chunk{0, steps, 0, 1},
                                    warm_state, "warm-up", kWarmUpRepeats);
      // Every cell would start from what the warm-up measured: one that could not run at the
      // largest budget, or measured nothing, leaves them nothing to plan on.
      if (!warm_up.feasible || warm_up.stats.profiled_steps == 0 ||
          !std::filesystem::exists(warm_state)) {
        std::string why = "it measured no shape";
        if (!warm_up.feasible && warm_up.least_budget_bytes > 0) {
          why = fmt::format(
              "no plan fits it: the least budget is {} ({:.0f}% of the peak)",
              monet::format_bytes(static_cast<std::size_t>(warm_up.least_budget_bytes)),
              100.0 * static_cast<double>(warm_up.least_budget_bytes) / static_cast<double>(peak_));
        } else if (!warm_up.feasible) {
          why = "the model and a batch do not fit in it before the first step";
        }
        throw monet::ConfigError(fmt::format(
            "monet-bench --warm: the warm-up runs {} at the largest of --budgets, {}% ({}), and "
            "{}; give --budgets a larger share, or run without --warm to see each budget's cell",
            w.name(), percent, monet::format_bytes(budget_at(percent)), why));
      }
      if (!flags_.json) {
        std::fprintf(stderr, "%s: warm-up measured %lld shapes in %.1f s (saved to %s)\n",
                     w.name().c_str(), static_cast<long long>(warm_up.stats.profiled_steps),
                     warm_up.stats.profile_seconds, warm_state.c_str());
      }
    }
    // The cells, in table order (budget, then strategy), each the sum of its rounds.
    const std::size_t strategies = flags_.strategies.size();
    std::vector<Cell> cells;
    std::vector<std::string> states;  // each cell's predictor, carried from round to round
    for (const int percent : flags_.budgets) {
      for (const std::string& s : flags_.strategies) {
        Cell c;
        c.model = w.name();
        c.strategy = s;
        c.warm = flags_.warm;
        c.autocast = autocast_.describe();
        c.budget_percent = percent;
        c.budget_bytes = budget_at(percent);
        c.margin_percent = flags_.margin;
        c.rounds = rounds;
        c.started = std::numeric_limits<double>::infinity();
        cells.push_back(c);
        // One file per cell: what a cell measures again is not another's, and a cell's later
        // rounds start from what its earlier ones saved (a restarted job measures nothing it
        // covers). A single round without --warm starts empty, as a new job does.
        states.push_back(flags_.warm || rounds > 1 ? fmt::format("{}/predictor-cell-{}-{}-{}.json",
                                                                 flags_.out, w.name(), s, percent)
                                                   : "");
        if (!states.back().empty()) {
          // The margins an earlier bench's retries raised, kept beside a cell's state
          // (Options::predictor_state), are not this one's to start from.
          std::filesystem::remove(states.back() + ".margins");
          if (flags_.warm) {
            std::filesystem::copy_file(warm_state, states.back(),
                                       std::filesystem::copy_options::overwrite_existing);
          } else {
            std::filesystem::remove(states.back());
          }
        }
      }
    }
    // The machine's speed drifts over minutes (shared cores). In every round the baseline runs
    // before each budget's cells and once after the last, and each cell is compared with the two
    // baseline runs around it, interpolated to the middle of its own run. With several rounds,
    // each run trains its share of the batches, and the order of the budgets and of the
    // strategies turns by one from round to round, so that a slow or fast stretch of the machine
    // does not fall on the same cells every time.
    Baselines summary;
    std::map<std::string, Cell::ShapeSteps> baseline_shapes;  // over every baseline run
    std::size_t baseline_peak = 0;                            // the largest of every baseline run
    std::int64_t baseline_peak_in_use = 0;
    for (int r = 0; r < rounds; ++r) {
      const Chunk chunk{r * steps / rounds, (r + 1) * steps / rounds - r * steps / rounds, r,
                        rounds};
      std::vector<Cell> baselines{run_cell(w, "none", 0, 0, chunk)};
      std::vector<std::pair<std::size_t, Cell>> parts;
      for (std::size_t i = 0; i < flags_.budgets.size(); ++i) {
        const std::size_t b = (i + static_cast<std::size_t>(r)) % flags_.budgets.size();
        for (std::size_t j = 0; j < strategies; ++j) {
          const std::size_t index = b * strategies + (j + static_cast<std::size_t>(r)) % strategies;
          const Cell& total = cells[index];
          if (!total.feasible) continue;  // no plan fitted in an earlier round
          parts.emplace_back(index, run_cell(w, total.strategy, total.budget_percent,
                                             total.budget_bytes, chunk, states[index]));
        }
        baselines.push_back(run_cell(w, "none", 0, 0, chunk));
      }
      for (auto& [index, part] : parts) {
        part.baseline_seconds = interpolated_baseline(part, baselines);
        add_round(cells[index], part);
      }
      summary.add(baselines);
      for (const Cell& run : baselines) {
        for (const auto& [shape, steps] : run.steps_by_shape) baseline_shapes[shape].add(steps);
        baseline_peak = std::max(baseline_peak, run.peak_bytes);
        baseline_peak_in_use = std::max(baseline_peak_in_use, run.peak_in_use_bytes);
      }
    }
    for (const std::string& state : states) {
      if (!state.empty()) std::filesystem::remove(state);
    }
    for (Cell& c : cells) {
      if (!c.feasible) continue;
      c.overhead = c.seconds / c.baseline_seconds - 1.0;
      c.overhead_se = standard_error(c.round_overheads);
    }
    for (std::size_t b = 0; b < flags_.budgets.size(); ++b) {
      compare_with_best_other(cells.begin() + static_cast<std::ptrdiff_t>(b * strategies),
                              cells.begin() + static_cast<std::ptrdiff_t>((b + 1) * strategies));
    }
    baseline_ = summary;
    Cell baseline;
    baseline.model = w.name();
    baseline.strategy = "none";
    baseline.warm = flags_.warm;
    baseline.autocast = autocast_.describe();
    baseline.iterations = steps;
    baseline.rounds = rounds;
    baseline.seconds = summary.seconds();
    baseline.baseline_seconds = baseline.seconds;
    baseline.overhead = 0.0;
    baseline.baseline_runs = summary.rounds;
    baseline.steps_by_shape = std::move(baseline_shapes);
    baseline.peak_bytes = baseline_peak;
    baseline.peak_in_use_bytes = baseline_peak_in_use;
    cells.insert(cells.begin(), baseline);
    return cells;
  }

  // The baseline's time at the middle of `c`'s run, from the two baseline runs of its round
  // around it.
  static double interpolated_baseline(const Cell& c, const std::vector<Cell>& baselines) {
    auto middle = [](const Cell& x) { return (x.started + x.ended) / 2; };
    std::size_t after = 1;
    while (after + 1 < baselines.size() && middle(baselines[after]) < middle(c)) ++after;
    const Cell& a = baselines[after - 1];
    const Cell& b = baselines[after];
    const double span = middle(b) - middle(a);
    const double t = span > 0 ? std::clamp((middle(c) - middle(a)) / span, 0.0, 1.0) : 0.5;
    return a.seconds + t * (b.seconds - a.seconds);
  }

  // Adds one round's run of a cell to the cell's totals.
  static void add_round(Cell& total, const Cell& part) {
    if (!part.feasible) {
      total.feasible = false;
      total.least_budget_bytes = part.least_budget_bytes;
      total.error = part.error;
      total.peak_bytes = std::max(total.peak_bytes, part.peak_bytes);
      return;
    }
    total.started = std::min(total.started, part.started);
    total.ended = std::max(total.ended, part.ended);
    total.iterations += part.iterations;
    total.seconds += part.seconds;
    total.baseline_seconds += part.baseline_seconds;
    total.round_overheads.push_back(part.seconds / part.baseline_seconds - 1.0);
    total.planned_seconds += part.planned_seconds;
    for (const auto& [shape, plan] : part.plans_by_shape) total.plans_by_shape[shape] = plan;
    for (const auto& [shape, steps] : part.steps_by_shape) total.steps_by_shape[shape].add(steps);
    total.unconstrained_seconds += part.unconstrained_seconds;
    total.peak_bytes = std::max(total.peak_bytes, part.peak_bytes);
    total.peak_in_use_bytes = std::max(total.peak_in_use_bytes, part.peak_in_use_bytes);
    total.pool += part.pool;
    monet::RuntimeStats& s = total.stats;
    const monet::RuntimeStats& p = part.stats;
    s.steps += p.steps;
    s.profiled_steps += p.profiled_steps;
    s.plans_made += p.plans_made;
    s.cache_hits += p.cache_hits;
    s.retries += p.retries;
    s.dropped_plans += p.dropped_plans;
    s.max_measured_peak_bytes = std::max(s.max_measured_peak_bytes, p.max_measured_peak_bytes);
    s.plan_seconds += p.plan_seconds;
    s.profile_seconds += p.profile_seconds;
    if (part.predicted_steps > 0) {
      const int n = total.predicted_steps + part.predicted_steps;
      // Means over every predicted step of the rounds.
      const auto pooled = [&](double a, double b) {
        return total.predicted_steps > 0
                   ? (a * total.predicted_steps + b * part.predicted_steps) / n
                   : b;
      };
      total.predictor_error = pooled(total.predictor_error, part.predictor_error);
      total.predictor_bias = pooled(total.predictor_bias, part.predictor_bias);
      total.predictor_error_max =
          total.predicted_steps > 0 ? std::max(total.predictor_error_max, part.predictor_error_max)
                                    : part.predictor_error_max;
      total.predicted_steps = n;
    }
  }

  // Sets, on monet's cell among one budget's [first, last), its difference from the other
  // feasible strategy of the lowest measured overhead, paired round by round.
  static void compare_with_best_other(std::vector<Cell>::iterator first,
                                      std::vector<Cell>::iterator last) {
    const auto monet =
        std::find_if(first, last, [](const Cell& c) { return c.strategy == "monet"; });
    if (monet == last || !monet->feasible) return;
    const auto dp = std::find_if(first, last, [](const Cell& c) { return c.strategy == "dp"; });
    if (dp != last && dp->feasible) split_by_plan(*monet, *dp);
    const Cell* rival = nullptr;
    for (auto c = first; c != last; ++c) {
      if (c != monet && c->feasible && (rival == nullptr || c->overhead < rival->overhead)) {
        rival = &*c;
      }
    }
    if (rival == nullptr || rival->round_overheads.size() != monet->round_overheads.size() ||
        monet->round_overheads.size() < 2) {
      return;
    }
    std::vector<double> differences;
    for (std::size_t r = 0; r < monet->round_overheads.size(); ++r) {
      differences.push_back(monet->round_overheads[r] - rival->round_overheads[r]);
    }
    double mean = 0.0;
    for (const double d : differences) mean += d / static_cast<double>(differences.size());
    monet->rival = rival->strategy;
    monet->rival_difference = mean;
    monet->rival_difference_se = standard_error(differences);
  }

  // monet's time minus dp's, split between the shapes both planned alike and the others. Each
  // cell's seconds are taken against its own baseline (the baseline runs around it), as its
  // overhead is, so that the machine's drift between the two cells falls out and the two parts
  // add up to the difference of their overheads.
  static void split_by_plan(Cell& monet, const Cell& dp) {
    if (!(monet.baseline_seconds > 0) || !(dp.baseline_seconds > 0)) return;
    double alike = 0.0, apart = 0.0;
    int alike_shapes = 0, apart_shapes = 0;
    for (const auto& [shape, steps] : monet.steps_by_shape) {
      const auto other = dp.steps_by_shape.find(shape);
      if (other == dp.steps_by_shape.end() || other->second.steps != steps.steps) return;
      const auto plan = monet.plans_by_shape.find(shape);
      const auto dp_plan = dp.plans_by_shape.find(shape);
      const bool same = plan != monet.plans_by_shape.end() && dp_plan != dp.plans_by_shape.end() &&
                        plan->second == dp_plan->second;
      (same ? alike : apart) +=
          steps.seconds / monet.baseline_seconds - other->second.seconds / dp.baseline_seconds;
      ++(same ? alike_shapes : apart_shapes);
    }
    monet.alike_shapes = alike_shapes;
    monet.apart_shapes = apart_shapes;
    monet.alike_points = alike;
    monet.apart_points = apart_shapes > 0 ? apart : std::nan("");
  }

  // The standard error of the mean of `values` (NaN for fewer than two).
  static double standard_error(const std::vector<double>& values) {
    const auto n = static_cast<double>(values.size());
    if (values.size() < 2) return std::nan("");
    double mean = 0.0;
    for (const double v : values) mean += v / n;
    double squares = 0.0;
    for (const double v : values) squares += (v - mean) * (v - mean);
    return std::sqrt(squares / (n - 1) / n);
  }

  // Overhead against budget per strategy: measured (wall clock against the baseline runs, with the
  // rounds' standard error as a bar), or planned (the memory model's times of the plans that ran).
  monet::report::Panel panel(const Workload& w, const std::vector<Cell>& cells,
                             bool planned) const {
    monet::report::Panel p;
    p.title = fmt::format("{} ({} steps, peak {} at {})", w.name(), steps_for(w),
                          monet::format_bytes(peak_), largest_);
    p.x_label = "budget, % of the unconstrained peak";
    p.y_label = planned ? "planned overhead, % of the stages' time" : "time overhead, %";
    p.x_reversed = true;
    for (const std::string& s : flags_.strategies) {
      monet::report::Series series;
      series.name = s;
      for (const Cell& c : cells) {
        if (c.strategy != s) continue;
        series.points.push_back(
            {static_cast<double>(c.budget_percent),
             c.feasible ? 100.0 * (planned ? c.planned_overhead() : c.overhead) : std::nan(""),
             planned ? 0.0 : 100.0 * c.overhead_se});
      }
      p.series.push_back(std::move(series));
    }
    return p;
  }

  static std::string percent(double v, const char* format = "{:+.1f}%") {
    return std::isfinite(v) ? fmt::format(fmt::runtime(format), 100.0 * v) : "-";
  }

  void print_table(const Workload& w, const std::vector<Cell>& cells) const {
    const int rounds = rounds_for(w);
    std::printf(
        "\n%s: %d steps per run%s, unconstrained peak %s at %s, baseline %.2f s (%d runs, %.1f%% "
        "apart at most%s)%s\n",
        w.name().c_str(), steps_for(w),
        rounds > 1 ? fmt::format(" in {} rounds", rounds).c_str() : "",
        monet::format_bytes(peak_).c_str(), largest_.c_str(), baseline_.seconds(), baseline_.runs(),
        100.0 * baseline_.spread(), rounds > 1 ? " within a round" : "",
        flags_.warm ? "; every cell from the warm-up's predictor" : "");
    std::printf("  %-7s %-9s %-7s %9s %6s %8s %11s %7s %6s %8s %6s %8s %9s\n", "budget", "",
                "strategy", "overhead", "+-", "planned", "peak/budget", "retries", "plans",
                "plan us", "cache", "measured", "pred. err");
    int shown_percent = -1;
    for (const Cell& c : cells) {
      if (c.strategy == "none") continue;
      const std::string budget =
          c.budget_percent == shown_percent ? "" : fmt::format("{}%", c.budget_percent);
      const std::string bytes = c.budget_percent == shown_percent
                                    ? ""
                                    : monet::format_bytes(static_cast<std::size_t>(c.budget_bytes));
      shown_percent = c.budget_percent;
      if (!c.feasible && c.least_budget_bytes == 0) {
        std::printf(
            "  %-7s %-9s %-7s  infeasible: the model and a batch do not fit before the "
            "first step\n",
            budget.c_str(), bytes.c_str(), c.strategy.c_str());
        continue;
      }
      if (!c.feasible) {
        std::printf("  %-7s %-9s %-7s  infeasible: the least budget is %s (%.0f%% of the peak)\n",
                    budget.c_str(), bytes.c_str(), c.strategy.c_str(),
                    monet::format_bytes(static_cast<std::size_t>(c.least_budget_bytes)).c_str(),
                    100.0 * static_cast<double>(c.least_budget_bytes) / static_cast<double>(peak_));
        continue;
      }
      std::printf("  %-7s %-9s %-7s %9s %6s %8s %11.2f %7lld %6lld %8s %6s %8lld %9s\n",
                  budget.c_str(), bytes.c_str(), c.strategy.c_str(), percent(c.overhead).c_str(),
                  percent(c.overhead_se, "{:.1f}").c_str(), percent(c.planned_overhead()).c_str(),
                  static_cast<double>(c.peak_bytes) / static_cast<double>(c.budget_bytes),
                  static_cast<long long>(c.stats.retries),
                  static_cast<long long>(c.stats.plans_made),
                  std::isfinite(c.plan_us()) ? fmt::format("{:.0f}", c.plan_us()).c_str() : "-",
                  percent(c.cache_hit_rate(), "{:.0f}%").c_str(),
                  static_cast<long long>(c.stats.profiled_steps),
                  percent(c.predictor_error, "{:.1f}%").c_str());
    }
  }

  // The targets, read off the cells: whether any run held more than its budget; per model and
  // budget, the strategy with the lowest overhead, with monet's and the static plan's beside it.
  void print_verdict() const {
    std::printf("\n");
    int exceeded = 0;
    for (const Cell& c : results_) {
      if (c.budget_bytes > 0 && c.feasible &&
          c.peak_bytes > static_cast<std::size_t>(c.budget_bytes)) {
        std::printf("  budget exceeded: %s %s at %d%%: %s over %s\n", c.model.c_str(),
                    c.strategy.c_str(), c.budget_percent, monet::format_bytes(c.peak_bytes).c_str(),
                    monet::format_bytes(static_cast<std::size_t>(c.budget_bytes)).c_str());
        ++exceeded;
      }
    }
    if (exceeded == 0) std::printf("  no run held more than its budget\n");
    std::map<std::pair<std::string, int>, std::vector<const Cell*>> by_budget;
    for (const Cell& c : results_) {
      if (c.strategy != "none") by_budget[{c.model, c.budget_percent}].push_back(&c);
    }
    for (const auto& [key, group] : by_budget) {
      const Cell* best = nullptr;
      const Cell* best_planned = nullptr;
      const Cell* monet = nullptr;
      const Cell* fixed = nullptr;
      for (const Cell* c : group) {
        if (c->strategy == "monet") monet = c;
        if (c->strategy == "static") fixed = c;
        if (c->feasible && (best == nullptr || c->overhead < best->overhead)) best = c;
        if (c->feasible && std::isfinite(c->planned_overhead()) &&
            (best_planned == nullptr || c->planned_overhead() < best_planned->planned_overhead())) {
          best_planned = c;
        }
      }
      std::string line = fmt::format("  {} at {}%: ", key.first, key.second);
      if (best == nullptr) {
        line += "no strategy fits";
      } else {
        line += fmt::format("lowest overhead {} ({})", best->strategy, percent(best->overhead));
        if (monet != nullptr && monet != best) {
          line += monet->feasible ? fmt::format("; monet {}", percent(monet->overhead))
                                  : "; monet infeasible";
        }
        if (monet != nullptr && fixed != nullptr && fixed != best && monet->feasible) {
          line += fixed->feasible ? fmt::format("; static {}", percent(fixed->overhead))
                                  : "; static infeasible";
        }
        if (monet != nullptr && !monet->rival.empty()) {
          line += fmt::format("; monet - {} by round: {:+.1f} +- {:.1f} points", monet->rival,
                              100.0 * monet->rival_difference, 100.0 * monet->rival_difference_se);
        }
        if (monet != nullptr && std::isfinite(monet->alike_points)) {
          line += "; monet - dp:";
          if (monet->alike_shapes > 0) {
            line += fmt::format(" {:+.1f} points on the {} shapes planned alike",
                                100.0 * monet->alike_points, monet->alike_shapes);
          }
          if (monet->apart_shapes > 0) {
            line += fmt::format("{} {:+.1f} points on the {} planned apart",
                                monet->alike_shapes > 0 ? "," : "", 100.0 * monet->apart_points,
                                monet->apart_shapes);
          }
        }
        if (best_planned != nullptr) {
          line += fmt::format("; planned: lowest {} ({})", best_planned->strategy,
                              percent(best_planned->planned_overhead()));
          if (monet != nullptr && monet != best_planned && monet->feasible) {
            line += fmt::format(", monet {}", percent(monet->planned_overhead()));
          }
        }
      }
      std::printf("%s\n", line.c_str());
    }
  }

  // One run of monet at the least budget it fitted in, sampled: the first workload's, 8 steps.
  // Runs a few steps of monet's cell at its lowest budget (else another feasible cell), sampling
  // the pool, and writes timeline.svg; false where no cell was feasible.
  bool record_timeline() {
    const Cell* chosen = nullptr;
    for (const Cell& c : results_) {
      if (c.strategy == "monet" && c.feasible && c.model == results_.front().model &&
          (chosen == nullptr || c.budget_percent < chosen->budget_percent)) {
        chosen = &c;
      }
    }
    if (chosen == nullptr) {
      for (const Cell& c : results_) {
        if (c.strategy != "none" && c.feasible && c.model == results_.front().model) chosen = &c;
      }
    }
    if (chosen == nullptr) return false;
    const auto w = monet::workloads::make_workload(chosen->model, flags_.size);
    monet::CachingAllocator& pool = monet::workloads::pool_for(device_);
    Sampler sampler(pool);
    monet::workloads::TrainSpec spec;
    spec.steps = std::min(8, steps_for(*w));  // from batch 0
    spec.seed = flags_.seed;
    spec.device = device_;
    spec.autocast = flags_.autocast;
    spec.start_with_largest = true;
    spec.before_steps = [&] { sampler.start(); };
    monet::workloads::train(*w, options_for(chosen->strategy, chosen->budget_bytes, ""), spec);
    sampler.stop();
    pool.set_budget_bytes(0);
    monet::report::Timeline& t = sampler.timeline();
    t.title = fmt::format("{} under {} at {}% of the unconstrained peak: {} steps of varying shape",
                          chosen->model, chosen->strategy, chosen->budget_percent, spec.steps);
    t.budget_bytes = static_cast<double>(chosen->budget_bytes);
    write(flags_.out + "/timeline.svg", monet::report::timeline_svg(t));
    return true;
  }

  // The report's folder, made and tried before anything runs: one that cannot be written is named
  // at the start, not after the runs.
  static void prepare_out_folder(const std::string& out) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    if (ec) {
      throw monet::ConfigError(fmt::format(
          "cannot make the folder {} ({}); give --out a writable folder", out, ec.message()));
    }
    monet::check_writable(out + "/results.json", "--out", "the results");
  }

  // Whole or not at all: a run stopped while it writes leaves the last report as it was.
  static void write(const std::string& path, const std::string& text) {
    monet::write_file_atomically(path, text, "monet-bench (--out)", "the report");
  }

  Flags flags_;
  torch::Device device_;
  monet::kernels::AutocastState autocast_;  // what --autocast turns on, for device_
  std::size_t peak_ = 0;
  std::string largest_;
  Baselines baseline_;
  std::chrono::steady_clock::time_point bench_start_ = std::chrono::steady_clock::now();
  std::vector<Cell> results_;
};

}  // namespace

int main(int argc, char** argv) {
  monet::tools::report_crashes("monet-bench");
  const Flags flags = monet::bench::parse(argc, argv);
  try {
    // Budgets come from the flags: a MONET_BUDGET in the environment would cap the baseline.
    unsetenv("MONET_BUDGET");
    monet::install();
    torch::set_num_threads(2);
    return Bench(flags).run();
  } catch (const monet::ConfigError& e) {
    std::cerr << "monet-bench: " << e.what() << "\n";
    return 2;
  }
}
