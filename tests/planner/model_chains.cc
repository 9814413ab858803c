#include "model_chains.h"

#include <string>

#include "planner/chain_model.h"

namespace monet::testing {
namespace {

constexpr double kMatmulFlops = 100e12;  // FLOP/s
constexpr double kBandwidth = 1.5e12;    // bytes/s for element-wise passes
constexpr std::int64_t kHalf = 2;        // bytes per fp16 activation
constexpr std::int64_t kBytesPerParameter = 16;

double matmul_time(double flops) { return flops / kMatmulFlops; }
double pass_time(double bytes) { return bytes / kBandwidth; }

VariantCosts scaled(const VariantCosts& base, const char* name, double saved_factor,
                    double fwd_factor, double bwd_factor) {
  VariantCosts v = base;
  v.name = name;
  v.saved_bytes = static_cast<std::int64_t>(static_cast<double>(base.saved_bytes) * saved_factor);
  v.fwd_time = base.fwd_time * fwd_factor;
  v.bwd_time = base.bwd_time * bwd_factor;
  return v;
}

}  // namespace

Chain bert_base_chain(std::int64_t batch, std::int64_t seq_len) {
  const std::int64_t hidden = 768, heads = 12, ffn = 3072, layers = 12, vocab = 30522;
  const std::int64_t tokens = batch * seq_len;
  const std::int64_t act = tokens * hidden;  // elements of one B x S x H tensor
  const std::int64_t scores = batch * heads * seq_len * seq_len;  // elements of B x A x S x S
  const std::int64_t inner = tokens * ffn;
  const std::int64_t ln_stats = tokens * 2 * 4;  // fp32 mean and rstd
  const double h = static_cast<double>(hidden);
  const double t = static_cast<double>(tokens);

  Chain chain;
  const std::int64_t parameters = (vocab + 512 + 2) * hidden +
                                  layers * (4 * hidden * hidden + 2 * hidden * ffn) +
                                  hidden * hidden;
  chain.fixed_bytes = parameters * kBytesPerParameter;

  VariantCosts embed;
  embed.out_bytes = act * kHalf;
  embed.saved_bytes = act * kHalf + ln_stats + act;  // LayerNorm input and stats, dropout mask
  embed.fwd_peak = act * kHalf;
  embed.bwd_peak = act * kHalf;
  embed.fwd_time = pass_time(static_cast<double>(6 * act * kHalf));
  embed.bwd_time = 2 * embed.fwd_time;
  chain.stages.push_back(Stage{"embeddings", {embed}});

  for (std::int64_t l = 0; l < layers; ++l) {
    VariantCosts attn;
    attn.out_bytes = act * kHalf;
    // Q, K, V; softmax output, dropout mask and dropped probabilities; context; output dropout
    // mask; LayerNorm input and stats.
    attn.saved_bytes =
        3 * act * kHalf + scores * (kHalf + 1 + kHalf) + act * kHalf + act + act * kHalf + ln_stats;
    attn.fwd_peak = scores * kHalf + act * kHalf;          // the scores before softmax
    attn.bwd_peak = 2 * scores * kHalf + 3 * act * kHalf;  // their gradients, and dQ, dK, dV
    const double attn_flops = 2 * t * h * 4 * h + 4 * t * static_cast<double>(seq_len) * h;
    const double attn_passes = static_cast<double>(scores * kHalf * 4 + act * kHalf * 6);
    attn.fwd_time = matmul_time(attn_flops) + pass_time(attn_passes);
    attn.bwd_time = matmul_time(2 * attn_flops) + pass_time(2 * attn_passes);
    VariantCosts mem_efficient = attn;
    mem_efficient.name = "mem_efficient";
    mem_efficient.saved_bytes = attn.saved_bytes - scores * (kHalf + 1 + kHalf) +
                                batch * heads * seq_len * 4;  // fp32 log-sum-exp per row
    mem_efficient.fwd_peak = act * kHalf;
    mem_efficient.bwd_peak = 3 * act * kHalf;
    mem_efficient.fwd_time = attn.fwd_time * 1.05;
    mem_efficient.bwd_time = attn.bwd_time * 1.25;  // the scores are recomputed tile by tile
    VariantCosts bitmask = attn;
    bitmask.name = "bitmask_dropout";
    bitmask.saved_bytes = attn.saved_bytes - (scores + act) + (scores + act) / 8;
    bitmask.fwd_time = attn.fwd_time * 1.02;
    bitmask.bwd_time = attn.bwd_time * 1.02;
    chain.stages.push_back(
        Stage{"layer" + std::to_string(l) + ".attention", {attn, mem_efficient, bitmask}});

    VariantCosts ff;
    ff.out_bytes = act * kHalf;
    // GELU input, GELU output (the second linear's input), dropout mask, LayerNorm input, stats.
    ff.saved_bytes = 2 * inner * kHalf + act + act * kHalf + ln_stats;
    ff.fwd_peak = act * kHalf;
    ff.bwd_peak = 2 * inner * kHalf;
    const double ff_flops = 4 * t * h * static_cast<double>(ffn);
    const double ff_passes = static_cast<double>(inner * kHalf * 3 + act * kHalf * 6);
    ff.fwd_time = matmul_time(ff_flops) + pass_time(ff_passes);
    ff.bwd_time = matmul_time(2 * ff_flops) + pass_time(2 * ff_passes);
    VariantCosts gelu = ff;
    gelu.name = "gelu_recompute";
    gelu.saved_bytes = ff.saved_bytes - inner * kHalf;
    gelu.bwd_time = ff.bwd_time + pass_time(static_cast<double>(2 * inner * kHalf));
    VariantCosts ff_bitmask = ff;
    ff_bitmask.name = "bitmask_dropout";
    ff_bitmask.saved_bytes = ff.saved_bytes - act + act / 8;
    ff_bitmask.fwd_time = ff.fwd_time * 1.01;
    ff_bitmask.bwd_time = ff.bwd_time * 1.01;
    chain.stages.push_back(Stage{"layer" + std::to_string(l) + ".ffn", {ff, gelu, ff_bitmask}});
  }

  VariantCosts head;
  head.out_bytes = batch * 2 * 4;  // fp32 logits of 2 classes
  head.saved_bytes = batch * hidden * kHalf * 2;
  head.fwd_peak = batch * hidden * kHalf;
  head.bwd_peak = act * kHalf;  // the gradient scattered back over every token
  head.fwd_time = matmul_time(2 * static_cast<double>(batch) * h * h);
  head.bwd_time = 2 * head.fwd_time + pass_time(static_cast<double>(act * kHalf));
  chain.stages.push_back(Stage{"pooler_classifier", {head}});
  return chain;
}

Chain resnet50_chain(std::int64_t batch, std::int64_t image) {
  Chain chain;
  chain.fixed_bytes = 25'557'032LL * kBytesPerParameter;
  const double n = static_cast<double>(batch);

  // The stem: 7x7 conv (stride 2), BatchNorm, ReLU, 3x3 max pool (stride 2).
  const std::int64_t half = image / 2, quarter = image / 4;
  const std::int64_t conv = batch * 64 * half * half;
  const std::int64_t pooled = batch * 64 * quarter * quarter;
  VariantCosts stem;
  stem.out_bytes = pooled * kHalf;
  stem.saved_bytes = 2 * conv * kHalf + pooled * 8;  // conv and ReLU outputs, int64 indices
  stem.fwd_peak = conv * kHalf;
  stem.bwd_peak = 2 * conv * kHalf;
  stem.fwd_time = matmul_time(2 * static_cast<double>(conv) * 3 * 49) +
                  pass_time(static_cast<double>(4 * conv * kHalf));
  stem.bwd_time = 2 * stem.fwd_time;
  chain.stages.push_back(Stage{"stem", {stem}});

  const int blocks[4] = {3, 4, 6, 3};
  std::int64_t channels = 64, size = quarter;
  for (int s = 0; s < 4; ++s) {
    const std::int64_t mid = 64 << s, out = 4 * mid;
    for (int b = 0; b < blocks[s]; ++b) {
      const std::int64_t stride = (b == 0 && s > 0) ? 2 : 1;
      const std::int64_t out_size = size / stride;
      const bool downsample = b == 0;
      const std::int64_t e1 = batch * mid * size * size;          // after conv1
      const std::int64_t e2 = batch * mid * out_size * out_size;  // after conv2
      const std::int64_t e3 = batch * out * out_size * out_size;  // after conv3
      const double hw = static_cast<double>(size * size),
                   ohw = static_cast<double>(out_size * out_size);
      double flops = 2 * n * hw * static_cast<double>(channels * mid) +
                     2 * n * ohw * static_cast<double>(mid * mid * 9) +
                     2 * n * ohw * static_cast<double>(mid * out);
      if (downsample) flops += 2 * n * ohw * static_cast<double>(channels * out);
      const std::int64_t tensors = 2 * e1 + 2 * e2 + e3 + (downsample ? e3 : 0);
      VariantCosts block;
      block.out_bytes = e3 * kHalf;
      // conv and ReLU outputs of the first two convs, the third conv's output, the shortcut
      // conv's output, and the final ReLU's mask.
      block.saved_bytes = tensors * kHalf + e3;
      const std::int64_t workspace = e2 * kHalf;  // the 3x3 conv's fastest algorithm
      block.fwd_peak = e3 * kHalf + workspace;
      block.bwd_peak = 2 * e3 * kHalf + workspace;
      block.fwd_time = matmul_time(flops) + pass_time(static_cast<double>(3 * tensors * kHalf));
      block.bwd_time = matmul_time(2 * flops) + pass_time(static_cast<double>(6 * tensors * kHalf));
      // In-place ABN keeps the BatchNorm-ReLU outputs only: not the two conv outputs before them.
      VariantCosts abn = scaled(block, "inplace_abn", 1.0, 1.03, 1.10);
      abn.saved_bytes = block.saved_bytes - (e1 + e2) * kHalf;
      VariantCosts low = scaled(block, "low_workspace", 1.0, 1.10, 1.15);
      low.fwd_peak = e3 * kHalf;
      low.bwd_peak = 2 * e3 * kHalf;
      chain.stages.push_back(
          Stage{"stage" + std::to_string(s + 1) + ".block" + std::to_string(b), {block, abn, low}});
      channels = out;
      size = out_size;
    }
  }

  VariantCosts head;
  head.out_bytes = batch * 4;                                  // the loss per sample, fp32
  head.saved_bytes = batch * 2048 * kHalf + batch * 1000 * 4;  // pooled features, softmax
  head.fwd_peak = batch * 1000 * 4;
  head.bwd_peak = batch * 2048 * size * size * kHalf;  // the gradient spread over the last map
  head.fwd_time = matmul_time(2 * n * 2048 * 1000) +
                  pass_time(static_cast<double>(batch * 2048 * size * size * kHalf));
  head.bwd_time = 2 * head.fwd_time;
  chain.stages.push_back(Stage{"head", {head}});
  return chain;
}

Chain bert_stack_chain(int layers) {
  const Chain bert = bert_base_chain(32, 128);
  Chain chain;
  chain.fixed_bytes = bert.fixed_bytes * layers / 12;
  chain.stages.push_back(bert.stages.front());
  for (int l = 0; l < layers; ++l) {
    for (int k = 1; k <= 2; ++k) {
      Stage stage = bert.stages[k];
      stage.name = "layer" + std::to_string(l) + (k == 1 ? ".attention" : ".ffn");
      chain.stages.push_back(stage);
    }
  }
  chain.stages.push_back(bert.stages.back());
  return chain;
}

Chain chain_summing_past_the_limit() {
  Chain chain;
  for (int i = 0; i < 2047; ++i) {
    VariantCosts v;
    v.out_bytes = v.saved_bytes = kMaxChainBytes;
    chain.stages.push_back(Stage{"s" + std::to_string(i), {v}, kMaxChainBytes});
  }
  return chain;
}

}  // namespace monet::testing
