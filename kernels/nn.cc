#include "monet/nn.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/pooling.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "monet/ops.h"

namespace monet::nn {

// --- ReLU, Dropout, MaxPool2d, GELU, Softmax ---------------------------------------------------

ReLUImpl::ReLUImpl(const torch::nn::ReLUOptions& options) : options(options) {}

torch::Tensor ReLUImpl::forward(const torch::Tensor& input) { return ops::relu(input); }

void ReLUImpl::pretty_print(std::ostream& stream) const { stream << "monet::nn::ReLU()"; }

DropoutImpl::DropoutImpl(double p) : DropoutImpl(torch::nn::DropoutOptions(p)) {}

DropoutImpl::DropoutImpl(const torch::nn::DropoutOptions& options) : options(options) { reset(); }

void DropoutImpl::reset() {
  TORCH_CHECK(options.p() >= 0. && options.p() <= 1.,
              "dropout probability has to be between 0 and 1, but got ", options.p());
}

torch::Tensor DropoutImpl::forward(const torch::Tensor& input) {
  return ops::dropout(input, options.p(), is_training());
}

void DropoutImpl::pretty_print(std::ostream& stream) const {
  stream << "monet::nn::Dropout(p=" << options.p() << ")";
}

MaxPool2dImpl::MaxPool2dImpl(const torch::nn::MaxPool2dOptions& options) : options(options) {}

torch::Tensor MaxPool2dImpl::forward(const torch::Tensor& input) {
  return ops::max_pool2d(input, options.kernel_size(), options.stride(), options.padding(),
                         options.dilation(), options.ceil_mode());
}

void MaxPool2dImpl::pretty_print(std::ostream& stream) const {
  stream << "monet::nn::MaxPool2d(kernel_size=" << options.kernel_size()
         << ", stride=" << options.stride() << ", padding=" << options.padding() << ")";
}

GELUImpl::GELUImpl(const torch::nn::GELUOptions& options) : options(options) {}

torch::Tensor GELUImpl::forward(const torch::Tensor& input) {
  return ops::gelu(input, options.approximate());
}

void GELUImpl::pretty_print(std::ostream& stream) const { stream << "monet::nn::GELU()"; }

SoftmaxImpl::SoftmaxImpl(std::int64_t dim) : SoftmaxImpl(torch::nn::SoftmaxOptions(dim)) {}

SoftmaxImpl::SoftmaxImpl(const torch::nn::SoftmaxOptions& options) : options(options) {}

torch::Tensor SoftmaxImpl::forward(const torch::Tensor& input) {
  return ops::softmax(input, options.dim());
}

void SoftmaxImpl::pretty_print(std::ostream& stream) const {
  stream << "monet::nn::Softmax(dim=" << options.dim() << ")";
}

// --- BatchNorm2d and BatchNorm2dReLU -----------------------------------------------------------

template <typename Derived>
BatchNorm2dBase<Derived>::BatchNorm2dBase(const torch::nn::BatchNorm2dOptions& options)
    : options(options) {
  reset();
}

template <typename Derived>
BatchNorm2dBase<Derived>::BatchNorm2dBase(const torch::nn::BatchNorm2dImpl& shared)
    : options(shared.options) {
  register_state(shared.weight, shared.bias, shared.running_mean, shared.running_var,
                 shared.num_batches_tracked, /*fresh=*/false);
  this->train(shared.is_training());
}

template <typename Derived>
void BatchNorm2dBase<Derived>::register_state(torch::Tensor w, torch::Tensor b, torch::Tensor mean,
                                              torch::Tensor var, torch::Tensor batches,
                                              bool fresh) {
  // Undefined tensors are registered too, under the same names, as torch::nn does. A shared
  // parameter keeps its requires_grad (registering sets it, on the shared tensor).
  const bool w_grad = w.defined() && (fresh || w.requires_grad());
  const bool b_grad = b.defined() && (fresh || b.requires_grad());
  weight = this->register_parameter("weight", std::move(w), w_grad);
  bias = this->register_parameter("bias", std::move(b), b_grad);
  running_mean = this->register_buffer("running_mean", std::move(mean));
  running_var = this->register_buffer("running_var", std::move(var));
  num_batches_tracked = this->register_buffer("num_batches_tracked", std::move(batches));
}

template <typename Derived>
void BatchNorm2dBase<Derived>::reset() {
  const std::int64_t c = options.num_features();
  const bool affine = options.affine(), tracked = options.track_running_stats();
  register_state(
      affine ? torch::empty({c}) : torch::Tensor(), affine ? torch::empty({c}) : torch::Tensor(),
      tracked ? torch::zeros({c}) : torch::Tensor(), tracked ? torch::ones({c}) : torch::Tensor(),
      tracked ? torch::tensor(0, torch::dtype(torch::kLong)) : torch::Tensor(),
      /*fresh=*/true);
  reset_parameters();
}

template <typename Derived>
void BatchNorm2dBase<Derived>::reset_running_stats() {
  if (!options.track_running_stats()) return;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

template <typename Derived>
void BatchNorm2dBase<Derived>::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  torch::nn::init::ones_(weight);
  torch::nn::init::zeros_(bias);
}

template <typename Derived>
double BatchNorm2dBase<Derived>::step(const torch::Tensor& input) {
  TORCH_CHECK(input.dim() == 4, "expected 4D input (got ", input.dim(), "D input)");
  double momentum = options.momentum().value_or(0.0);
  if (this->is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum().has_value()) {
      momentum = 1.0 / num_batches_tracked.template item<double>();
    }
  }
  if (uses_batch_stats()) {
    // torch's check, on the sizes rather than numel() / channels: a batch of none passes (the
    // op gives an empty output), and an input of no channels divides by nothing.
    const std::int64_t values = input.size(0) * input.size(2) * input.size(3);
    TORCH_CHECK(values != 1,
                "Expected more than 1 value per channel when training, got input size ",
                input.sizes());
  }
  return momentum;
}

