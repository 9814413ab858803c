// Chains of two real architectures, their stage costs computed from the layer shapes: what the
// predictor would measure, up to the device model below. Mixed-precision training: activations
// are fp16 (2 bytes), dropout and ReLU masks 1 byte per element, and fixed_bytes holds 16 bytes
// per parameter (fp32 weights, gradients and two Adam moments).
//
// Device model: matrix products at 100 TFLOP/s, element-wise passes at 1.5 TB/s. The numbers
// are a model, not a measurement; what matters to the planner is that sizes and times scale with
// the shape the way the architecture makes them.
#pragma once

#include <cstdint>

#include "monet/chain.h"

namespace monet::testing {

// BERT-base (12 layers, hidden 768, 12 heads, feed-forward 3072, 110M parameters) for sequence
// classification: embeddings, then per layer an attention stage and a feed-forward stage, then
// the pooler and classifier: 26 stages. Variants: attention "mem_efficient" (keeps no
// seq x seq tensors, recomputes them in backward) and "bitmask_dropout" (dropout masks as bits);
// feed-forward "gelu_recompute" (recomputes the GELU output in backward) and "bitmask_dropout".
Chain bert_base_chain(std::int64_t batch, std::int64_t seq_len);

// BERT-base's encoder layers (at batch 32, sequence 128) stacked `layers` deep, between its
// embeddings and its classifier: 2 * layers + 2 stages, fixed_bytes scaled by layers / 12. A long
// chain of repeated layers, as deep transformers are.
Chain bert_stack_chain(int layers);

// ResNet-50 (25.6M parameters) on batch x 3 x image x image: the stem, 16 bottleneck blocks,
// then pooling, classifier and loss: 18 stages. Variants of a bottleneck: "inplace_abn"
// (BatchNorm and ReLU fused in place, inverted in backward, so conv outputs are not kept) and
// "low_workspace" (convolution algorithms without workspace, slower).
Chain resnet50_chain(std::int64_t batch, std::int64_t image);

// 2,047 stages whose numbers are each at the limit of one number (kMaxChainBytes, 1 PiB), 3 PiB a
// stage: every number valid, their sum far past what the planners count.
Chain chain_summing_past_the_limit();

}  // namespace monet::testing
