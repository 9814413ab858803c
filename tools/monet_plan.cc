// monet-plan: plans one chain (one input shape) under a memory budget and prints the plan, or
// every strategy's plan side by side. The chain comes from a file, or from a predictor's saved
// state (MONET_PREDICTOR_STATE) for a shape. docs/planner.md shows examples.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "common/numbers.h"
#include "monet/bytes.h"
#include "monet/errors.h"
#include "monet/planner.h"
#include "planner/chain_json.h"
#include "planner/chain_model.h"
#include "planner/plan_json.h"
#include "planner/simulate.h"
#include "predictor/predictor.h"

namespace {

constexpr const char* kUsage =
    R"(usage: monet-plan --chain FILE --budget B [--strategy S] [--compare] [--json]
       monet-plan --predictor STATE --shape DIMS --budget B [--fixed B] [...]
       monet-plan (--chain FILE | --predictor STATE --shape DIMS) [--fixed B] --print-chain
       monet-plan --predictor STATE --laws

Plans a training chain (one input shape) under a memory budget: which stages to checkpoint and
which operator variant each runs. Prints the plan with its simulated peak and time.

  --chain FILE   the chain as JSON: {"fixed_bytes": ..., "stages": [{"name": ..., "variants":
                 [{"name", "out_bytes", "saved_bytes", "fwd_peak", "bwd_peak", "fwd_time",
                 "bwd_time"}, ...]}, ...]} (bytes, seconds; docs/planner.md); a stage may add
                 "grad_bytes", the gradients its backward makes that stay (default 0)
  --predictor STATE
                 instead of a chain file, the chain a predictor's saved state (the file
                 MONET_PREDICTOR_STATE names) predicts for --shape; says so when the
                 predictor is not confident at that shape
  --shape DIMS   the input's varying dims, as the state has them, joined by x (64x256x256)
  --fixed B      the memory held outside the stages through the step (parameters, gradients,
                 optimizer state, the batch): replaces the chain's fixed_bytes, which a
                 predictor's state does not hold (the runtime measures it); default: the chain's
  --budget B     the memory budget, fixed_bytes included: bytes (1073741824), a size (8GiB, 8G,
                 7500MB, 512MiB), or a share of the chain's peak without checkpoints (33%)
  --strategy S   none, all, sqrt, greedy, dp or monet (default monet)
  --compare      plan with every strategy and print them side by side
  --json         print the plan as JSON (with --compare, an array of plans)
  --print-chain  print the chain that would be planned (the file's, or the predictor's for
                 --shape, with --fixed) as JSON in --chain's format, and plan nothing:
                 what the predictor expects each stage to cost at a shape, to read or edit
  --laws         with --predictor alone: print what the state has learned (its dims, the
                 shapes it measured, and the law of every stage's and variant's numbers in
                 those dims, with its leave-one-out error), and plan nothing
  -h, --help     print this message

Exit status: 0 when the plan fits the budget (always, with --compare); 1 when it does not (the
least budget that fits is printed); 2 for a bad command line or chain file.
)";