template <typename Derived>
bool BatchNorm2dBase<Derived>::uses_batch_stats() const {
  return this->is_training() || !options.track_running_stats();
}

template class BatchNorm2dBase<BatchNorm2dImpl>;
template class BatchNorm2dBase<BatchNorm2dReLUImpl>;

torch::Tensor BatchNorm2dImpl::forward(const torch::Tensor& input) {
  const double momentum = step(input);
  return ops::batch_norm(input, weight, bias, running_mean, running_var, uses_batch_stats(),
                         momentum, options.eps());
}

void BatchNorm2dImpl::pretty_print(std::ostream& stream) const {
  stream << "monet::nn::BatchNorm2d(" << options.num_features() << ", eps=" << options.eps() << ")";
}

torch::Tensor BatchNorm2dReLUImpl::forward(const torch::Tensor& input) {
  const double momentum = step(input);
  return ops::batch_norm_relu(input, weight, bias, running_mean, running_var, uses_batch_stats(),
                              momentum, options.eps());
}

void BatchNorm2dReLUImpl::pretty_print(std::ostream& stream) const {
  stream << "monet::nn::BatchNorm2dReLU(" << options.num_features() << ", eps=" << options.eps()
         << ")";
}

// --- BatchNorm2dReLUConv2d ----------------------------------------------------------------------

