// monet-train: trains a built-in model on a built-in dynamic-shape data set inside a memory
// budget, and compares with the same run without one.
//
//   monet-train [--model transformer|resnet] [--budget B] [--steps N] [--strategy S] [--json]
//               [--device D] [--autocast]
//
// By default a transformer encoder on token batches whose lengths are long-tailed like question
// answering data; the budget defaults to half of the model's unconstrained peak at its largest
// input. It first runs the steps with no budget (the baseline, and the peak the budget is a share
// of), then the same steps, from the same weights, under monet::Runtime. A progress line shows
// each step; a summary table (or, with --json, one JSON object) ends the run.
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "crash_report.h"
#include "flag_numbers.h"
#include "monet/allocator.h"
#include "monet/bytes.h"
#include "monet/errors.h"
#include "monet/runtime.h"
#include "progress.h"
#include "workloads/harness.h"
#include "workloads/workloads.h"

namespace {

struct Flags {
  std::string model = "transformer";
  std::string budget;  // empty: MONET_BUDGET, else half of the unconstrained peak
  int steps = 0;       // 0: the model's default
  std::string strategy;
  bool json = false;
  bool baseline = true;
  std::string trace;
  std::uint64_t seed = 1;
  std::string device;  // empty: the first GPU LibTorch sees, else the CPU
  bool autocast = false;
};

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::cerr << "monet-train: " << problem << "\n";
  // Asked for (no problem), the help goes to stdout, to be paged or searched.
  (problem.empty() ? std::cout : std::cerr)
      << "usage: monet-train [--model transformer|resnet] [--budget B] [--steps N]\n"
         "                   [--strategy S] [--json] [--no-baseline] [--trace FILE] [--seed S]\n"
         "                   [--device D] [--autocast]\n"
         "  --model M      transformer (default): an encoder on long-tailed token lengths;\n"
         "                 resnet: a ResNet-style CNN on images of varying size\n"
         "  --budget B     memory budget: 64MiB, 1GiB, 60% of the device's memory... (default\n"
         "                 MONET_BUDGET, else half of the model's unconstrained peak at its\n"
         "                 largest input);\n"
         "                 a budget too small for the largest input is refused before training,\n"
         "                 with the least that fits\n"
         "  --steps N      training steps (default 150 for the transformer, 60 for resnet)\n"
         "  --strategy S   none, all, sqrt, greedy, dp or monet (default MONET_PLANNER, else "
         "monet)\n"
         "  --json         print one JSON object instead of the progress and the table\n"
         "  --no-baseline  skip the run without a budget (the overhead is then not known;\n"
         "                 a budget must be given)\n"
         "  --trace FILE   write every allocation and free of the process to FILE\n"
         "                 (MONET_TRACE): the baseline's and the probes' too; with\n"
         "                 --no-baseline, the run under the budget and its one-step probe\n"
         "  --seed S       seed of the data and the weights (default 1)\n"
         "  --device D     cpu, cuda or cuda:N (default cuda:0 where LibTorch sees a GPU, else\n"
         "                 cpu)\n"
         "  --autocast     mixed precision: each step's forward and backward under autocast\n"
         "                 (bfloat16 on the CPU, float16 on CUDA), the baseline's too\n";
  std::exit(problem.empty() ? 0 : 2);
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "--model") {
        f.model = value();
      } else if (arg == "--budget") {
        f.budget = value();
      } else if (arg == "--steps") {
        f.steps = monet::tools::int_flag(arg, value(), 1, std::numeric_limits<int>::max(),
                                         "--steps must be positive");
      } else if (arg == "--strategy") {
        f.strategy = value();
      } else if (arg == "--json") {
        f.json = true;
      } else if (arg == "--no-baseline") {
        f.baseline = false;
      } else if (arg == "--trace") {
        f.trace = value();
      } else if (arg == "--seed") {
        f.seed = monet::tools::seed_flag(arg, value());
      } else if (arg == "--device") {
        f.device = value();
      } else if (arg == "--autocast") {
        f.autocast = true;
      } else if (arg == "--help" || arg == "-h") {
        usage("");
      } else {
        usage("unknown argument " + arg);
      }
    } catch (const monet::tools::FlagError& e) {
      usage(e.what());
    }
  }
  return f;
}

