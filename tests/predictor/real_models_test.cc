// The targets of issue #3 on real training steps: a transformer encoder (batch x seq) and a
// ResNet-style CNN (batch x H x W) trained by LibTorch on the CPU, every tensor in monet's CPU
// pool. Each stage (a child of a torch::nn::Sequential) is measured on its own: bytes through the
// pool, times with a steady clock. The predictor profiles the shapes it asks for (at most three)
// and predicts every other shape of the grid; the errors are printed as a table.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "allocator/device_pools.h"
#include "allocator/torch_cpu_allocator.h"
#include "fmt/format.h"
#include "predictor/predictor.h"

namespace monet {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The pool's bytes, in two views: `allocated` is what the pool hands out (512-byte blocks, and the
// peak marks' view), `requested` is what the tensors asked for (exact sizes).
struct Bytes {
  std::int64_t allocated = 0;
  std::int64_t requested = 0;
};

// A stage's costs in both views (the times are the same).
struct StageCosts {
  VariantCosts allocated;
  VariantCosts requested;
};

class Probe {
 public:
  Probe() : pool_(pools::cpu()) {}
  Bytes in_use() {
    const MemoryStats s = pool_.stats();
    return {static_cast<std::int64_t>(s.allocated_bytes),
            static_cast<std::int64_t>(s.requested_bytes)};
  }
  // Opens an interval: a mark for the allocated peak, a peak reset for the requested one.
  void start() {
    mark_ = pool_.mark();
    pool_.reset_peaks();
  }
  Bytes peak() {
    return {static_cast<std::int64_t>(pool_.peak_since(mark_)),
            static_cast<std::int64_t>(pool_.stats().peak_requested_bytes)};
  }

 private:
  CachingAllocator& pool_;
  Mark mark_;
};

// One training step of `net` on `input`, stage by stage: each stage's input is a fresh leaf, so
// that its forward and its backward run and are measured alone. The loss is the sum of the last
// output. Per stage:
//   out_bytes   its output
//   saved_bytes what stays in use after its forward, beyond the output
//   fwd_peak    the peak during its forward, above what stays in use after it
//   bwd_peak    the peak during its backward, above what was in use when it began
std::vector<StageCosts> measure_step(torch::nn::Sequential& net, const torch::Tensor& input) {
  Probe probe;
  std::vector<torch::nn::AnyModule*> stages;
  for (auto& m : *net) stages.push_back(&m);
  const std::size_t n = stages.size();
  std::vector<StageCosts> costs(n);
  std::vector<torch::Tensor> inputs(n), outputs(n);
  torch::Tensor x = input;
  for (std::size_t i = 0; i < n; ++i) {
    inputs[i] = i == 0 ? x : x.detach().requires_grad_(true);
    const Bytes before = probe.in_use();
    probe.start();
    const auto t0 = Clock::now();
    outputs[i] = stages[i]->forward(inputs[i]);
    const double time = seconds_since(t0);
    const Bytes after = probe.in_use();
    const Bytes peak = probe.peak();
    const std::int64_t out_requested = static_cast<std::int64_t>(outputs[i].nbytes());
    const std::int64_t out_allocated = (out_requested + 511) / 512 * 512;
    VariantCosts& a = costs[i].allocated;
    VariantCosts& r = costs[i].requested;
    a.out_bytes = out_allocated;
    r.out_bytes = out_requested;
    a.saved_bytes = std::max<std::int64_t>(0, after.allocated - before.allocated - out_allocated);
    r.saved_bytes = std::max<std::int64_t>(0, after.requested - before.requested - out_requested);
    a.fwd_peak = std::max<std::int64_t>(0, peak.allocated - after.allocated);
    r.fwd_peak = std::max<std::int64_t>(0, peak.requested - after.requested);
    a.fwd_time = r.fwd_time = time;
    x = outputs[i];
  }
  torch::Tensor grad = torch::ones_like(outputs[n - 1]);
  for (std::size_t k = n; k-- > 0;) {
    const Bytes before = probe.in_use();
    probe.start();
    const auto t0 = Clock::now();
    outputs[k].backward(grad);
    const double time = seconds_since(t0);
    const Bytes peak = probe.peak();
    costs[k].allocated.bwd_peak = std::max<std::int64_t>(0, peak.allocated - before.allocated);
    costs[k].requested.bwd_peak = std::max<std::int64_t>(0, peak.requested - before.requested);
    costs[k].allocated.bwd_time = costs[k].requested.bwd_time = time;
    outputs[k] = torch::Tensor();
    grad = k > 0 ? inputs[k].grad() : torch::Tensor();
    inputs[k] = torch::Tensor();
  }
  return costs;
}

// --- the models --------------------------------------------------------------------------------

// A ResNet basic block: conv-bn-relu-conv-bn plus the shortcut (1x1 conv when it downsamples).
struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int in, int out, int stride)
      : conv1(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)),
        bn1(out),
        conv2(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)),
        bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out) {
      shortcut = register_module(
          "shortcut",
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (shortcut ? shortcut(x) : x));
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Conv2d shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

// The stem: conv-bn-relu at full resolution.
struct StemImpl : torch::nn::Module {
  StemImpl() : conv(torch::nn::Conv2dOptions(3, 16, 3).padding(1).bias(false)), bn(16) {
    register_module("conv", conv);
    register_module("bn", bn);
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(bn(conv(x))); }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
};
TORCH_MODULE(Stem);

// The head: global average pool and a linear classifier.
struct HeadImpl : torch::nn::Module {
  HeadImpl() : fc(64, 10) { register_module("fc", fc); }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x.mean({2, 3})); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Head);