namespace {

// The convolution's padding per dim (height, width), or empty when it is not zeros on both
// sides alike. The padding is a variant of explicit sizes (0), "valid" (1) and "same" (2):
// c10::variant in LibTorch 1.13, std::variant in 2.x; `get` is found by argument lookup in both.
std::vector<std::int64_t> symmetric_padding(const torch::nn::Conv2dOptions& options) {
  using std::get;
  if (torch::enumtype::get_enum_name(options.padding_mode()) != "kZeros") return {};
  switch (options.padding().index()) {
    case 0: {
      const auto& explicit_padding = get<0>(options.padding());
      return std::vector<std::int64_t>(explicit_padding->begin(), explicit_padding->end());
    }
    case 1:
      return {0, 0};
    default: {
      std::vector<std::int64_t> padding;
      for (std::size_t d = 0; d < 2; ++d) {
        const std::int64_t total = (*options.dilation())[d] * ((*options.kernel_size())[d] - 1);
        if (total % 2 != 0) return {};  // one more on one side than on the other
        padding.push_back(total / 2);
      }
      return padding;
    }
  }
}

// Conv2dOptions of a Conv2d (its `options` are the base ConvNdOptions<2>).
torch::nn::Conv2dOptions options_of(const torch::nn::Conv2dImpl& conv) {
  const auto& o = conv.options;
  return torch::nn::Conv2dOptions(o.in_channels(), o.out_channels(), o.kernel_size())
      .stride(o.stride())
      .padding(o.padding())
      .dilation(o.dilation())
      .groups(o.groups())
      .bias(o.bias())
      .padding_mode(o.padding_mode());
}

}  // namespace

BatchNorm2dReLUConv2dImpl::BatchNorm2dReLUConv2dImpl(
    const torch::nn::BatchNorm2dOptions& bn_options, const torch::nn::Conv2dOptions& conv_options)
    : bn_options_(bn_options), conv_options_(conv_options) {
  reset();
}

BatchNorm2dReLUConv2dImpl::BatchNorm2dReLUConv2dImpl(BatchNorm2dReLU bn_module,
                                                     torch::nn::Conv2d conv_module)
    : bn_options_(bn_module->options), conv_options_(options_of(*conv_module)) {
  bn = register_module("bn", std::move(bn_module));
  conv = register_module("conv", std::move(conv_module));
  check_conv();
}

void BatchNorm2dReLUConv2dImpl::train(bool on) {
  const bool conv_training = conv->is_training();
  torch::nn::Module::train(on);
  conv->train(conv_training);
}

void BatchNorm2dReLUConv2dImpl::reset() {
  // The BatchNorm first, then the convolution: their initializations draw in torch::nn's order.
  bn = register_module("bn", BatchNorm2dReLU(bn_options_));
  conv = register_module("conv", torch::nn::Conv2d(conv_options_));
  check_conv();
}

bool BatchNorm2dReLUConv2dImpl::supports(const torch::nn::Conv2dImpl& conv) {
  return !symmetric_padding(options_of(conv)).empty();
}

void BatchNorm2dReLUConv2dImpl::check_conv() {
  padding_ = symmetric_padding(conv_options_);
  TORCH_CHECK(!padding_.empty(),
              "monet::nn::BatchNorm2dReLUConv2d: the convolution must pad with zeros, the same "
              "amount on both sides of each dim (got padding mode ",
              torch::enumtype::get_enum_name(conv->options.padding_mode()),
              "); use torch::nn::Conv2d after a BatchNorm2dReLU for other paddings");
  TORCH_CHECK(bn_options_.num_features() == conv_options_.in_channels(),
              "monet::nn::BatchNorm2dReLUConv2d: the BatchNorm has ", bn_options_.num_features(),
              " features but the convolution takes ", conv_options_.in_channels(),
              " input channels; they must be equal");
}

torch::Tensor BatchNorm2dReLUConv2dImpl::forward(const torch::Tensor& input) {
  const double momentum = bn->step(input);
  return ops::batch_norm_relu_conv2d(input, bn->weight, bn->bias, bn->running_mean, bn->running_var,
                                     bn->uses_batch_stats(), momentum, bn->options.eps(),
                                     conv->weight, conv->bias, *conv->options.stride(), padding_,
                                     *conv->options.dilation(), conv->options.groups());
}

void BatchNorm2dReLUConv2dImpl::pretty_print(std::ostream& stream) const {
  stream << "monet::nn::BatchNorm2dReLUConv2d(" << bn_options_.num_features() << ", "
         << conv_options_.out_channels() << ", kernel_size=" << conv_options_.kernel_size()
         << ", stride=" << conv_options_.stride() << ")";
}

// --- BatchNorm2dReLUConv2dBatchNorm2d ----------------------------------------------------------

