// monet-train: trains a small CNN with LibTorch on CPU, on images whose size changes from batch
// to batch, with every tensor allocated through monet under a budget, and prints what the
// allocator did.
//
//   monet-train [--steps N] [--budget B] [--trace FILE] [--seed S] [--without-monet]
//
// The budget is --budget, else MONET_BUDGET, else 1GiB; --trace sets MONET_TRACE.
// --without-monet runs the same steps on LibTorch's own allocator, for comparison.
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "monet/allocator.h"
#include "monet/bytes.h"
#include "monet/errors.h"

namespace {

struct Flags {
  int steps = 60;
  std::string budget;
  std::string trace;
  std::uint64_t seed = 1;
  bool without_monet = false;
};

[[noreturn]] void usage(const std::string& problem) {
  if (!problem.empty()) std::cerr << "monet-train: " << problem << "\n";
  std::cerr << "usage: monet-train [--steps N] [--budget B] [--trace FILE] [--seed S] "
               "[--without-monet]\n"
               "  --steps N     training steps (default 60)\n"
               "  --budget B    memory budget: 1GiB, 512MiB, 60%... (default MONET_BUDGET, "
               "else 1GiB)\n"
               "  --trace FILE  write every allocation and free to FILE (MONET_TRACE)\n"
               "  --seed S      seed of the data and the model (default 1)\n"
               "  --without-monet  use LibTorch's own allocator (no budget), for comparison\n";
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
      if (arg == "--steps") {
        f.steps = std::stoi(value());
        if (f.steps <= 0) usage("--steps must be positive");
      } else if (arg == "--budget") {
        f.budget = value();
      } else if (arg == "--trace") {
        f.trace = value();
      } else if (arg == "--seed") {
        f.seed = std::stoull(value());
      } else if (arg == "--without-monet") {
        f.without_monet = true;
      } else if (arg == "--help" || arg == "-h") {
        usage("");
      } else {
        usage("unknown argument " + arg);
      }
    } catch (const std::logic_error&) {
      usage("bad number for " + arg);
    }
  }
  return f;
}

// Conv-BN-ReLU blocks with two stride-2 stages, then global pooling: works at any image size.
torch::nn::Sequential make_model() {
  torch::nn::Sequential model;
  const int widths[][3] = {{3, 32, 1},  {32, 32, 1},  {32, 64, 2},
                           {64, 64, 1}, {64, 128, 2}, {128, 128, 1}};
  for (const auto& w : widths) {
    model->push_back(torch::nn::Conv2d(
        torch::nn::Conv2dOptions(w[0], w[1], 3).stride(w[2]).padding(1).bias(false)));
    model->push_back(torch::nn::BatchNorm2d(w[1]));
    model->push_back(torch::nn::ReLU());
  }
  model->push_back(torch::nn::AdaptiveAvgPool2d(1));
  model->push_back(torch::nn::Flatten());
  model->push_back(torch::nn::Linear(128, 10));
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse(argc, argv);
  if (!flags.trace.empty()) setenv("MONET_TRACE", flags.trace.c_str(), 1);
  if (!flags.budget.empty()) {
    setenv("MONET_BUDGET", flags.budget.c_str(), 1);
  } else if (std::getenv("MONET_BUDGET") == nullptr) {
    setenv("MONET_BUDGET", "1GiB", 1);
  }
  try {
    if (!flags.without_monet) monet::install();
  } catch (const monet::ConfigError& e) {
    std::cerr << "monet-train: " << e.what() << "\n";
    return 2;
  }

  torch::manual_seed(static_cast<std::uint64_t>(flags.seed));
  torch::set_num_threads(2);
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto start = std::chrono::steady_clock::now();
  const int sizes[] = {32, 40, 48, 56, 64, 72, 80, 96};
  for (int step = 1; step <= flags.steps; ++step) {
    const int side = sizes[torch::randint(0, 8, {1}).item<int>()];
    const int batch = 16;
    const auto images = torch::randn({batch, 3, side, side});
    const auto labels = torch::randint(0, 10, {batch});
    try {
      optimizer.zero_grad();
      const auto loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
      loss.backward();
      optimizer.step();
      if (!flags.without_monet && (step % 10 == 0 || step == flags.steps)) {
        const monet::MemoryStats s = monet::memory_stats();
        std::cout << "step " << step << "/" << flags.steps << "  image " << side << "x" << side
                  << "  loss " << loss.item<float>() << "  peak "
                  << monet::format_bytes(s.peak_reserved_bytes) << " of "
                  << monet::format_bytes(s.budget_bytes) << std::endl;
      }
    } catch (const c10::OutOfMemoryError& e) {
      std::cerr << "monet-train: step " << step << " (images " << side << "x" << side
                << ") does not fit the budget: " << e.what_without_backtrace() << "\n";
      return 1;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\n"
            << flags.steps << " steps in " << seconds << " s\n\n"
            << monet::format_stats(monet::memory_stats());
  return 0;
}
