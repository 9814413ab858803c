// monet::nn modules against torch::nn's, and substitute_variants: shared parameters and buffers,
// BatchNorm2d + ReLU (+ Conv2d) fusion, untouched modules, and small CNNs that train the same.
#include "monet/nn.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "monet/op_mode.h"

namespace monet {
namespace {

namespace tnn = torch::nn;

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

tnn::Sequential small_cnn() {
  tnn::Sequential net(tnn::Conv2d(tnn::Conv2dOptions(3, 8, 3).padding(1)), tnn::BatchNorm2d(8),
                      tnn::ReLU(), tnn::MaxPool2d(tnn::MaxPool2dOptions(2)),
                      tnn::Conv2d(tnn::Conv2dOptions(8, 8, 3).padding(1)), tnn::BatchNorm2d(8),
                      tnn::GELU(), tnn::Dropout(0.2), tnn::Flatten(), tnn::Linear(8 * 4 * 4, 10),
                      tnn::Softmax(1));
  net->to(torch::kDouble);
  return net;
}

TEST(NnTest, SubstitutionSharesParametersAndFusesBatchNormRelu) {
  tnn::Sequential net = small_cnn();
  tnn::Sequential sub = nn::substitute_variants(net);
  ASSERT_EQ(sub->size(), net->size() - 1);  // BatchNorm2d + ReLU fused into one
  EXPECT_TRUE(sub[1]->as<nn::BatchNorm2dReLU>() != nullptr);
  EXPECT_TRUE(sub[2]->as<nn::MaxPool2d>() != nullptr);
  EXPECT_TRUE(sub[4]->as<nn::BatchNorm2d>() != nullptr);
  EXPECT_TRUE(sub[5]->as<nn::GELU>() != nullptr);
  EXPECT_TRUE(sub[6]->as<nn::Dropout>() != nullptr);
  EXPECT_TRUE(sub[9]->as<nn::Softmax>() != nullptr);
  EXPECT_EQ(sub->ptr(0).get(), net->ptr(0).get()) << "a convolution stays the same object";
  EXPECT_EQ(sub->named_children().keys()[1], "1");
  // The same tensors, not copies.
  const auto mine = sub->named_parameters();
  const auto theirs = net->named_parameters();
  ASSERT_EQ(mine.size(), theirs.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    EXPECT_TRUE(mine[i].value().is_same(theirs[i].value())) << theirs[i].key();
  }
  const auto buffers = sub->buffers();
  ASSERT_EQ(buffers.size(), net->buffers().size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_TRUE(buffers[i].is_same(net->buffers()[i]));
  }
}

TEST(NnTest, SubstitutedNetTrainsAsTheOriginal) {
  torch::manual_seed(0);
  tnn::Sequential reference = small_cnn();
  tnn::Sequential original = small_cnn();
  // The same starting weights in both.
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < reference->parameters().size(); ++i) {
      original->parameters()[i].copy_(reference->parameters()[i]);
    }
  }
  tnn::Sequential sub = nn::substitute_variants(original);
  const torch::Tensor x = torch::randn({4, 3, 8, 8}, torch::dtype(torch::kDouble));
  for (OpMode mode : {OpMode::kDefault, OpMode::kCompact, OpMode::kRegenerate}) {
    for (tnn::Sequential net : {reference, original}) net->zero_grad();
    torch::manual_seed(1);
    torch::Tensor want = reference->forward(x);
    torch::Tensor got;
    torch::manual_seed(1);
    {
      OpModeScope scope(mode);
      got = sub->forward(x);
    }
    if (mode != OpMode::kRegenerate) {  // regenerate draws a different dropout mask than torch's
      EXPECT_LE(max_diff(got, want), 1e-12) << op_mode_name(mode);
      (want * want).sum().backward();
      (got * got).sum().backward();
      for (std::size_t i = 0; i < reference->parameters().size(); ++i) {
        EXPECT_LE(max_diff(original->parameters()[i].grad(), reference->parameters()[i].grad()),
                  1e-10)
            << op_mode_name(mode) << " parameter " << i;
      }
    } else {
      (got * got).sum().backward();
      EXPECT_TRUE(original->parameters()[0].grad().defined());
    }
  }
  // The original's BatchNorm running statistics moved with every substituted forward: 3 batches.
  EXPECT_EQ(original[1]->as<tnn::BatchNorm2d>()->num_batches_tracked.item<std::int64_t>(), 3);
  EXPECT_LE(max_diff(original[1]->as<tnn::BatchNorm2d>()->running_mean,
                     reference[1]->as<tnn::BatchNorm2d>()->running_mean),
            1e-5);  // regenerate's different dropout does not reach the first BatchNorm
}