namespace {

// The sizes of conv's output for a 4-d `input`, with `padding` on both sides of each dim.
std::vector<std::int64_t> conv_output_sizes(const torch::Tensor& input,
                                            const torch::nn::Conv2dImpl& conv,
                                            const std::vector<std::int64_t>& padding) {
  std::vector<std::int64_t> sizes{input.size(0), conv.options.out_channels()};
  for (std::size_t d = 0; d < 2; ++d) {
    const std::int64_t extent =
        (*conv.options.dilation())[d] * ((*conv.options.kernel_size())[d] - 1) + 1;
    const std::int64_t span = input.size(2 + d) + 2 * padding[d] - extent;
    // A window longer than the padded input is the convolution's error, which it raises itself.
    sizes.push_back(span < 0 ? 0 : span / (*conv.options.stride())[d] + 1);
  }
  return sizes;
}

}  // namespace

BatchNorm2dReLUConv2dBatchNorm2dImpl::BatchNorm2dReLUConv2dBatchNorm2dImpl(
    const torch::nn::BatchNorm2dOptions& bn_options, const torch::nn::Conv2dOptions& conv_options,
    const torch::nn::BatchNorm2dOptions& bn2_options)
    : bn_options_(bn_options), conv_options_(conv_options), bn2_options_(bn2_options) {
  reset();
}

BatchNorm2dReLUConv2dBatchNorm2dImpl::BatchNorm2dReLUConv2dBatchNorm2dImpl(
    BatchNorm2dReLUConv2d first_module, BatchNorm2d second_module)
    : bn_options_(first_module->bn->options),
      conv_options_(options_of(*first_module->conv)),
      bn2_options_(second_module->options) {
  first = register_module("first", std::move(first_module));
  second = register_module("second", std::move(second_module));
  check();
}

void BatchNorm2dReLUConv2dBatchNorm2dImpl::reset() {
  // In torch::nn's order: the BatchNorm, the convolution, the second BatchNorm.
  first = register_module("first", BatchNorm2dReLUConv2d(bn_options_, conv_options_));
  second = register_module("second", BatchNorm2d(bn2_options_));
  check();
}

void BatchNorm2dReLUConv2dBatchNorm2dImpl::check() {
  TORCH_CHECK(bn2_options_.num_features() == conv_options_.out_channels(),
              "monet::nn::BatchNorm2dReLUConv2dBatchNorm2d: the convolution makes ",
              conv_options_.out_channels(), " channels but the second BatchNorm has ",
              bn2_options_.num_features(), " features; they must be equal");
}

torch::Tensor BatchNorm2dReLUConv2dBatchNorm2dImpl::forward(const torch::Tensor& input) {
  BatchNorm2dReLUImpl& bn = *first->bn;
  BatchNorm2dImpl& bn2 = *second;
  const torch::nn::Conv2dImpl& conv = *first->conv;
  if (bn.uses_batch_stats() != bn2.uses_batch_stats()) {
    // One op takes one training flag: the two ops, each with its own.
    return bn2.forward(first->forward(input));
  }
  const double momentum = bn.step(input);
  const double momentum2 = bn2.step(input);  // checks a 4-d input, counts the batch
  if (bn2.uses_batch_stats()) {
    // torch's check of the second BatchNorm's input, the convolution's output, not of `input`: a
    // strided convolution can leave one value per channel where the block's input had more.
    const std::vector<std::int64_t> sizes = conv_output_sizes(input, conv, first->padding());
    TORCH_CHECK(sizes[0] * sizes[2] * sizes[3] != 1,
                "Expected more than 1 value per channel when training, got input size ",
                torch::IntArrayRef(sizes));
  }
  const ops::BatchNormArgs args{bn.weight,      bn.bias,  bn.running_mean,
                                bn.running_var, momentum, bn.options.eps()};
  const ops::BatchNormArgs args2{bn2.weight,      bn2.bias,  bn2.running_mean,
                                 bn2.running_var, momentum2, bn2.options.eps()};
  const ops::Conv2dArgs conv_args{
      conv.weight,
      conv.bias,
      std::vector<std::int64_t>(conv.options.stride()->begin(), conv.options.stride()->end()),
      first->padding(),
      std::vector<std::int64_t>(conv.options.dilation()->begin(), conv.options.dilation()->end()),
      conv.options.groups()};
  return ops::batch_norm_relu_conv2d_batch_norm(input, args, conv_args, args2,
                                                bn.uses_batch_stats());
}