monet::workloads::TrainResult train(const monet::workloads::Workload& w, const Flags& flags,
                                    const torch::Device& device, int steps,
                                    const monet::Options& options, const std::string& label) {
  const monet::tools::Progress progress(label, steps, flags.json);
  monet::CachingAllocator& pool = monet::workloads::pool_for(device);
  const auto start = std::chrono::steady_clock::now();
  monet::workloads::TrainSpec spec;
  spec.steps = steps;
  spec.seed = flags.seed;
  spec.device = device;
  spec.autocast = flags.autocast;
  spec.on_step = [&](int i, const monet::workloads::Batch& b, const monet::StepReport& r,
                     double loss, double) {
    const std::string how = options.budget_bytes == 0 ? "no budget"
                            : r.profiled              ? "measured+planned"
                            : r.plan_from_cache       ? "plan cached"
                                                      : "planned";
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    progress.update(
        i + 1, elapsed.count(),
        fmt::format("shape {:<9} {:<16} loss {:.3f}  peak {} / {}", w.shape_of(b), how, loss,
                    monet::format_bytes(pool.stats().peak_reserved_bytes),
                    options.budget_bytes ? monet::format_bytes(options.budget_bytes) : "-"));
  };
  return monet::workloads::train(w, options, spec);
}

int run(const Flags& flags) {
  if (!flags.trace.empty()) setenv("MONET_TRACE", flags.trace.c_str(), 1);
  // The budget is read here, not by the allocator at start: the baseline runs without one.
  std::string budget_text = flags.budget;
  if (budget_text.empty()) {
    if (const char* env = std::getenv("MONET_BUDGET"); env != nullptr && *env != '\0') {
      budget_text = env;
    }
  }
  const std::string variable = flags.budget.empty() ? "MONET_BUDGET" : "--budget";
  unsetenv("MONET_BUDGET");
  monet::install();
  const torch::Device device = monet::workloads::device_named(flags.device);
  // Before the budget is checked, so that an unknown model is the error named.
  const auto w = monet::workloads::make_workload(flags.model);
  // A share ("60%") is of the training device's memory: the GPU's on CUDA, the host's on the CPU.
  std::size_t budget =
      budget_text.empty()
          ? 0
          : monet::parse_budget(budget_text,
                                monet::workloads::pool_for(device).device_total_bytes(), variable);
  if (!flags.strategy.empty()) unsetenv("MONET_PLANNER");  // the flag wins, as --budget does
  monet::Options options = monet::Options::from_env();
  if (!flags.strategy.empty())
    options.strategy = monet::parse_strategy(flags.strategy, "--strategy");
  if (!flags.baseline && budget == 0) {
    throw monet::ConfigError("--no-baseline needs a budget (--budget or MONET_BUDGET)");
  }

  torch::set_num_threads(2);
  const int steps = flags.steps > 0 ? flags.steps : (flags.model == "resnet" ? 60 : 150);
  const std::string largest = w->shape_of(w->largest_batch());
  // The peaks and least budgets below are those of steps under the same autocast as the runs.
  const monet::kernels::AutocastState autocast =
      flags.autocast ? monet::workloads::autocast_for(device) : monet::kernels::AutocastState();

  if (budget > 0) {
    // Fail fast: a budget in which monet cannot plan the largest batch is named now, in a few
    // seconds, not after the baseline run.
    monet::Options probe = options;
    probe.budget_bytes = static_cast<std::int64_t>(budget);
    std::string why;
    std::int64_t least = 0;
    {
      const monet::kernels::AutocastScope region(autocast);
      least = monet::workloads::least_budget_above(*w, flags.seed, probe, device, &why);
    }
    if (least > 0) {
      throw monet::InfeasibleBudgetError(why, probe.budget_bytes, least);
    }
  }
  std::size_t peak = 0;
  monet::workloads::TrainResult baseline;
  if (flags.baseline) {
    {
      const monet::kernels::AutocastScope region(autocast);
      peak = monet::workloads::unconstrained_peak(*w, flags.seed, device).reserved_bytes;
    }
    monet::Options none = options;
    none.budget_bytes = 0;
    baseline = train(*w, flags, device, steps, none, "baseline");
  }
  std::string budget_note;
  if (budget == 0) {
    // The default: half the unconstrained peak, or, where monet cannot plan the largest batch in
    // that (a CNN whose stages are whole residual blocks), the least budget it can.
    budget = peak / 2;
    monet::Options probe = options;
    probe.budget_bytes = static_cast<std::int64_t>(budget);
    std::size_t least = 0;
    {
      const monet::kernels::AutocastScope region(autocast);
      least = static_cast<std::size_t>(
          monet::workloads::least_budget_above(*w, flags.seed, probe, device));
    }
    if (least > 0) {
      // 15% above it: the least plan runs at the edge, where the memory model's errors tell.
      budget = least + least * 15 / 100;
      budget_note = fmt::format(
          "; half the peak is below the least budget monet can plan {} in, {}, so 15% above that",
          largest, monet::format_bytes(least));
    }
  }
  if (!flags.json) {
    std::fprintf(stderr, "%s%s, %d steps, budget %s%s%s\n", w->name().c_str(),
                 flags.autocast ? (" under autocast (" + autocast.describe() + ")").c_str() : "",
                 steps, monet::format_bytes(budget).c_str(),
                 peak ? fmt::format(" ({:.0f}% of the unconstrained peak {} at {})",
                                    100.0 * static_cast<double>(budget) / static_cast<double>(peak),
                                    monet::format_bytes(peak), largest)
                            .c_str()
                      : "",
                 budget_note.c_str());
  }
  options.budget_bytes = static_cast<std::int64_t>(budget);
  const monet::workloads::TrainResult monet_run = train(*w, flags, device, steps, options, "monet");
  const double overhead =
      flags.baseline ? monet_run.seconds / baseline.seconds - 1.0 : std::nan("");

  const monet::RuntimeStats& s = monet_run.stats;
  if (flags.json) {
    nlohmann::json j = {
        {"model", w->name()},
        {"strategy", std::string(monet::strategy_name(options.strategy))},
        {"autocast", autocast.describe()},
        {"budget_bytes", budget},
        {"peak_bytes", monet_run.peak_reserved},
        {"peak_in_use_bytes", s.max_measured_peak_bytes},
        {"unconstrained_peak_bytes", flags.baseline ? nlohmann::json(peak) : nullptr},
        {"iterations", steps},
        {"retries", s.retries},
        {"plans", s.plans_made},
        {"cache_hits", s.cache_hits},
        {"measured_shapes", s.profiled_steps},
        {"plan_seconds", s.plan_seconds},
        {"measure_seconds", s.profile_seconds},
        {"seconds", monet_run.seconds},
        {"baseline_seconds", flags.baseline ? nlohmann::json(baseline.seconds) : nullptr},
        {"baseline_peak_bytes", flags.baseline ? nlohmann::json(baseline.peak_reserved) : nullptr},
        {"overhead", flags.baseline ? nlohmann::json(overhead) : nullptr}};
    std::cout << j.dump(2) << std::endl;
    return 0;
  }
  auto row = [](const char* name, const std::string& value) {
    std::printf("  %-22s %s\n", name, value.c_str());
  };
  std::printf("\n%s under monet (%s)\n", w->name().c_str(),
              std::string(monet::strategy_name(options.strategy)).c_str());
  row("iterations", std::to_string(steps));
  if (flags.autocast) row("autocast", autocast.describe());
  row("time", fmt::format("{:.2f} s", monet_run.seconds));
  if (flags.baseline) {
    row("time without budget", fmt::format("{:.2f} s", baseline.seconds));
    row("overhead", fmt::format("{:+.1f}%", 100.0 * overhead));
    row("unconstrained peak", monet::format_bytes(peak) + " at " + largest);
    // Over many shapes the pool also holds blocks cached for other shapes: above one step's peak.
    row("peak without budget", monet::format_bytes(baseline.peak_reserved) +
                                   " over the run, blocks cached for other shapes included");
  }
  row("peak", monet::format_bytes(monet_run.peak_reserved));
  row("budget", monet::format_bytes(budget));
  row("measured shapes", std::to_string(s.profiled_steps));
  row("plans made", std::to_string(s.plans_made));
  row("cache hits", std::to_string(s.cache_hits));
  row("retries", std::to_string(s.retries));
  row("planning time", fmt::format("{:.2f} ms", 1e3 * s.plan_seconds));
  row("measuring time", fmt::format("{:.2f} s", s.profile_seconds));
  std::printf("\n%s", monet::format_stats(monet::memory_stats()).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  monet::tools::report_crashes("monet-train");
  const Flags flags = parse(argc, argv);
  // The runtime's messages name the budget's variable; given on the command line, it is --budget's.
  const char* const from_flag =
      flags.budget.empty() ? "" : "monet-train: the budget here is --budget's: set it there\n";
  try {
    return run(flags);
  } catch (const monet::InfeasibleBudgetError& e) {
    std::cerr << "\nmonet-train: " << e.what() << "\n" << from_flag;
    return 1;
  } catch (const monet::ConfigError& e) {
    std::cerr << "monet-train: " << e.what() << "\n";
    const std::string what = e.what();
    if (what.find("MONET_BUDGET") != std::string::npos) std::cerr << from_flag;
    if (what.find("MONET_TRACE") != std::string::npos && !flags.trace.empty()) {
      std::cerr << "monet-train: the trace file here is --trace's: give it a writable path\n";
    }
    return 2;
  } catch (const c10::OutOfMemoryError& e) {
    // Outside a training step (making the model or a batch): there was no step to plan, so no
    // least budget to name; the allocator's message says what did not fit.
    std::cerr << "\nmonet-train: the budget does not hold the model and a batch before the first "
                 "step. "
              << e.what_without_backtrace() << "\n";
    return 1;
  }
}