TEST(NnTest, TrainingFlagAndEvalFollowTheOriginal) {
  tnn::Sequential net = small_cnn();
  net->eval();
  tnn::Sequential sub = nn::substitute_variants(net);
  EXPECT_FALSE(sub->is_training());
  EXPECT_FALSE(sub[1]->is_training());
  const torch::Tensor x = torch::randn({2, 3, 8, 8}, torch::dtype(torch::kDouble));
  OpModeScope scope(OpMode::kCompact);
  EXPECT_LE(max_diff(sub->forward(x), net->forward(x)), 1e-12);
}

// A module frozen in eval inside a training net stays frozen, in the substitute and in the
// user's net: substitute_variants modifies neither the flags nor the running statistics.
TEST(NnTest, SubstitutionKeepsEachModulesFlagAndLeavesTheInputAlone) {
  tnn::BatchNorm2d frozen(4);
  tnn::Dropout kept_off(0.5);
  tnn::Sequential net(frozen, tnn::ReLU(), tnn::Conv2d(tnn::Conv2dOptions(4, 4, 1)), kept_off,
                      tnn::Flatten());
  frozen->eval();
  kept_off->eval();
  tnn::Sequential sub = nn::substitute_variants(net);
  EXPECT_TRUE(sub->is_training());
  EXPECT_FALSE(sub[0]->is_training());
  EXPECT_FALSE(frozen->is_training());
  EXPECT_FALSE(kept_off->is_training());
  EXPECT_TRUE(net[2]->is_training());
  const torch::Tensor mean = frozen->running_mean.clone();
  const torch::Tensor x = torch::randn({2, 4, 3, 3}) + 3;
  OpModeScope scope(OpMode::kCompact);
  const torch::Tensor y = sub->forward(x);
  EXPECT_TRUE(torch::equal(mean, frozen->running_mean));
  EXPECT_LE(max_diff(y, net->forward(x)), 1e-5);  // the Dropout drops nothing
}

// substitute_variants_traced says which originals each module stands for, and
// follow_originals gives each part what its original has now: the training flag (a fused
// quadruple's two BatchNorms each their own), a Dropout's p, a BatchNorm's momentum and eps.
TEST(NnTest, TracedSubstitutesFollowTheirOriginalsFlags) {
  tnn::Sequential net(tnn::BatchNorm2d(2), tnn::ReLU(),
                      tnn::Conv2d(tnn::Conv2dOptions(2, 2, 3).padding(1)), tnn::BatchNorm2d(2),
                      tnn::Dropout(0.5), tnn::Flatten());
  const std::vector<tnn::AnyModule> children(net->begin(), net->end());
  const std::vector<nn::Substitution> traced = nn::substitute_variants_traced(children);
  ASSERT_EQ(traced.size(), 3u);
  EXPECT_EQ(traced[0].originals.size(), 4u);
  EXPECT_EQ(traced[0].originals[3], net->ptr(3));
  EXPECT_TRUE(traced[0].substituted());
  EXPECT_TRUE(traced[1].substituted());   // the Dropout
  EXPECT_FALSE(traced[2].substituted());  // the Flatten, itself
  auto fused = traced[0].module.get<nn::BatchNorm2dReLUConv2dBatchNorm2d>();
  net[3]->eval();
  net[4]->eval();
  for (const nn::Substitution& s : traced) nn::follow_originals(s);
  EXPECT_TRUE(fused->first->bn->is_training());
  EXPECT_FALSE(fused->second->is_training());
  EXPECT_FALSE(traced[1].module.ptr()->is_training());
  net->eval();
  net[3]->train();
  for (const nn::Substitution& s : traced) nn::follow_originals(s);
  EXPECT_FALSE(fused->first->bn->is_training());
  EXPECT_TRUE(fused->second->is_training());
  net[4]->as<tnn::Dropout>()->options.p(0.25);
  net[3]->as<tnn::BatchNorm2d>()->options.momentum(0.5).eps(1e-3);
  for (const nn::Substitution& s : traced) nn::follow_originals(s);
  EXPECT_EQ(traced[1].module.get<nn::Dropout>()->options.p(), 0.25);
  EXPECT_EQ(fused->second->options.momentum(), 0.5);
  EXPECT_EQ(fused->second->options.eps(), 1e-3);
  EXPECT_EQ(fused->first->bn->options.momentum(), 0.1);
}