void BatchNorm2dReLUConv2dBatchNorm2dImpl::pretty_print(std::ostream& stream) const {
  stream << "monet::nn::BatchNorm2dReLUConv2dBatchNorm2d(" << bn_options_.num_features() << ", "
         << conv_options_.out_channels() << ", kernel_size=" << conv_options_.kernel_size()
         << ", stride=" << conv_options_.stride() << ")";
}

// --- substitution ------------------------------------------------------------------------------

namespace {

template <typename Impl>
std::shared_ptr<Impl> as(const torch::nn::AnyModule& module) {
  return std::dynamic_pointer_cast<Impl>(module.ptr());
}

// The module carries the original's training flag.
template <typename Holder>
torch::nn::AnyModule with_mode(Holder holder, const torch::nn::Module& original) {
  holder->train(original.is_training());
  return torch::nn::AnyModule(std::move(holder));
}

// The variant-aware module of one stage, or the stage itself.
torch::nn::AnyModule substitute_one(const torch::nn::AnyModule& stage,
                                    const SubstituteOptions& options) {
  if (auto m = as<torch::nn::ReLUImpl>(stage)) return with_mode(ReLU(m->options), *m);
  if (auto m = as<torch::nn::DropoutImpl>(stage)) return with_mode(Dropout(m->options), *m);
  if (auto m = as<torch::nn::MaxPool2dImpl>(stage)) return with_mode(MaxPool2d(m->options), *m);
  if (auto m = as<torch::nn::GELUImpl>(stage)) return with_mode(GELU(m->options), *m);
  if (auto m = as<torch::nn::SoftmaxImpl>(stage)) return with_mode(Softmax(m->options), *m);
  if (auto m = as<torch::nn::BatchNorm2dImpl>(stage)) {
    return with_mode(BatchNorm2d(std::make_shared<BatchNorm2dImpl>(*m)), *m);
  }
  return stage;
}

// Substitutes `stages`, fusing BatchNorm2d + ReLU pairs (and the triples and quadruples that
// begin with one); each result says which stages it stands for.
std::vector<Substitution> substitute_all(const std::vector<torch::nn::AnyModule>& stages,
                                         const SubstituteOptions& options) {
  std::vector<Substitution> out;
  const auto take = [&](torch::nn::AnyModule module, std::size_t first, std::size_t count) {
    Substitution s{std::move(module), {}};
    for (std::size_t k = first; k < first + count; ++k) s.originals.push_back(stages[k].ptr());
    out.push_back(std::move(s));
  };
  for (std::size_t i = 0; i < stages.size(); ++i) {
    auto bn = as<torch::nn::BatchNorm2dImpl>(stages[i]);
    if (options.fuse_batch_norm_relu && bn && i + 1 < stages.size() &&
        as<torch::nn::ReLUImpl>(stages[i + 1])) {
      BatchNorm2dReLU pair(std::make_shared<BatchNorm2dReLUImpl>(*bn));
      auto conv = i + 2 < stages.size() ? as<torch::nn::Conv2dImpl>(stages[i + 2]) : nullptr;
      if (options.fuse_batch_norm_relu_conv && conv && BatchNorm2dReLUConv2dImpl::supports(*conv) &&
          conv->options.in_channels() == bn->options.num_features()) {
        BatchNorm2dReLUConv2d triple(pair, torch::nn::Conv2d(conv));
        auto bn2 = i + 3 < stages.size() ? as<torch::nn::BatchNorm2dImpl>(stages[i + 3]) : nullptr;
        if (options.fuse_batch_norm_relu_conv_batch_norm && bn2 &&
            bn2->options.num_features() == conv->options.out_channels() &&
            bn2->is_training() == bn->is_training()) {
          BatchNorm2d second(std::make_shared<BatchNorm2dImpl>(*bn2));
          take(with_mode(BatchNorm2dReLUConv2dBatchNorm2d(std::move(triple), std::move(second)),
                         *bn),
               i, 4);
          i += 3;
          continue;
        }
        take(with_mode(std::move(triple), *bn), i, 3);
        i += 2;
        continue;
      }
      take(with_mode(std::move(pair), *bn), i, 2);
      ++i;
      continue;
    }
    take(substitute_one(stages[i], options), i, 1);
  }
  return out;
}

std::vector<torch::nn::AnyModule> modules_of(const std::vector<Substitution>& substitutions) {
  std::vector<torch::nn::AnyModule> out;
  for (const Substitution& s : substitutions) out.push_back(s.module);
  return out;
}

}  // namespace

