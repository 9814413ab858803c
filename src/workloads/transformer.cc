// The transformer encoder workload: pre-LayerNorm encoder layers (BERT-like, smaller) with a
// span-prediction head (start and end logits per token, as for question answering).
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "monet/ops.h"
#include "workloads/workloads.h"

namespace monet::workloads {
namespace {

struct EmbeddingImpl : torch::nn::Module {
  explicit EmbeddingImpl(const TransformerConfig& c)
      : tokens(c.vocab, c.d_model), positions(c.max_seq, c.d_model), p(c.dropout) {
    register_module("tokens", tokens);
    register_module("positions", positions);
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    const auto where = torch::arange(ids.size(1), ids.options());
    return ops::dropout(tokens(ids) + positions(where).unsqueeze(0), p, is_training());
  }
  torch::nn::Embedding tokens;
  torch::nn::Embedding positions;
  double p;
};
TORCH_MODULE(Embedding);

// An encoder layer is two stages, so that a plan can keep one half and recompute the other:
// the attention block and the feed-forward block, each pre-LayerNorm with its residual.
struct AttentionBlockImpl : torch::nn::Module {
  explicit AttentionBlockImpl(const TransformerConfig& c)
      : norm(torch::nn::LayerNormOptions({c.d_model})),
        qkv(c.d_model, 3 * c.d_model),
        proj(c.d_model, c.d_model),
        heads(c.heads),
        p(c.dropout) {
    register_module("norm", norm);
    register_module("qkv", qkv);
    register_module("proj", proj);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const std::int64_t b = x.size(0), s = x.size(1), d = x.size(2), dh = d / heads;
    const auto parts = qkv(norm(x)).view({b, s, 3, heads, dh}).permute({2, 0, 3, 1, 4});
    // Queries are scaled before the product: a [b, heads, s, dh] tensor rather than [.., s, s].
    const auto q = parts[0] * (1.0 / std::sqrt(static_cast<double>(dh)));
    const auto scores = torch::matmul(q, parts[1].transpose(-2, -1));
    const auto attention = ops::dropout(ops::softmax(scores, -1), p, is_training());
    const auto context = torch::matmul(attention, parts[2]).transpose(1, 2).reshape({b, s, d});
    return x + ops::dropout(proj(context), p, is_training());
  }

  torch::nn::LayerNorm norm;
  torch::nn::Linear qkv, proj;
  std::int64_t heads;
  double p;
};
TORCH_MODULE(AttentionBlock);

struct FeedForwardBlockImpl : torch::nn::Module {
  explicit FeedForwardBlockImpl(const TransformerConfig& c)
      : norm(torch::nn::LayerNormOptions({c.d_model})),
        ff1(c.d_model, c.d_ff),
        ff2(c.d_ff, c.d_model),
        p(c.dropout) {
    register_module("norm", norm);
    register_module("ff1", ff1);
    register_module("ff2", ff2);
  }

  torch::Tensor forward(const torch::Tensor& y) {
    const auto h = ff2(ops::dropout(ops::gelu(ff1(norm(y))), p, is_training()));
    return y + ops::dropout(h, p, is_training());
  }

  torch::nn::LayerNorm norm;
  torch::nn::Linear ff1, ff2;
  double p;
};
TORCH_MODULE(FeedForwardBlock);

struct SpanHeadImpl : torch::nn::Module {
  explicit SpanHeadImpl(const TransformerConfig& c)
      : norm(torch::nn::LayerNormOptions({c.d_model})), out(c.d_model, 2) {
    register_module("norm", norm);
    register_module("out", out);
  }
  torch::Tensor forward(const torch::Tensor& x) { return out(norm(x)); }
  torch::nn::LayerNorm norm;
  torch::nn::Linear out;
};
TORCH_MODULE(SpanHead);

class TransformerWorkload : public Workload {
 public:
  explicit TransformerWorkload(TransformerConfig c) : c_(c) {}
  std::string name() const override { return "transformer"; }

  torch::nn::Sequential make_model(std::uint64_t seed) const override {
    torch::manual_seed(seed);
    torch::nn::Sequential model;
    model->push_back(Embedding(c_));
    for (int i = 0; i < c_.layers; ++i) {
      model->push_back(AttentionBlock(c_));
      model->push_back(FeedForwardBlock(c_));
    }
    model->push_back(SpanHead(c_));
    return model;
  }

  torch::Tensor loss(const torch::Tensor& output, const Batch& batch) const override {
    namespace F = torch::nn::functional;
    return F::cross_entropy(output.select(2, 0), batch.targets.select(1, 0)) +
           F::cross_entropy(output.select(2, 1), batch.targets.select(1, 1));
  }

  Batch batch(std::uint64_t seed, std::int64_t i) const override {
    std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(i));
    return make(draw_sequence_length(rng, c_.max_seq), rng());
  }

  Batch largest_batch() const override { return make(c_.max_seq, 7); }

  std::string shape_of(const Batch& b) const override {
    return std::to_string(b.input.size(0)) + "x" + std::to_string(b.input.size(1));
  }

 private:
  Batch make(std::int64_t seq, std::uint64_t seed) const {
    auto gen = at::detail::createCPUGenerator(seed);
    Batch b;
    b.input = torch::randint(c_.vocab, {c_.batch, seq}, gen, torch::kLong);
    b.targets = torch::randint(seq, {c_.batch, 2}, gen, torch::kLong);
    return b;
  }

  TransformerConfig c_;
};

}  // namespace

std::int64_t draw_sequence_length(std::mt19937_64& rng, std::int64_t max_seq) {
  if (std::uniform_real_distribution<double>(0.0, 1.0)(rng) < 0.05) return max_seq;
  std::lognormal_distribution<double> length(std::log(static_cast<double>(max_seq) / 5.0), 0.6);
  const auto l = static_cast<std::int64_t>(std::lround(length(rng)));
  return std::clamp<std::int64_t>(l, 8, max_seq);
}

std::unique_ptr<Workload> make_transformer_workload(TransformerConfig config) {
  return std::make_unique<TransformerWorkload>(config);
}

}  // namespace monet::workloads
