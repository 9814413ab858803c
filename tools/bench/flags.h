// monet-bench's command line: what to run, how long, where the report goes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace monet::bench {

// Times the --warm warm-up run times each stage's modes (monet::Options::measure_repeats).
constexpr int kWarmUpRepeats = 3;
// Rounds of a --warm run unless --rounds says otherwise (--quick and cold runs: one).
constexpr int kWarmRounds = 5;

struct Flags {
  std::vector<std::string> models = {"transformer", "resnet"};
  std::vector<std::string> strategies = {"all", "sqrt", "static", "greedy", "dp", "monet"};
  std::vector<int> budgets = {80, 60, 45, 33};  // percent of the unconstrained peak
  int margin = 10;  // percent of the budget the runtime's plans keep free (Options::margin)
  int steps = 0;    // 0: per model, by --quick
  int rounds = 0;   // 0: kWarmRounds with --warm, else 1
  bool quick = false;
  bool warm = false;
  std::string size = "cpu";
  bool json = false;
  std::string out = "monet-bench-report";
  std::uint64_t seed = 1;
  std::string device;     // empty: the first GPU LibTorch sees, else the CPU
  bool autocast = false;  // each step under autocast: bfloat16 on the CPU, float16 on CUDA
};

// Parses monet-bench's arguments. Prints the usage and exits with status 2 on a bad one (0 on
// --help).
Flags parse(int argc, char** argv);

}  // namespace monet::bench