std::vector<torch::nn::AnyModule> substitute_variants(
    const std::vector<torch::nn::AnyModule>& stages, const SubstituteOptions& options) {
  return modules_of(substitute_all(stages, options));
}

std::vector<Substitution> substitute_variants_traced(
    const std::vector<torch::nn::AnyModule>& stages, const SubstituteOptions& options) {
  return substitute_all(stages, options);
}

torch::nn::Sequential substitute_variants(const torch::nn::Sequential& net,
                                          const SubstituteOptions& options) {
  const std::vector<torch::nn::AnyModule> children(net->begin(), net->end());
  const std::vector<std::string> names = net->named_children().keys();
  torch::nn::Sequential out;
  // The container's own flag, set while it is empty: train() recurses, and would otherwise set
  // every child's flag (a BatchNorm frozen in eval, the user's own modules kept as they are).
  out->train(net->is_training());
  std::size_t i = 0;  // the first child each result stands for, whose name it takes
  for (const Substitution& s : substitute_all(children, options)) {
    out->push_back(names[i], s.module);
    i += s.originals.size();
  }
  return out;
}

namespace {

// A BatchNorm's momentum and eps, as the user's module has them now.
void follow_batch_norm_options(torch::nn::BatchNorm2dOptions* ours,
                               const std::shared_ptr<torch::nn::Module>& original) {
  if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(original)) {
    ours->momentum(bn->options.momentum());
    ours->eps(bn->options.eps());
  }
}

}  // namespace

void follow_originals(const Substitution& s) {
  if (!s.substituted()) return;
  const std::shared_ptr<torch::nn::Module>& module = s.module.ptr();
  const std::shared_ptr<torch::nn::Module>& first = s.originals.front();
  // A fused module takes its first BatchNorm's flag; a quadruple's second BatchNorm its own.
  const bool training = first->is_training();
  if (module->is_training() != training) module->train(training);
  if (auto dropout = std::dynamic_pointer_cast<DropoutImpl>(module)) {
    if (auto theirs = std::dynamic_pointer_cast<torch::nn::DropoutImpl>(first)) {
      dropout->options.p(theirs->options.p());
    }
  } else if (auto bn = std::dynamic_pointer_cast<BatchNorm2dImpl>(module)) {
    follow_batch_norm_options(&bn->options, first);
  } else if (auto pair = std::dynamic_pointer_cast<BatchNorm2dReLUImpl>(module)) {
    follow_batch_norm_options(&pair->options, first);
  } else if (auto triple = std::dynamic_pointer_cast<BatchNorm2dReLUConv2dImpl>(module)) {
    follow_batch_norm_options(&triple->bn->options, first);
  } else if (auto quadruple =
                 std::dynamic_pointer_cast<BatchNorm2dReLUConv2dBatchNorm2dImpl>(module)) {
    follow_batch_norm_options(&quadruple->first->bn->options, first);
    follow_batch_norm_options(&quadruple->second->options, s.originals.back());
    const bool second = s.originals.back()->is_training();
    if (quadruple->second->is_training() != second) quadruple->second->train(second);
  }
}

}  // namespace monet::nn