struct Args {
  std::string chain_path;
  std::string predictor_path;
  std::string shape;
  std::optional<std::string> fixed;
  std::string budget;
  monet::Strategy strategy = monet::Strategy::kMonet;
  bool compare = false;
  bool json = false;
  bool print_chain = false;
  bool laws = false;
  bool help = false;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Args parse_args(int argc, char** argv) {
  Args args;
  bool have_chain = false, have_budget = false, have_strategy = false;
  for (int k = 1; k < argc; ++k) {
    std::string arg = argv[k];
    std::optional<std::string> inline_value;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    const auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (k + 1 >= argc) throw UsageError(fmt::format("{} needs a value", arg));
      return argv[++k];
    };
    if (arg == "-h" || arg == "--help") {
      args.help = true;
    } else if (arg == "--chain") {
      if (have_chain) throw UsageError("--chain was given twice; give one chain file");
      args.chain_path = value();
      have_chain = true;
    } else if (arg == "--predictor") {
      args.predictor_path = value();
      if (args.predictor_path.empty()) {
        throw UsageError("--predictor was given an empty path; give the predictor state's file");
      }
    } else if (arg == "--shape") {
      args.shape = value();
    } else if (arg == "--fixed") {
      args.fixed = value();
    } else if (arg == "--budget") {
      args.budget = value();
      have_budget = true;
    } else if (arg == "--strategy") {
      args.strategy = monet::parse_strategy(value(), "--strategy");
      have_strategy = true;
    } else if (arg == "--compare" && !inline_value) {
      args.compare = true;
    } else if (arg == "--json" && !inline_value) {
      args.json = true;
    } else if (arg == "--print-chain" && !inline_value) {
      args.print_chain = true;
    } else if (arg == "--laws" && !inline_value) {
      args.laws = true;
    } else {
      throw UsageError(fmt::format("unknown argument '{}'", argv[k]));
    }
  }
  if (args.help) return args;
  const bool have_predictor = !args.predictor_path.empty();
  if (args.laws) {
    if (!have_predictor || have_chain) {
      throw UsageError(
          "--laws prints a predictor state's laws: give --predictor STATE, no --chain");
    }
    if (!args.shape.empty() || args.fixed || have_budget || have_strategy || args.compare ||
        args.json || args.print_chain) {
      throw UsageError(
          "--laws prints the laws of every shape and plans nothing: give --predictor STATE "
          "alone");
    }
    return args;
  }
  if (have_chain && have_predictor) {
    throw UsageError("give --chain FILE or --predictor STATE, not both");
  }
  if (!have_chain && !have_predictor) {
    throw UsageError("--chain FILE (or --predictor STATE with --shape DIMS) is required");
  }
  if (have_predictor && args.shape.empty()) {
    throw UsageError("--predictor STATE needs --shape DIMS, the input shape to plan for");
  }
  if (!have_predictor && !args.shape.empty()) {
    throw UsageError("--shape DIMS goes with --predictor STATE; a chain file is one shape already");
  }
  if (args.print_chain) {
    if (have_budget || have_strategy || args.compare || args.json) {
      throw UsageError(
          "--print-chain plans nothing: leave out --budget, --strategy, --compare and --json");
    }
    return args;
  }
  if (!have_budget) throw UsageError("--budget B is required");
  if (args.compare && have_strategy) {
    throw UsageError("--compare plans with every strategy: leave out --strategy, or --compare");
  }
  return args;
}

std::string bytes(std::int64_t n) { return monet::format_bytes(static_cast<std::size_t>(n)); }

std::string overhead(double time, double baseline) {
  return baseline > 0.0 ? fmt::format("{:+.1f}%", 100.0 * (time / baseline - 1.0)) : "n/a";
}

std::string stage_cell(const monet::Chain& chain, const monet::PlanResult& r, std::size_t i) {
  const monet::StagePlan& s = r.plan.stages[i];
  std::string cell = !s.checkpoint                                        ? "keep"
                     : monet::starts_segment(r.plan, static_cast<int>(i)) ? "ckpt"
                                                                          : "  ..";
  if (s.variant != 0) cell += ":" + chain.stages[i].variants[s.variant].name;
  return cell;
}

void print_plan(const monet::Chain& chain, const monet::PlanResult& r, double baseline) {
  std::size_t width = 5;
  for (const monet::Stage& s : chain.stages) width = std::max(width, s.name.size());
  fmt::print("{:<{}}  {:<10}  {:<20}  {:>12}\n", "stage", width, "plan", "variant", "retained");
  for (std::size_t i = 0; i < chain.stages.size(); ++i) {
    const monet::StagePlan& s = r.plan.stages[i];
    fmt::print("{:<{}}  {:<10}  {:<20}  {:>12}\n", chain.stages[i].name, width,
               !s.checkpoint                                        ? "keep"
               : monet::starts_segment(r.plan, static_cast<int>(i)) ? "checkpoint"
                                                                    : "  ..",
               chain.stages[i].variants[s.variant].name,
               bytes(monet::retained_bytes(chain, r.plan, static_cast<int>(i))));
  }
  const monet::Simulation sim = monet::simulate(chain, r.plan);
  fmt::print("\nstrategy {}: {} checkpointed, {} non-default variants, planned in {:.1f} us\n",
             monet::strategy_name(r.strategy), monet::checkpointed_stages(r.plan),
             monet::non_default_variants(r.plan), r.plan_us);
  fmt::print("peak     {} at {} of {} (budget {}, fixed {}, least feasible {})\n",
             bytes(r.peak_bytes), monet::sim_phase_name(sim.peak_step.phase),
             chain.stages[sim.peak_step.stage].name, bytes(r.budget_bytes),
             bytes(chain.fixed_bytes), bytes(r.min_feasible_bytes));
  fmt::print("time     {:.6g} s per iteration, {} against no checkpointing\n", r.time,
             overhead(r.time, baseline));
  if (!r.feasible) {
    fmt::print("does not fit: the least budget the '{}' strategy fits in is {} ({} bytes)\n",
               monet::strategy_name(r.strategy), bytes(r.min_feasible_bytes), r.min_feasible_bytes);
  }
}

