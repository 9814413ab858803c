// monet::nn: drop-in modules for torch::nn's ReLU, Dropout, BatchNorm2d, MaxPool2d, GELU and
// Softmax (the same options types, TORCH_MODULE holders, the same parameters and buffers), plus
// fused BatchNorm2dReLU, BatchNorm2dReLUConv2d and BatchNorm2dReLUConv2dBatchNorm2d, whose forward
// calls monet::ops (monet/ops.h): they compute what torch::nn's compute and, under a non-default
// OpMode, keep less for backward.
//
//   auto stages = monet::nn::substitute_variants(model_stages);  // shares model's parameters
//   { monet::OpModeScope scope(monet::OpMode::kCompact); y = stages[0].forward(x); }
//
// Differences from torch::nn, all deliberate:
// - ReLU and Dropout run out of place in every mode, whatever options.inplace() says: an in-place
//   op would overwrite the output that a compact BatchNorm before it keeps. Results are equal.
// - MaxPool2d has no forward_with_indices (its compact variant keeps no 64-bit indices).
// - A BatchNorm2d's output, and a BatchNorm2dReLUConv2dBatchNorm2d's in `compact` mode, must not
//   be modified in place when the mode is not `default` (`out += identity` as torchvision's
//   ResNet writes it; `out = out + identity` is fine): those variants keep their output for
//   backward, which then stops with torch's "modified by an inplace operation" error rather than
//   give wrong gradients.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/options/activation.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/options/dropout.h>
#include <torch/nn/options/pooling.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <ostream>
#include <vector>

namespace monet::nn {

// max(x, 0) (monet::ops::relu).
class ReLUImpl : public torch::nn::Cloneable<ReLUImpl> {
 public:
  explicit ReLUImpl(const torch::nn::ReLUOptions& options = {});
  torch::Tensor forward(const torch::Tensor& input);
  void reset() override {}
  void pretty_print(std::ostream& stream) const override;
  torch::nn::ReLUOptions options;
};
TORCH_MODULE(ReLU);

// Dropout with probability options.p() while training (monet::ops::dropout).
class DropoutImpl : public torch::nn::Cloneable<DropoutImpl> {
 public:
  explicit DropoutImpl(double p);
  explicit DropoutImpl(const torch::nn::DropoutOptions& options = {});
  torch::Tensor forward(const torch::Tensor& input);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;
  torch::nn::DropoutOptions options;
};
TORCH_MODULE(Dropout);

// What BatchNorm2d and BatchNorm2dReLU share: options, parameters (weight, bias: options.affine())
// and buffers (running_mean, running_var, num_batches_tracked: options.track_running_stats()),
// named and initialized as torch::nn::BatchNorm2d's.
template <typename Derived>
class BatchNorm2dBase : public torch::nn::Cloneable<Derived> {
 public:
  explicit BatchNorm2dBase(const torch::nn::BatchNorm2dOptions& options);
  // Registers `shared`'s own tensors: training this module trains `shared`, and its running
  // statistics are `shared`'s.
  explicit BatchNorm2dBase(const torch::nn::BatchNorm2dImpl& shared);
  void reset() override;
  // weight = 1, bias = 0, running statistics to their start (torch's reset_parameters()).
  void reset_parameters();
  void reset_running_stats();

  torch::nn::BatchNorm2dOptions options;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  friend class BatchNorm2dReLUConv2dImpl;  // run their BatchNorms' steps
  friend class BatchNorm2dReLUConv2dBatchNorm2dImpl;
  // Checks the input, counts a training batch and returns this step's momentum (the cumulative
  // average's 1 / batches when options.momentum() is unset), as torch::nn::BatchNorm2d does.
  double step(const torch::Tensor& input);
  // Whether the batch's statistics are used: training, or no running statistics to use.
  bool uses_batch_stats() const;