// Input [batch, 3, H, W]; H and W multiples of 4.
torch::nn::Sequential make_cnn() {
  return torch::nn::Sequential(Stem(), BasicBlock(16, 16, 1), BasicBlock(16, 32, 2),
                               BasicBlock(32, 64, 2), Head());
}

// Input [seq, batch, 32] (LibTorch's encoder layer takes the sequence first): an input
// projection, two encoder layers of width 64 (4 heads, feed-forward 256), an output projection.
torch::nn::Sequential make_transformer() {
  auto layer = [] {
    return torch::nn::TransformerEncoderLayer(
        torch::nn::TransformerEncoderLayerOptions(64, 4).dim_feedforward(256).dropout(0.1));
  };
  return torch::nn::Sequential(torch::nn::Linear(32, 64), layer(), layer(),
                               torch::nn::Linear(64, 32));
}

// --- the experiment ----------------------------------------------------------------------------

struct Errors {
  double bytes = 0.0;      // worst relative error over every byte number of every held-out shape
  double time = 0.0;       // worst relative error over every stage time
  double step_time = 0.0;  // worst relative error of the whole step's time (sum of stages)
  std::string worst_bytes;
  std::string worst_time;
};

struct Experiment {
  std::string name;
  std::vector<std::string> dim_names;
  std::vector<Shape> candidates;
  std::function<torch::Tensor(const Shape&)> input;
  torch::nn::Sequential net;
};

// Measurements at one shape: `repeats` steps; bytes from the last one (they repeat exactly), each
// time the fastest of the steps (on a shared machine the slower ones measure the neighbours).
std::vector<StageCosts> measure(Experiment& e, const Shape& shape, int repeats) {
  torch::manual_seed(0);
  const torch::Tensor input = e.input(shape);
  std::vector<StageCosts> best;
  for (int r = 0; r < repeats; ++r) {
    std::vector<StageCosts> c = measure_step(e.net, input);
    if (r > 0) {
      for (std::size_t i = 0; i < c.size(); ++i) {
        for (auto* v : {&c[i].allocated, &c[i].requested}) {
          v->fwd_time = std::min(v->fwd_time, best[i].allocated.fwd_time);
          v->bwd_time = std::min(v->bwd_time, best[i].allocated.bwd_time);
        }
      }
    }
    best = c;
  }
  return best;
}

Chain to_chain(const std::vector<StageCosts>& costs, bool requested) {
  Chain chain;
  for (std::size_t i = 0; i < costs.size(); ++i) {
    chain.stages.push_back(
        Stage{fmt::format("stage{}", i), {requested ? costs[i].requested : costs[i].allocated}});
  }
  return chain;
}

