// How long the predictor takes to predict a chain for a shape it has not profiled (the planner's
// input on a plan-cache miss): target under 10 microseconds for 100 stages.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "../tests/predictor/synthetic_models.h"
#include "predictor/predictor.h"

namespace monet {
namespace {

// A transformer of `stages` stages (attention and feed-forward alternating), profiled at three
// shapes with 3% timing noise.
Predictor trained_transformer(int stages) {
  std::mt19937 rng(1);
  PredictorOptions options;
  options.dim_names = {"batch", "seq"};
  Predictor p = Predictor::for_chain(testing::synthetic_transformer({8, 64}, stages / 2), options);
  for (Shape s : {Shape{32, 512}, Shape{4, 32}, Shape{24, 64}}) {
    for (int r = 0; r < 3; ++r)
      p.observe(s, testing::synthetic_transformer(s, stages / 2, 0.03, &rng));
  }
  return p;
}

Predictor trained_cnn(int stages) {
  std::mt19937 rng(1);
  PredictorOptions options;
  options.dim_names = {"batch", "height", "width"};
  Predictor p = Predictor::for_chain(testing::synthetic_cnn({8, 64, 64}, stages - 1), options);
  for (Shape s : {Shape{16, 128, 128}, Shape{2, 32, 32}, Shape{8, 32, 96}}) {
    p.observe(s, testing::synthetic_cnn(s, stages - 1, 0.03, &rng));
  }
  return p;
}

// predict_into with a reused chain: the path the runtime takes.
void BM_PredictTransformer(benchmark::State& state) {
  const Predictor p = trained_transformer(static_cast<int>(state.range(0)));
  Chain chain;
  std::int64_t seq = 100;
  for (auto _ : state) {
    p.predict_into({16, seq}, &chain);
    benchmark::DoNotOptimize(chain.stages.data());
    seq = seq == 400 ? 100 : seq + 1;  // never a profiled shape
  }
  state.counters["stages"] = static_cast<double>(chain.stages.size());
}
BENCHMARK(BM_PredictTransformer)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMicrosecond);

void BM_PredictCnn(benchmark::State& state) {
  const Predictor p = trained_cnn(static_cast<int>(state.range(0)));
  Chain chain;
  std::int64_t h = 40;
  for (auto _ : state) {
    p.predict_into({8, h, 64}, &chain);
    benchmark::DoNotOptimize(chain.stages.data());
    h = h == 120 ? 40 : h + 1;
  }
}
BENCHMARK(BM_PredictCnn)->Arg(100)->Unit(benchmark::kMicrosecond);

// predict() returning a fresh chain (allocates the stages and their names).
void BM_PredictFreshChain(benchmark::State& state) {
  const Predictor p = trained_transformer(static_cast<int>(state.range(0)));
  std::int64_t seq = 100;
  for (auto _ : state) {
    Chain chain = p.predict({16, seq});
    benchmark::DoNotOptimize(chain.stages.data());
    seq = seq == 400 ? 100 : seq + 1;
  }
}
BENCHMARK(BM_PredictFreshChain)->Arg(100)->Unit(benchmark::kMicrosecond);

// confidence(): predicts with error bounds; done once per new shape, before planning.
void BM_Confidence(benchmark::State& state) {
  const Predictor p = trained_transformer(static_cast<int>(state.range(0)));
  std::int64_t seq = 100;
  for (auto _ : state) {
    benchmark::DoNotOptimize(p.confidence({16, seq}).confident);
    seq = seq == 400 ? 100 : seq + 1;
  }
}
BENCHMARK(BM_Confidence)->Arg(100)->Unit(benchmark::kMicrosecond);

// observe(): folding one profiled step of a 100-stage chain in, refitting every law.
void BM_ObserveChain(benchmark::State& state) {
  Predictor p = trained_transformer(static_cast<int>(state.range(0)));
  const Chain measured =
      testing::synthetic_transformer({16, 128}, static_cast<int>(state.range(0)) / 2);
  for (auto _ : state) p.observe({16, 128}, measured);
}
BENCHMARK(BM_ObserveChain)->Arg(100)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace monet