 private:
  void register_state(torch::Tensor weight, torch::Tensor bias, torch::Tensor running_mean,
                      torch::Tensor running_var, torch::Tensor num_batches_tracked, bool fresh);
};

// BatchNorm over the channels of an NCHW input (monet::ops::batch_norm).
class BatchNorm2dImpl : public BatchNorm2dBase<BatchNorm2dImpl> {
 public:
  using BatchNorm2dBase::BatchNorm2dBase;
  explicit BatchNorm2dImpl(std::int64_t num_features)
      : BatchNorm2dImpl(torch::nn::BatchNorm2dOptions(num_features)) {}
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;
};
TORCH_MODULE(BatchNorm2d);

// relu(BatchNorm2d(x)) in one op (monet::ops::batch_norm_relu): torch::nn::BatchNorm2d followed
// by torch::nn::ReLU.
class BatchNorm2dReLUImpl : public BatchNorm2dBase<BatchNorm2dReLUImpl> {
 public:
  using BatchNorm2dBase::BatchNorm2dBase;
  explicit BatchNorm2dReLUImpl(std::int64_t num_features)
      : BatchNorm2dReLUImpl(torch::nn::BatchNorm2dOptions(num_features)) {}
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;
};
TORCH_MODULE(BatchNorm2dReLU);

// relu(BatchNorm2d(x)) and then a 2-d convolution, in one op (monet::ops::batch_norm_relu_conv2d):
// torch::nn::BatchNorm2d, torch::nn::ReLU and torch::nn::Conv2d in a row, the middle of a ResNet
// basic block. Under a non-default OpMode it keeps one tensor for backward where the three torch
// modules keep two. The submodules `bn` and `conv` hold the parameters and buffers (named
// bn.weight, ..., conv.weight, conv.bias). The convolution must pad with zeros, the same amount on
// both sides of each dim (explicit padding, "valid", or "same" with odd kernels): otherwise the
// constructor throws, saying so.
class BatchNorm2dReLUConv2dImpl : public torch::nn::Cloneable<BatchNorm2dReLUConv2dImpl> {
 public:
  BatchNorm2dReLUConv2dImpl(const torch::nn::BatchNorm2dOptions& bn_options,
                            const torch::nn::Conv2dOptions& conv_options);
  // Uses these modules themselves: training this module trains them.
  BatchNorm2dReLUConv2dImpl(BatchNorm2dReLU bn, torch::nn::Conv2d conv);
  torch::Tensor forward(const torch::Tensor& input);
  void reset() override;
  // Sets this module's flag and its BatchNorm's; `conv`, which may be a user's module (the
  // constructor above, substitute_variants), keeps its own (a convolution's flag changes nothing).
  void train(bool on = true) override;
  void pretty_print(std::ostream& stream) const override;
  // Whether `conv` pads as this module can (zeros, symmetric): substitute_variants fuses only
  // such convolutions.
  static bool supports(const torch::nn::Conv2dImpl& conv);
  // The convolution's padding per dim (height, width).
  const std::vector<std::int64_t>& padding() const { return padding_; }

  BatchNorm2dReLU bn{nullptr};
  torch::nn::Conv2d conv{nullptr};