void print_comparison(const monet::Chain& chain, const std::vector<monet::PlanResult>& results,
                      double baseline) {
  fmt::print("budget {} ({} bytes), fixed {}, {} stages\n\n", bytes(results[0].budget_bytes),
             results[0].budget_bytes, bytes(chain.fixed_bytes), chain.stages.size());
  fmt::print("{:<8}  {:<4}  {:>12}  {:>14}  {:>12}  {:>9}  {:>5}  {:>8}  {:>9}\n", "strategy",
             "fits", "peak", "least feasible", "time (s)", "overhead", "ckpt", "variants",
             "plan (us)");
  for (const monet::PlanResult& r : results) {
    fmt::print("{:<8}  {:<4}  {:>12}  {:>14}  {:>12.6g}  {:>9}  {:>5}  {:>8}  {:>9.1f}\n",
               monet::strategy_name(r.strategy), r.feasible ? "yes" : "no", bytes(r.peak_bytes),
               bytes(r.min_feasible_bytes), r.time, overhead(r.time, baseline),
               monet::checkpointed_stages(r.plan), monet::non_default_variants(r.plan), r.plan_us);
  }
  std::size_t width = 5;
  for (const monet::Stage& s : chain.stages) width = std::max(width, s.name.size());
  std::vector<std::size_t> columns;
  for (const monet::PlanResult& r : results) {
    std::size_t w = std::max<std::size_t>(6, monet::strategy_name(r.strategy).size());
    for (std::size_t i = 0; i < chain.stages.size(); ++i) {
      w = std::max(w, stage_cell(chain, r, i).size());
    }
    columns.push_back(w);
  }
  fmt::print("\n{:<{}}", "stage", width);
  for (std::size_t c = 0; c < results.size(); ++c) {
    fmt::print("  {:<{}}", monet::strategy_name(results[c].strategy), columns[c]);
  }
  fmt::print("\n");
  for (std::size_t i = 0; i < chain.stages.size(); ++i) {
    fmt::print("{:<{}}", chain.stages[i].name, width);
    for (std::size_t c = 0; c < results.size(); ++c) {
      fmt::print("  {:<{}}", stage_cell(chain, results[c], i), columns[c]);
    }
    fmt::print("\n");
  }
}

// "64x256x256" -> {64, 256, 256}: positive integers joined by x.
monet::Shape parse_shape(const std::string& text) {
  monet::Shape shape;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find('x', start);
    const std::string part = text.substr(start, end == std::string::npos ? end : end - start);
    const std::optional<long long> dim = monet::parse_whole_number(part);
    if (!dim || *dim <= 0) {
      throw UsageError(fmt::format(
          "--shape='{}': give the input's varying dims as positive integers joined by x, as "
          "the predictor's state has them (for example 64x256x256)",
          text));
    }
    shape.push_back(*dim);
    if (end == std::string::npos) return shape;
    start = end + 1;
  }
}

