#include "model_chains.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "monet/bytes.h"
#include "monet/planner.h"
#include "planner/chain_json.h"
#include "planner/chain_model.h"
#include "planner/simulate.h"

namespace monet {
namespace {

struct Shape {
  const char* model;
  std::int64_t batch;
  std::int64_t size;  // sequence length or image side
  Chain chain;
};

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (auto [batch, seq] : {std::pair{64, 64}, {32, 128}, {16, 256}, {8, 512}}) {
    out.push_back(Shape{"bert-base", batch, seq, testing::bert_base_chain(batch, seq)});
  }
  for (auto [batch, image] : {std::pair{64, 160}, {32, 224}, {16, 288}}) {
    out.push_back(Shape{"resnet-50", batch, image, testing::resnet50_chain(batch, image)});
  }
  return out;
}

TEST(ModelChains, AreValidAndScaleWithTheShape) {
  for (const Shape& s : shapes()) EXPECT_NO_THROW(validate_chain(s.chain, s.model));
  const Chain small = testing::bert_base_chain(8, 128), large = testing::bert_base_chain(8, 512);
  EXPECT_EQ(small.stages.size(), 26u);
  EXPECT_EQ(testing::resnet50_chain(8, 224).stages.size(), 18u);
  // Attention keeps seq x seq tensors: 4x the sequence, more than 4x the saved bytes.
  EXPECT_GT(large.stages[1].variants[0].saved_bytes, 4 * small.stages[1].variants[0].saved_bytes);
  EXPECT_EQ(large.stages[2].variants[0].saved_bytes, 4 * small.stages[2].variants[0].saved_bytes);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The chain files that monet-plan's examples use are these generators' output.
TEST(ModelChains, DataFilesMatchTheGenerators) {
  const std::string dir = MONET_PLANNER_TEST_DATA;
  EXPECT_EQ(read(dir + "/bert_base_b32_s128.json"),
            chain_to_json(testing::bert_base_chain(32, 128)));
  EXPECT_EQ(read(dir + "/resnet50_b32_i224.json"), chain_to_json(testing::resnet50_chain(32, 224)));
}

std::string overhead_cell(const PlanResult& r, double baseline) {
  if (!r.feasible) return "needs " + format_bytes(static_cast<std::size_t>(r.min_feasible_bytes));
  char cell[32];
  std::snprintf(cell, sizeof cell, "%+.1f%%", 100.0 * (r.time / baseline - 1.0));
  return cell;
}

// The realistic check: at fixed_bytes plus one third (then one half) of the activation
// memory that keeping everything needs, monet's simulated overhead against sqrt, greedy and dp.
// fixed_bytes (weights, gradients, Adam state) are on top because no plan can shrink them: a
// third of the whole peak would be less than fixed_bytes alone for BERT. Overheads are against
// keeping everything; "needs" is the least budget at which a strategy fits. The table goes to
// stdout.
TEST(ModelChains, MonetAgainstTheBaselinesAtAThirdOfTheActivations) {
  for (const int divisor : {3, 2}) {
    std::printf("\nbudget: fixed bytes + 1/%d of the activations kept without checkpoints\n",
                divisor);
    std::printf("%-10s %-9s %11s %11s | %-16s %-16s %-16s %-16s\n", "model", "shape", "budget",
                "activations", "sqrt", "greedy", "dp", "monet");
    for (const Shape& s : shapes()) {
      const Chain& chain = s.chain;
      const Simulation none = simulate(chain, uniform_plan(chain, false));
      const std::int64_t activations = none.peak_bytes - chain.fixed_bytes;
      const std::int64_t budget = chain.fixed_bytes + activations / divisor;
      std::vector<PlanResult> results;
      for (Strategy st : {Strategy::kSqrt, Strategy::kGreedy, Strategy::kDp, Strategy::kMonet}) {
        results.push_back(Planner(st).try_plan(chain, budget));
      }
      const PlanResult& monet = results.back();
      std::printf("%-10s %3lldx%-5lld %11s %11s |", s.model, static_cast<long long>(s.batch),
                  static_cast<long long>(s.size),
                  format_bytes(static_cast<std::size_t>(budget)).c_str(),
                  format_bytes(static_cast<std::size_t>(activations)).c_str());
      for (const PlanResult& r : results) {
        std::printf(" %-16s", overhead_cell(r, none.time).c_str());
      }
      std::printf("\n");
      EXPECT_LE(monet.peak_bytes, monet.feasible ? budget : monet.min_feasible_bytes);
      for (const PlanResult& r : results) {
        EXPECT_LE(monet.min_feasible_bytes, r.min_feasible_bytes) << strategy_name(r.strategy);
        if (r.feasible) {
          EXPECT_TRUE(monet.feasible);
          EXPECT_LE(monet.time, r.time * (1 + 1e-12)) << strategy_name(r.strategy);
        }
      }
    }
  }
}

}  // namespace
}  // namespace monet