 private:
  void check_conv();
  torch::nn::BatchNorm2dOptions bn_options_;
  torch::nn::Conv2dOptions conv_options_;
  std::vector<std::int64_t> padding_;  // the convolution's, per dim
};
TORCH_MODULE(BatchNorm2dReLUConv2d);

// BatchNorm2dReLUConv2d and then a BatchNorm2d, in one op
// (monet::ops::batch_norm_relu_conv2d_batch_norm): a ResNet basic block between its first
// convolution and its residual add. torch's four modules keep three tensors for backward; under
// kCompact this keeps two, under kRecompute one (it recomputes the convolution in backward). The
// submodules `first` (first.bn, first.conv) and `second` hold the parameters and buffers; the
// convolution must pad as BatchNorm2dReLUConv2d's does, and `second` must have as many features
// as the convolution has output channels (otherwise the constructor throws, saying so).
class BatchNorm2dReLUConv2dBatchNorm2dImpl
    : public torch::nn::Cloneable<BatchNorm2dReLUConv2dBatchNorm2dImpl> {
 public:
  BatchNorm2dReLUConv2dBatchNorm2dImpl(const torch::nn::BatchNorm2dOptions& bn_options,
                                       const torch::nn::Conv2dOptions& conv_options,
                                       const torch::nn::BatchNorm2dOptions& bn2_options);
  // Uses these modules themselves: training this module trains them.
  BatchNorm2dReLUConv2dBatchNorm2dImpl(BatchNorm2dReLUConv2d first, BatchNorm2d second);
  torch::Tensor forward(const torch::Tensor& input);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  BatchNorm2dReLUConv2d first{nullptr};
  BatchNorm2d second{nullptr};

 private:
  void check();
  torch::nn::BatchNorm2dOptions bn_options_;
  torch::nn::Conv2dOptions conv_options_;
  torch::nn::BatchNorm2dOptions bn2_options_;
};
TORCH_MODULE(BatchNorm2dReLUConv2dBatchNorm2d);

// 2-d max pooling (monet::ops::max_pool2d).
class MaxPool2dImpl : public torch::nn::Cloneable<MaxPool2dImpl> {
 public:
  explicit MaxPool2dImpl(const torch::nn::MaxPool2dOptions& options);
  explicit MaxPool2dImpl(torch::ExpandingArray<2> kernel_size)
      : MaxPool2dImpl(torch::nn::MaxPool2dOptions(kernel_size)) {}
  torch::Tensor forward(const torch::Tensor& input);
  void reset() override {}
  void pretty_print(std::ostream& stream) const override;
  torch::nn::MaxPool2dOptions options;
};
TORCH_MODULE(MaxPool2d);

// GELU, exact or tanh-approximated (monet::ops::gelu).
class GELUImpl : public torch::nn::Cloneable<GELUImpl> {
 public:
  explicit GELUImpl(const torch::nn::GELUOptions& options = {});
  torch::Tensor forward(const torch::Tensor& input);
  void reset() override {}
  void pretty_print(std::ostream& stream) const override;
  torch::nn::GELUOptions options;
};
TORCH_MODULE(GELU);

// softmax along options.dim() (monet::ops::softmax).
class SoftmaxImpl : public torch::nn::Cloneable<SoftmaxImpl> {
 public:
  explicit SoftmaxImpl(std::int64_t dim);
  explicit SoftmaxImpl(const torch::nn::SoftmaxOptions& options);
  torch::Tensor forward(const torch::Tensor& input);
  void reset() override {}
  void pretty_print(std::ostream& stream) const override;
  torch::nn::SoftmaxOptions options;
};
TORCH_MODULE(Softmax);

struct SubstituteOptions {
  // Replace a torch::nn::BatchNorm2d directly followed by a torch::nn::ReLU with one
  // BatchNorm2dReLU: the result then has one module fewer than its input.
  bool fuse_batch_norm_relu = true;
  // Replace a torch::nn::BatchNorm2d, torch::nn::ReLU, torch::nn::Conv2d triple with one
  // BatchNorm2dReLUConv2d (where the convolution pads as it supports): one tensor kept for
  // backward instead of two, and two modules fewer. Needs fuse_batch_norm_relu.
  bool fuse_batch_norm_relu_conv = true;
  // Replace such a triple followed by a torch::nn::BatchNorm2d with one
  // BatchNorm2dReLUConv2dBatchNorm2d, whose kRecompute mode keeps one tensor where the four keep
  // three. Needs fuse_batch_norm_relu_conv.
  bool fuse_batch_norm_relu_conv_batch_norm = true;
};

// Variant-aware equivalents of `stages`, for the runtime: each torch::nn ReLU, Dropout,
// BatchNorm2d, MaxPool2d, GELU and Softmax becomes its monet::nn module with the same options
// and training flag, and the SAME parameter and buffer tensors (so training the result trains the
// original model, and BatchNorm updates the original's running statistics). Every other module
// is returned as is, the same object; modules inside it are not looked into (its forward calls
// them by name). The inputs are not modified. The Sequential form substitutes a Sequential's
// children into a new Sequential (same names; a fused pair, triple or quadruple takes its first
// BatchNorm's name).
std::vector<torch::nn::AnyModule> substitute_variants(
    const std::vector<torch::nn::AnyModule>& stages, const SubstituteOptions& options = {});
torch::nn::Sequential substitute_variants(const torch::nn::Sequential& net,
                                          const SubstituteOptions& options = {});

// A module of substitute_variants' result and the modules of its input it stands for: the module
// itself where it was not substituted, one original where it replaces one, the two, three or four
// of a fused pair, triple or quadruple.
struct Substitution {
  torch::nn::AnyModule module;
  std::vector<std::shared_ptr<torch::nn::Module>> originals;
  bool substituted() const { return module.ptr() != originals.front(); }
};
// substitute_variants, saying what each module stands for.
std::vector<Substitution> substitute_variants_traced(
    const std::vector<torch::nn::AnyModule>& stages, const SubstituteOptions& options = {});
// Gives each part of a substitute what the original it stands for has now: its training flag (a
// BatchNorm put in eval while the rest of the model trains, its statistics frozen as fine-tuning
// does, runs so in its substitute too, and so does a Dropout), a Dropout's p and a BatchNorm's
// momentum and eps (a schedule may change them). A fused module's BatchNorms each follow their
// own. Nothing to do where the module was not substituted.
void follow_originals(const Substitution& s);

}  // namespace monet::nn
