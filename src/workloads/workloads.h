// The built-in workloads of monet-train and monet-bench: a transformer encoder on token batches
// whose lengths follow a long-tailed distribution like question-answering data, and a
// ResNet-style CNN on images of varying size. Each model is a torch::nn::Sequential of stages,
// built from monet::nn modules and monet::ops, so that the runtime can choose lean variants.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace monet::workloads {

struct TransformerConfig {
  std::int64_t vocab = 1000;
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  std::int64_t d_ff = 256;
  int layers = 6;  // each is two stages: attention and feed-forward
  double dropout = 0.1;
  std::int64_t max_seq = 128;  // longest sequence (learned positions)
  std::int64_t batch = 8;
};

// The CPU default is deep and narrow: 20 basic blocks per stage (45 stages in all, deeper than
// ResNet-50's 16 blocks), because how far below its peak a network of whole-block stages can be
// held is a matter of depth (docs/runtime.md): this one can be planned in 29% of its peak, the
// same CNN with 3 blocks per stage only in 75%.
struct ResNetConfig {
  std::vector<std::int64_t> widths = {16, 32};  // per stage; the stem has widths[0]
  int blocks_per_stage = 20;
  std::int64_t classes = 10;
  std::int64_t batch = 8;
  std::vector<std::int64_t> sides = {64, 96, 128};  // image sizes met
};

// A batch: the model's input and the targets its loss needs.
struct Batch {
  torch::Tensor input;    // tokens [batch, seq] (int64) or images [batch, 3, H, W]
  torch::Tensor targets;  // [batch, 2] start and end positions, or [batch] classes
};

// A workload: its model, its loss, and a seeded stream of batches.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string name() const = 0;
  // A fresh model; the same seed gives the same weights.
  virtual torch::nn::Sequential make_model(std::uint64_t seed) const = 0;
  virtual torch::Tensor loss(const torch::Tensor& output, const Batch& batch) const = 0;
  // The i-th batch of the stream of `seed` (the same for every run with that seed).
  virtual Batch batch(std::uint64_t seed, std::int64_t i) const = 0;
  // The largest batch the stream can give: what the default budget is measured on.
  virtual Batch largest_batch() const = 0;
  // The varying dims of a batch, "16x128".
  virtual std::string shape_of(const Batch& b) const = 0;
};

std::unique_ptr<Workload> make_transformer_workload(TransformerConfig config = {});
std::unique_ptr<Workload> make_resnet_workload(ResNetConfig config = {});

// "transformer" or "resnet" at a size: "cpu" (the configs above, whose monet-train run takes
// about a minute on 2 cores) or "gpu" (a BERT-base-like encoder, 12 layers of width 768 on
// sequences up to 512, batch 16; a ResNet-style CNN of widths 64 to 256, 12 blocks per stage, on
// batches of 64 images of 160 to 256 pixels). Throws ConfigError naming the choices for anything
// else.
std::unique_ptr<Workload> make_workload(const std::string& name, const std::string& size = "cpu");

// Sequence lengths like question-answering data: most short, a long tail, some at the maximum.
// Draws from a log-normal around max_seq / 5, clipped to [8, max_seq], 5% exactly max_seq.
std::int64_t draw_sequence_length(std::mt19937_64& rng, std::int64_t max_seq);

}  // namespace monet::workloads