TEST(NnTest, VectorOfStagesWithoutFusion) {
  std::vector<tnn::AnyModule> stages{tnn::AnyModule(tnn::BatchNorm2d(4)),
                                     tnn::AnyModule(tnn::ReLU()),
                                     tnn::AnyModule(tnn::Linear(4, 4))};
  nn::SubstituteOptions options;
  options.fuse_batch_norm_relu = false;
  auto sub = nn::substitute_variants(stages, options);
  ASSERT_EQ(sub.size(), 3u);
  EXPECT_NE(std::dynamic_pointer_cast<nn::BatchNorm2dImpl>(sub[0].ptr()), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<nn::ReLUImpl>(sub[1].ptr()), nullptr);
  EXPECT_EQ(sub[2].ptr().get(), stages[2].ptr().get());
  EXPECT_EQ(nn::substitute_variants(stages).size(), 2u);
}

// conv-BN-ReLU-conv-BN-ReLU: the first BatchNorm2d, ReLU and Conv2d fuse into one module, the
// second pair into a BatchNorm2dReLU.
tnn::Sequential conv_chain() {
  tnn::Sequential net(tnn::Conv2d(tnn::Conv2dOptions(3, 6, 3).padding(1)), tnn::BatchNorm2d(6),
                      tnn::ReLU(), tnn::Conv2d(tnn::Conv2dOptions(6, 8, 3).stride(2).padding(1)),
                      tnn::BatchNorm2d(8), tnn::ReLU(), tnn::Flatten());
  net->to(torch::kDouble);
  return net;
}

// Substitutes conv_chain() with `options`, checks the result's structure with `check`, then that
// it computes and trains as the original in every mode.
void expect_substitute_trains_as_the_original(
    const nn::SubstituteOptions& options, std::size_t size,
    const std::function<void(tnn::Sequential sub, tnn::Sequential original)>& check) {
  torch::manual_seed(4);
  tnn::Sequential reference = conv_chain();
  tnn::Sequential original = conv_chain();
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < reference->parameters().size(); ++i) {
      original->parameters()[i].copy_(reference->parameters()[i]);
    }
  }
  tnn::Sequential sub = nn::substitute_variants(original, options);
  ASSERT_EQ(sub->size(), size);
  check(sub, original);
  const auto mine = sub->parameters();
  ASSERT_EQ(mine.size(), original->parameters().size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    EXPECT_TRUE(mine[i].is_same(original->parameters()[i])) << i;
  }
  const torch::Tensor x = torch::randn({3, 3, 6, 6}, torch::dtype(torch::kDouble));
  for (OpMode mode :
       {OpMode::kDefault, OpMode::kCompact, OpMode::kRecompute, OpMode::kRegenerate}) {
    for (tnn::Sequential net : {reference, original}) net->zero_grad();
    const torch::Tensor want = reference->forward(x);
    torch::Tensor got;
    {
      OpModeScope scope(mode);
      got = sub->forward(x);
    }
    EXPECT_LE(max_diff(got, want), 1e-12) << op_mode_name(mode);
    (want * want).sum().backward();
    (got * got).sum().backward();
    for (std::size_t i = 0; i < mine.size(); ++i) {
      EXPECT_LE(max_diff(original->parameters()[i].grad(), reference->parameters()[i].grad()),
                1e-10)
          << op_mode_name(mode) << " parameter " << i;
    }
  }
  for (int bn : {1, 4}) {
    EXPECT_LE(max_diff(original[bn]->as<tnn::BatchNorm2d>()->running_var,
                       reference[bn]->as<tnn::BatchNorm2d>()->running_var),
              1e-12)
        << "BatchNorm " << bn;
  }
}

