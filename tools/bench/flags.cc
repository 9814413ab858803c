#include "bench/flags.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "flag_numbers.h"

namespace monet::bench {
namespace {

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::cerr << "monet-bench: " << problem << "\n";
  // Asked for (no problem), the help goes to stdout, to be paged or searched.
  (problem.empty() ? std::cout : std::cerr)
      << "usage: monet-bench [--model transformer|resnet|all] [--strategies LIST]\n"
         "                   [--budgets LIST] [--margin P] [--steps N] [--rounds R] [--quick]\n"
         "                   [--size cpu|gpu] [--warm] [--json] [--out DIR] [--seed S]\n"
         "                   [--device D] [--autocast]\n"
         "  --model M       transformer, resnet or all (default all)\n"
         "  --strategies L  comma-separated, of all, sqrt, static, greedy, dp, monet (default\n"
         "                  all of them); the run without a budget is always made\n"
         "  --budgets L     comma-separated percentages of the unconstrained peak at the\n"
         "                  largest input (default 80,60,45,33)\n"
         "  --margin P      percent of each budget the runtime's plans keep free for what the\n"
         "                  memory model does not count, as MONET_MARGIN (default 10)\n"
         "  --steps N       timed steps per run (default 150 for the transformer and 60 for\n"
         "                  resnet; with --quick 12 and 6)\n"
         "  --rounds R      split each run's steps into R rounds, each running the baselines\n"
         "                  and every cell on its share of the batches, in an order turned\n"
         "                  from round to round, so that the machine's drift falls on all\n"
         "                  cells alike (default 5 with --warm, 1 without it or with\n"
         "                  --quick; at most --steps)\n"
         "  --quick         fewer steps, and --warm: every cell in under five minutes on 2\n"
         "                  CPU cores (a few steps with first measurements in them would\n"
         "                  measure little else)\n"
         "  --size S        cpu (default) or gpu: larger models, for a GPU\n"
         "  --warm          first measure the shapes the runs will meet in an untimed run, and\n"
         "                  start every cell from its saved predictor: steady-state overheads,\n"
         "                  no first measurements, the same chains for every strategy\n"
         "  --json          print the results as a JSON array instead of the table\n"
         "  --out DIR       where results.json, overhead.svg, planned.svg and\n"
         "                  timeline.svg go\n"
         "                  (default monet-bench-report)\n"
         "  --seed S        seed of the data and the weights (default 1)\n"
         "  --device D      cpu, cuda or cuda:N (default cuda:0 where LibTorch sees a GPU,\n"
         "                  else cpu)\n"
         "  --autocast      mixed precision: every run's steps, the baseline's and the peak\n"
         "                  the budgets are shares of, under autocast (bfloat16 on the CPU,\n"
         "                  float16 on CUDA)\n";
  std::exit(problem.empty() ? 0 : 2);
}

// The comma-separated entries of `flag`'s `text`. An empty entry ("45,,60", "45,") is refused
// rather than skipped: it is most likely a value left out.
std::vector<std::string> split(const std::string& flag, const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  if (!text.empty() && text.back() == ',') parts.emplace_back();
  for (const std::string& part : parts) {
    if (part.empty())
      usage(flag + " '" + text + "' has an empty entry; separate entries by one comma");
  }
  return parts;
}

}  // namespace

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
        const std::string m = value();
        if (m == "all") {
          f.models = {"transformer", "resnet"};
        } else if (m == "transformer" || m == "resnet") {
          f.models = {m};
        } else {
          usage("unknown model '" + m + "'; use transformer, resnet or all");
        }
      } else if (arg == "--strategies") {
        f.strategies = split(arg, value());
        for (auto s = f.strategies.begin(); s != f.strategies.end(); ++s) {
          if (*s != "all" && *s != "sqrt" && *s != "static" && *s != "greedy" && *s != "dp" &&
              *s != "monet") {
            usage("unknown strategy '" + *s + "'; use all, sqrt, static, greedy, dp or monet");
          }
          // A cell per strategy and budget: two of one name would share a predictor's file.
          if (std::find(f.strategies.begin(), s, *s) != s) {
            usage("strategy " + *s + " is given twice in --strategies");
          }
        }
        if (f.strategies.empty()) usage("--strategies needs at least one strategy");
      } else if (arg == "--budgets") {
        f.budgets.clear();
        for (const std::string& b : split(arg, value())) {
          const int percent = tools::int_flag(
              arg, b, 1, 100, "budget " + b + " is not a percentage from 1 to 100 of the peak");
          if (std::find(f.budgets.begin(), f.budgets.end(), percent) != f.budgets.end()) {
            usage("budget " + b + " is given twice in --budgets");
          }
          f.budgets.push_back(percent);
        }
        if (f.budgets.empty()) usage("--budgets needs at least one percentage");
      } else if (arg == "--margin") {
        f.margin = tools::int_flag(arg, value(), 0, 90, "--margin is a percentage from 0 to 90");
      } else if (arg == "--steps") {
        f.steps = tools::int_flag(arg, value(), 1, std::numeric_limits<int>::max(),
                                  "--steps must be positive");
      } else if (arg == "--rounds") {
        f.rounds = tools::int_flag(arg, value(), 1, std::numeric_limits<int>::max(),
                                   "--rounds must be positive");
      } else if (arg == "--quick") {
        f.quick = true;
      } else if (arg == "--warm") {
        f.warm = true;
      } else if (arg == "--size") {
        f.size = value();
        if (f.size != "cpu" && f.size != "gpu") usage("--size is cpu or gpu");
      } else if (arg == "--json") {
        f.json = true;
      } else if (arg == "--out") {
        f.out = value();
      } else if (arg == "--seed") {
        f.seed = tools::seed_flag(arg, value());
      } else if (arg == "--device") {
        f.device = value();
      } else if (arg == "--autocast") {
        f.autocast = true;
      } else if (arg == "--help" || arg == "-h") {
        usage("");
      } else {
        usage("unknown argument " + arg);
      }
    } catch (const tools::FlagError& e) {
      usage(e.what());
    }
  }
  // A cell of a few steps that measures 3 to 5 shapes is mostly its measurements.
  if (f.quick) f.warm = true;
  return f;
}

}  // namespace monet::bench