// What a predictor's state has learned: its dims and measured shapes, then per stage and variant
// the law of each number, with how well it held at the measured shapes.
void print_laws(const std::string& path) {
  const monet::Predictor p = monet::Predictor::load(path);
  const std::string dims = p.describe_dims();
  fmt::print("{}: {} stages, varying dims {}{}\n", path, p.num_stages(),
             dims.empty() ? "none yet" : dims,
             p.measured_on().empty() ? "" : ", measured on " + p.measured_on());
  const std::vector<monet::Shape> shapes = p.measured_shapes();
  std::string listed;
  for (const monet::Shape& s : shapes) {
    listed += (listed.empty() ? "" : ", ") + monet::format_shape(s);
  }
  fmt::print("{} shapes measured{}{}\n", shapes.size(), shapes.empty() ? "" : ": ", listed);
  if (shapes.empty()) return;
  fmt::print(
      "error: the root-mean-square relative error of the measured shapes, each predicted by the\n"
      "law fitted without it; unchecked: the law has as many terms as there are shapes\n");
  for (int i = 0; i < p.num_stages(); ++i) {
    const monet::StageLayout& stage = p.layout()[i];
    fmt::print("\n{}\n", stage.name);
    for (int v = 0; v < static_cast<int>(stage.variants.size()); ++v) {
      for (const monet::Quantity q : monet::kAllQuantities) {
        const monet::FittedLaw* law = p.law(i, v, q);
        std::string status;
        if (law == nullptr || law->points == 0) {
          status = "not measured";
        } else if (!law->validated()) {
          status = fmt::format("unchecked ({} terms, {} shapes)", law->law.size, law->points);
        } else if (law->loo_error < 1e-9) {  // rounding, in numbers of up to 2^53
          status = fmt::format("exact at {} shapes", law->points);
        } else {
          status = fmt::format("error {:.2f}% at {} shapes", 100.0 * law->loo_error, law->points);
        }
        fmt::print("  {:<12} {:<12} {:<48} {}\n",
                   q == monet::kAllQuantities[0] ? stage.variants[v] : "", monet::quantity_name(q),
                   p.describe_law(i, v, q), status);
      }
    }
  }
}

// The chain to plan: the file's, or the predictor's for the shape (with a line on stderr where
// the predictor is not confident there), with --fixed in place of its fixed bytes.
monet::Chain load_chain(const Args& args) {
  monet::Chain chain;
  if (!args.predictor_path.empty()) {
    const monet::Shape shape = parse_shape(args.shape);
    const monet::Predictor predictor = monet::Predictor::load(args.predictor_path);
    chain = predictor.predict(shape);
    const monet::Confidence confidence = predictor.confidence(shape);
    if (!confidence.confident) {
      fmt::print(stderr, "monet-plan: the predictor is not confident at {}: {}\n", args.shape,
                 confidence.reason);
    }
  } else {
    chain = monet::read_chain_file(args.chain_path);
  }
  if (args.fixed) {
    chain.fixed_bytes = static_cast<std::int64_t>(monet::parse_size(*args.fixed, "--fixed"));
  }
  return chain;
}

int run(const Args& args) {
  if (args.laws) {
    print_laws(args.predictor_path);
    return 0;
  }
  const monet::Chain chain = load_chain(args);
  if (args.print_chain) {
    fmt::print("{}\n", monet::chain_to_json(chain));
    return 0;
  }
  const monet::PlanResult baseline = monet::Planner(monet::Strategy::kNone).try_plan(chain, 0);
  const auto budget = static_cast<std::int64_t>(
      monet::parse_budget(args.budget, static_cast<std::size_t>(baseline.peak_bytes), "--budget",
                          "the chain's peak without checkpoints"));
  if (args.compare) {
    std::vector<monet::PlanResult> results;
    for (monet::Strategy s : monet::all_strategies()) {
      results.push_back(monet::Planner(s).try_plan(chain, budget));
    }
    if (args.json) {
      fmt::print("{}", monet::plans_to_json(chain, results));
    } else {
      print_comparison(chain, results, baseline.time);
    }
    return 0;
  }
  const monet::PlanResult result = monet::Planner(args.strategy).try_plan(chain, budget);
  if (args.json) {
    fmt::print("{}", monet::plan_to_json(chain, result));
  } else {
    print_plan(chain, result, baseline.time);
  }
  if (!result.feasible && args.json) {
    fmt::print(stderr,
               "monet-plan: the plan does not fit {}: the least budget the '{}' strategy fits "
               "in is {} ({} bytes)\n",
               bytes(budget), monet::strategy_name(result.strategy),
               bytes(result.min_feasible_bytes), result.min_feasible_bytes);
  }
  return result.feasible ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    if (args.help) {
      fmt::print("{}", kUsage);
      return 0;
    }
    return run(args);
  } catch (const UsageError& e) {
    fmt::print(stderr, "monet-plan: {}\n\n{}", e.what(), kUsage);
    return 2;
  } catch (const monet::ConfigError& e) {
    fmt::print(stderr, "monet-plan: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "monet-plan: {}\n", e.what());
    return 2;
  }
}