TEST(NnTest, BatchNormReluConvTriplesFuseAndTrainAsTheOriginal) {
  nn::SubstituteOptions triples;
  triples.fuse_batch_norm_relu_conv_batch_norm = false;
  expect_substitute_trains_as_the_original(
      triples, 4, [](tnn::Sequential sub, tnn::Sequential original) {
        auto fused = sub[1]->as<nn::BatchNorm2dReLUConv2d>();
        ASSERT_NE(fused, nullptr);
        EXPECT_EQ(fused->conv.ptr().get(), original->ptr(3).get()) << "the same convolution";
        EXPECT_TRUE(sub[2]->as<nn::BatchNorm2dReLU>() != nullptr);
      });
  nn::SubstituteOptions pairs_only;
  pairs_only.fuse_batch_norm_relu_conv = false;
  EXPECT_EQ(nn::substitute_variants(conv_chain(), pairs_only)->size(), 5u);
}

TEST(NnTest, BatchNormReluConvBatchNormQuadruplesFuseAndTrainAsTheOriginal) {
  // conv, [BatchNorm2d, ReLU, Conv2d, BatchNorm2d], ReLU, Flatten.
  expect_substitute_trains_as_the_original(
      {}, 4, [](tnn::Sequential sub, tnn::Sequential original) {
        auto fused = sub[1]->as<nn::BatchNorm2dReLUConv2dBatchNorm2d>();
        ASSERT_NE(fused, nullptr);
        EXPECT_EQ(fused->first->conv.ptr().get(), original->ptr(3).get()) << "the same convolution";
        EXPECT_TRUE(
            fused->second->running_mean.is_same(original[4]->as<tnn::BatchNorm2d>()->running_mean));
        EXPECT_TRUE(sub[2]->as<nn::ReLU>() != nullptr);
      });
  // A second BatchNorm of other width than the convolution's output is refused by the module.
  EXPECT_THROW(nn::BatchNorm2dReLUConv2dBatchNorm2d(tnn::BatchNorm2dOptions(2),
                                                    tnn::Conv2dOptions(2, 3, 3).padding(1),
                                                    tnn::BatchNorm2dOptions(4)),
               c10::Error);
}

// torch's BatchNorm2d checks that its own input, here the convolution's output, has more than one
// value per channel in training: a stride-2 convolution of a 2 x 2 input leaves one.
TEST(NnTest, BatchNormReluConvBatchNormChecksTheConvolutionsOutput) {
  tnn::Sequential net(tnn::BatchNorm2d(4), tnn::ReLU(),
                      tnn::Conv2d(tnn::Conv2dOptions(4, 4, 3).stride(2).padding(1)),
                      tnn::BatchNorm2d(4));
  tnn::Sequential sub = nn::substitute_variants(net);
  ASSERT_EQ(sub->size(), 1u);
  ASSERT_TRUE(sub[0]->as<nn::BatchNorm2dReLUConv2dBatchNorm2d>() != nullptr);
  const torch::Tensor one_each = torch::randn({1, 4, 2, 2}).requires_grad_();
  EXPECT_THROW(net->forward(one_each), c10::Error);
  for (OpMode mode :
       {OpMode::kDefault, OpMode::kCompact, OpMode::kRecompute, OpMode::kRegenerate}) {
    OpModeScope scope(mode);
    try {
      sub->forward(one_each);
      ADD_FAILURE() << op_mode_name(mode) << ": no error";
    } catch (const c10::Error& e) {
      EXPECT_EQ(e.msg(),
                "Expected more than 1 value per channel when training, got input size [1, 4, 1, 1]")
          << op_mode_name(mode);
    }
    // Two values per channel after the convolution: it runs, as torch's.
    EXPECT_NO_THROW(sub->forward(torch::randn({1, 4, 3, 2}).requires_grad_()))
        << op_mode_name(mode);
  }
}