// Profiles what the predictor asks for (at most three shapes, three steps each), then predicts
// every other candidate and compares with its measurement (three steps too). Prints one table row
// per held-out shape.
void run(Experiment& e, bool requested, Errors* errors) {
  PredictorOptions options;
  options.dim_names = e.dim_names;
  std::vector<StageCosts> warm = measure(e, e.candidates.back(), 1);  // first-step allocations
  Predictor p = Predictor::for_chain(to_chain(warm, requested), options);
  int profiled = 0;
  while (profiled < 3) {
    std::optional<Shape> next = p.next_shape_to_profile(e.candidates);
    if (!next) break;
    const Chain measured = to_chain(measure(e, *next, 3), requested);
    p.observe(*next, measured);
    if (std::getenv("MONET_TEST_VERBOSE")) {
      for (const Stage& st : measured.stages) {
        const VariantCosts& v = st.variants[0];
        std::printf("  %s out %ld saved %ld fwd_peak %ld bwd_peak %ld fwd %.3gs bwd %.3gs\n",
                    st.name.c_str(), static_cast<long>(v.out_bytes),
                    static_cast<long>(v.saved_bytes), static_cast<long>(v.fwd_peak),
                    static_cast<long>(v.bwd_peak), v.fwd_time, v.bwd_time);
      }
    }
    std::printf("%s: profiled %s\n", e.name.c_str(), format_shape(*next).c_str());
    ++profiled;
  }
  EXPECT_EQ(profiled, 3);
  for (const Shape& shape : e.candidates) {
    if (p.is_profiled(shape)) continue;
    const Chain want = to_chain(measure(e, shape, 3), requested);
    const Chain got = p.predict(shape);
    double shape_bytes = 0.0, shape_time = 0.0, want_step = 0.0, got_step = 0.0;
    for (std::size_t i = 0; i < want.stages.size(); ++i) {
      for (Quantity q : kAllQuantities) {
        const double w = quantity_value(want.stages[i].variants[0], q);
        const double g = quantity_value(got.stages[i].variants[0], q);
        const double rel = w > 0 ? std::abs(g - w) / w : (g > 0 ? 1.0 : 0.0);
        const std::string where =
            fmt::format("{} stage{} {}: measured {:.4g} predicted {:.4g} ({})", format_shape(shape),
                        i, quantity_name(q), w, g, p.describe_law(static_cast<int>(i), 0, q));
        if (is_bytes(q)) {
          shape_bytes = std::max(shape_bytes, rel);
          if (rel > errors->bytes) errors->bytes = rel, errors->worst_bytes = where;
        } else {
          want_step += w;
          got_step += g;
          shape_time = std::max(shape_time, rel);
          if (rel > errors->time) errors->time = rel, errors->worst_time = where;
        }
      }
    }
    const double step = std::abs(got_step - want_step) / want_step;
    errors->step_time = std::max(errors->step_time, step);
    std::printf("%s %-16s bytes %6.2f%%  stage time %6.2f%%  step time %6.2f%%  confident %d\n",
                e.name.c_str(), format_shape(shape).c_str(), 100 * shape_bytes, 100 * shape_time,
                100 * step, p.confidence(shape).confident);
  }
  std::printf("%s (%s bytes): worst bytes %.2f%% at %s\n", e.name.c_str(),
              requested ? "requested" : "allocated", 100 * errors->bytes,
              errors->worst_bytes.c_str());
  std::printf("%s: worst stage time %.2f%% at %s; worst step time %.2f%%\n", e.name.c_str(),
              100 * errors->time, errors->worst_time.c_str(), 100 * errors->step_time);
}

class RealModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    install_cpu_allocator();
    torch::set_num_threads(1);  // steadier times on a shared machine
  }
};

Experiment transformer() {
  Experiment e;
  e.name = "transformer";
  e.dim_names = {"batch", "seq"};
  for (std::int64_t b : {2, 4, 8, 16}) {
    for (std::int64_t s : {16, 32, 64, 96, 128}) e.candidates.push_back({b, s});
  }
  e.input = [](const Shape& s) { return torch::randn({s[1], s[0], 32}); };
  e.net = make_transformer();
  e.net->train();
  return e;
}

Experiment cnn() {
  Experiment e;
  e.name = "cnn";
  e.dim_names = {"batch", "height", "width"};
  for (std::int64_t b : {2, 4, 8}) {
    for (std::int64_t h : {16, 32, 48, 64}) {
      for (std::int64_t w : {16, 32, 48, 64}) e.candidates.push_back({b, h, w});
    }
  }
  e.input = [](const Shape& s) { return torch::randn({s[0], 3, s[1], s[2]}); };
  e.net = make_cnn();
  e.net->train();
  return e;
}

// The transformer meets the byte target; its times, and the CNN's bytes and times, are measured
// and printed (docs/predictor.md has the table) but do not meet the targets yet: see there.
TEST_F(RealModels, TransformerEncoderBatchBySeq) {
  Experiment e = transformer();
  Errors errors;
  run(e, /*requested=*/true, &errors);
  EXPECT_LE(errors.bytes, 0.03) << errors.worst_bytes;
  RecordProperty("bytes_error", std::to_string(errors.bytes));
  RecordProperty("stage_time_error", std::to_string(errors.time));
  RecordProperty("step_time_error", std::to_string(errors.step_time));
}

TEST_F(RealModels, ResNetStyleCnnBatchByHeightByWidth) {
  Experiment e = cnn();
  Errors errors;
  run(e, /*requested=*/true, &errors);
  RecordProperty("bytes_error", std::to_string(errors.bytes));
  RecordProperty("stage_time_error", std::to_string(errors.time));
  RecordProperty("step_time_error", std::to_string(errors.step_time));
}

}  // namespace
}  // namespace monet
