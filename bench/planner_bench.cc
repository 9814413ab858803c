// Planning speed (issue #4 targets): under 100 us for 24 stages, under 1 ms for 100 stages with
// 3 variants each, a PlanCache hit under 1 us. Chains: BERT-base (26 stages, 3 variants on the
// encoder stages), a 100-stage transformer made of 49 BERT-base layers, and random chains of 24
// and 100 stages. The budget is fixed_bytes plus a third (or a half) of the activations kept
// without checkpoints, where planning has the most to do.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "model_chains.h"
#include "monet/planner.h"
#include "planner/chain_model.h"
#include "planner/plan_cache.h"
#include "planner/shape_key.h"
#include "planner/simulate.h"
#include "random_chains.h"

namespace {

using monet::Chain;

Chain random_chain(int stages, int variants) {
  std::mt19937_64 rng(2024);
  monet::testing::RandomChainOptions options;
  options.stages = stages;
  options.min_variants = variants;
  options.max_variants = variants;
  return monet::testing::random_chain(rng, options);
}

const Chain& chain_by_id(int id) {
  static const Chain chains[] = {monet::testing::bert_base_chain(32, 128),
                                 monet::testing::bert_stack_chain(49), random_chain(24, 3),
                                 random_chain(100, 3), monet::testing::resnet50_chain(32, 224)};
  return chains[id];
}

const char* chain_name(int id) {
  static const char* names[] = {"bert_base_26x3", "transformer_100x3", "random_24x3",
                                "random_100x3", "resnet50_18x3"};
  return names[id];
}

// args: chain id, strategy, budget divisor (3: a third of the activations).
void BM_Plan(benchmark::State& state) {
  const Chain& chain = chain_by_id(static_cast<int>(state.range(0)));
  const auto strategy = static_cast<monet::Strategy>(state.range(1));
  const std::int64_t none = monet::simulate(chain, monet::uniform_plan(chain, false)).peak_bytes;
  const std::int64_t budget = chain.fixed_bytes + (none - chain.fixed_bytes) / state.range(2);
  const monet::Planner planner(strategy);
  monet::PlanResult result;
  for (auto _ : state) {
    result = planner.try_plan(chain, budget);
    benchmark::DoNotOptimize(result);
  }
  state.SetLabel(std::string(chain_name(static_cast<int>(state.range(0)))) + " " +
                 std::string(monet::strategy_name(strategy)) + " 1/" +
                 std::to_string(state.range(2)) + (result.feasible ? "" : " (infeasible)"));
  state.counters["overhead_pct"] =
      100.0 * (result.time / monet::simulate(chain, monet::uniform_plan(chain, false)).time - 1.0);
}

void plan_args(benchmark::internal::Benchmark* b) {
  for (int chain = 0; chain < 5; ++chain) {
    for (int strategy :
         {static_cast<int>(monet::Strategy::kGreedy), static_cast<int>(monet::Strategy::kDp),
          static_cast<int>(monet::Strategy::kMonet)}) {
      for (int divisor : {3, 2}) b->Args({chain, strategy, divisor});
    }
  }
}
// With --benchmark_repetitions, the fastest repetition too: on a shared machine the slower ones
// measure the neighbours as well.
double fastest(const std::vector<double>& times) {
  return *std::min_element(times.begin(), times.end());
}
BENCHMARK(BM_Plan)
    ->Apply(plan_args)
    ->Unit(benchmark::kMicrosecond)
    ->ComputeStatistics("min", fastest);

void BM_Simulate(benchmark::State& state) {
  const Chain& chain = chain_by_id(static_cast<int>(state.range(0)));
  monet::Plan plan = monet::uniform_plan(chain, false);
  for (std::size_t i = 0; i < plan.stages.size(); i += 3) plan.stages[i].checkpoint = true;
  for (auto _ : state) benchmark::DoNotOptimize(monet::simulate(chain, plan));
  state.SetLabel(chain_name(static_cast<int>(state.range(0))));
}
BENCHMARK(BM_Simulate)->Arg(0)->Arg(1)->Unit(benchmark::kNanosecond);

// A hit in a cache holding 256 shapes: bucketing the dims, hashing, the lookup, the LRU move.
void BM_PlanCacheHit(benchmark::State& state) {
  monet::PlanCache cache;
  const Chain& chain = chain_by_id(0);
  const monet::PlanResult plan = monet::Planner().try_plan(chain, chain.fixed_bytes * 2);
  for (std::int64_t seq = 1; seq <= 4096 && cache.size() < 256; ++seq) {
    cache.insert(monet::ShapeKey({32, seq}), plan);
  }
  std::int64_t seq = 0;
  for (auto _ : state) {
    const monet::ShapeKey key({32, 64 + (seq++ & 63)});
    benchmark::DoNotOptimize(cache.find(key));
  }
}
BENCHMARK(BM_PlanCacheHit)->Unit(benchmark::kNanosecond);

}  // namespace