// torch's BatchNorm2d trains on a batch of none (an empty output, zero gradients, the batch
// counted), and so do the substitutes, in every mode, alone and fused.
TEST(NnTest, BatchNormsTrainOnABatchOfNoneAsTorchs) {
  const auto make = [] {
    torch::manual_seed(5);
    return tnn::Sequential(tnn::BatchNorm2d(3), tnn::ReLU(),
                           tnn::Conv2d(tnn::Conv2dOptions(3, 3, 3).padding(1)), tnn::BatchNorm2d(3),
                           tnn::BatchNorm2d(3), tnn::ReLU());
  };
  const torch::Tensor none = torch::randn({0, 3, 5, 5});
  tnn::Sequential reference = make();
  const torch::Tensor want = reference->forward(none.clone().requires_grad_());
  want.sum().backward();
  for (const nn::SubstituteOptions& fusion :
       {nn::SubstituteOptions{}, nn::SubstituteOptions{true, true, false},
        nn::SubstituteOptions{true, false, false}}) {
    for (OpMode mode :
         {OpMode::kDefault, OpMode::kCompact, OpMode::kRecompute, OpMode::kRegenerate}) {
      SCOPED_TRACE(op_mode_name(mode));
      tnn::Sequential original = make();
      tnn::Sequential sub = nn::substitute_variants(original, fusion);
      torch::Tensor y;
      {
        OpModeScope scope(mode);
        ASSERT_NO_THROW(y = sub->forward(none.clone().requires_grad_()));
      }
      EXPECT_EQ(y.sizes(), want.sizes());
      ASSERT_NO_THROW(y.sum().backward());
      const auto mine = original->named_parameters();
      const auto theirs = reference->named_parameters();
      for (std::size_t i = 0; i < mine.size(); ++i) {
        ASSERT_TRUE(mine[i].value().grad().defined()) << theirs[i].key();
        EXPECT_TRUE(torch::equal(mine[i].value().grad(), theirs[i].value().grad()))
            << theirs[i].key();
      }
      const auto buffers = original->named_buffers();
      for (std::size_t i = 0; i < buffers.size(); ++i) {
        EXPECT_TRUE(torch::equal(buffers[i].value(), reference->named_buffers()[i].value()))
            << buffers[i].key();
      }
    }
  }
  // Nor does the check divide by the channels: a BatchNorm of none runs as torch's.
  const torch::Tensor no_channels = torch::randn({2, 0, 4, 4});
  nn::BatchNorm2d empty(tnn::BatchNorm2dOptions(0).affine(false));
  EXPECT_EQ(
      empty->forward(no_channels).sizes(),
      tnn::BatchNorm2d(tnn::BatchNorm2dOptions(0).affine(false))->forward(no_channels).sizes());
  // And its backward, in every mode, the output-keeping one's too: a gradient as empty as torch's.
  for (const OpMode mode : {OpMode::kDefault, OpMode::kCompact}) {
    SCOPED_TRACE(op_mode_name(mode));
    const torch::Tensor x = no_channels.clone().requires_grad_();
    {
      OpModeScope scope(mode);
      ASSERT_NO_THROW(empty->forward(x).sum().backward());
    }
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().sizes(), x.sizes());
    nn::BatchNorm2dReLU fused(tnn::BatchNorm2dOptions(0).affine(false));
    const torch::Tensor z = no_channels.clone().requires_grad_();
    {
      OpModeScope scope(mode);
      ASSERT_NO_THROW(fused->forward(z).sum().backward());
    }
    EXPECT_EQ(z.grad().sizes(), z.sizes());
  }
}

TEST(NnTest, BatchNormReluConvNeedsSymmetricZeroPadding) {
  // Reflect padding, and "same" with an even kernel (one more row below than above), stay
  // unfused, and the module itself refuses them.
  tnn::Sequential reflect(
      tnn::BatchNorm2d(2), tnn::ReLU(),
      tnn::Conv2d(tnn::Conv2dOptions(2, 2, 3).padding(1).padding_mode(torch::kReflect)));
  tnn::Sequential even_same(tnn::BatchNorm2d(2), tnn::ReLU(),
                            tnn::Conv2d(tnn::Conv2dOptions(2, 2, 2).padding(torch::kSame)));
  tnn::Sequential odd_same(tnn::BatchNorm2d(2), tnn::ReLU(),
                           tnn::Conv2d(tnn::Conv2dOptions(2, 2, 3).padding(torch::kSame)));
  EXPECT_EQ(nn::substitute_variants(reflect)->size(), 2u);
  EXPECT_EQ(nn::substitute_variants(even_same)->size(), 2u);
  EXPECT_EQ(nn::substitute_variants(odd_same)->size(), 1u);
  EXPECT_THROW(nn::BatchNorm2dReLUConv2d(
                   tnn::BatchNorm2dOptions(2),
                   tnn::Conv2dOptions(2, 2, 3).padding(1).padding_mode(torch::kReflect)),
               c10::Error);
  EXPECT_THROW(nn::BatchNorm2dReLUConv2d(tnn::BatchNorm2dOptions(3), tnn::Conv2dOptions(2, 2, 3)),
               c10::Error);
  // "same" with an odd kernel is symmetric: the fused module pads as torch's.
  torch::manual_seed(2);
  nn::BatchNorm2dReLUConv2d module(tnn::BatchNorm2dOptions(2),
                                   tnn::Conv2dOptions(2, 2, 3).padding(torch::kSame));
  const torch::Tensor x = torch::randn({2, 2, 5, 5});
  torch::Tensor want =
      torch::conv2d(torch::relu(torch::batch_norm(x, module->bn->weight, module->bn->bias, {}, {},
                                                  true, 0.1, 1e-5, false)),
                    module->conv->weight, module->conv->bias, 1, 1);
  OpModeScope scope(OpMode::kCompact);
  EXPECT_LE(max_diff(module->forward(x.requires_grad_()), want), 1e-5);
  auto cloned = std::dynamic_pointer_cast<nn::BatchNorm2dReLUConv2dImpl>(module->clone());
  ASSERT_NE(cloned, nullptr);
  EXPECT_FALSE(cloned->conv->weight.is_same(module->conv->weight));
  EXPECT_TRUE(torch::equal(cloned->conv->weight, module->conv->weight));
  EXPECT_TRUE(torch::equal(cloned->bn->running_mean, module->bn->running_mean));
}

TEST(NnTest, ModulesStandAloneMatchTorch) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 4, 6, 6});
  nn::BatchNorm2d bn(4);
  tnn::BatchNorm2d ref(4);
  OpModeScope scope(OpMode::kCompact);
  EXPECT_LE(max_diff(bn->forward(x.detach().requires_grad_()), ref->forward(x)), 1e-5);
  EXPECT_TRUE(torch::allclose(bn->running_mean, ref->running_mean));
  auto cloned = std::dynamic_pointer_cast<nn::BatchNorm2dImpl>(bn->clone());
  ASSERT_NE(cloned, nullptr);
  EXPECT_FALSE(cloned->weight.is_same(bn->weight));
  EXPECT_TRUE(torch::equal(cloned->running_mean, bn->running_mean));
  EXPECT_TRUE(torch::equal(nn::MaxPool2d(2)->forward(x), tnn::MaxPool2d(2)->forward(x)));
  EXPECT_TRUE(torch::equal(nn::Softmax(1)->forward(x), tnn::Softmax(1)->forward(x)));
  EXPECT_TRUE(torch::equal(nn::GELU()->forward(x), tnn::GELU()->forward(x)));
  EXPECT_TRUE(torch::equal(nn::ReLU()->forward(x), tnn::ReLU()->forward(x)));
}

}  // namespace
}  // namespace monet
