// The ResNet-style CNN workload: a stem (conv, BatchNorm, ReLU as separate stages), stages of
// basic residual blocks with 2x2 max pooling between them, and a classifier, on images whose size
// changes from batch to batch.
#include <ATen/CPUGeneratorImpl.h>

#include "monet/errors.h"
#include "monet/nn.h"
#include "workloads/workloads.h"

namespace monet::workloads {
namespace {

torch::nn::Conv2dOptions conv_options(std::int64_t in, std::int64_t out, std::int64_t k,
                                      std::int64_t stride) {
  // Odd kernels keep the size (stride 1); the stem's 4x4 of stride 4 tiles the image.
  return torch::nn::Conv2dOptions(in, out, k)
      .stride(stride)
      .padding(k % 2 == 1 ? k / 2 : 0)
      .bias(false);
}

torch::nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t stride) {
  return torch::nn::Conv2d(conv_options(in, out, k, stride));
}

// conv-BN-ReLU, conv-BN, plus the shortcut (a 1x1 conv and BN when it downsamples), ReLU. The
// first BatchNorm, its ReLU, the second convolution and the second BatchNorm are one op, which
// under a variant keeps two tensors (compact) or one (recompute) for backward where torch's keep
// three.
struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1(conv(in, out, 3, stride)),
        middle(torch::nn::BatchNormOptions(out), conv_options(out, out, 3, 1),
               torch::nn::BatchNormOptions(out)) {
    register_module("conv1", conv1);
    register_module("middle", middle);
    if (stride != 1 || in != out) {
      down = register_module("down", conv(in, out, 1, stride));
      down_bn =
          register_module("down_bn", monet::nn::BatchNorm2d(torch::nn::BatchNormOptions(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto y = middle(conv1(x));
    const auto shortcut = down ? down_bn(down(x)) : x;
    // torch's ReLU in every mode: it keeps its output, the block's, which the next stage holds
    // anyway (as its input, or a segment's); a 1-bit mask would only add bytes and time.
    return torch::relu(y + shortcut);
  }
  torch::nn::Conv2d conv1;
  monet::nn::BatchNorm2dReLUConv2dBatchNorm2d middle;
  torch::nn::Conv2d down{nullptr};
  monet::nn::BatchNorm2d down_bn{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl(std::int64_t in, std::int64_t classes) : fc(in, classes) {
    register_module("fc", fc);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x.mean({2, 3})); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Classifier);

class ResNetWorkload : public Workload {
 public:
  explicit ResNetWorkload(ResNetConfig c) : c_(std::move(c)) {
    if (c_.widths.empty() || c_.sides.empty()) {
      throw ConfigError("the resnet workload needs at least one stage width and one image size");
    }
  }
  std::string name() const override { return "resnet"; }

  torch::nn::Sequential make_model(std::uint64_t seed) const override {
    torch::manual_seed(seed);
    torch::nn::Sequential model;
    // The stem as torch::nn modules (the runtime substitutes lean variants for them): a 4x4
    // convolution of stride 4 (a patchify stem, as in ConvNeXt), so that the first stage's
    // blocks rather than a full-resolution stem hold most of the activations, as in ResNet-50.
    model->push_back(conv(3, c_.widths[0], 4, 4));
    model->push_back(torch::nn::BatchNorm2d(c_.widths[0]));
    model->push_back(torch::nn::ReLU());
    std::int64_t in = c_.widths[0];
    for (std::size_t s = 0; s < c_.widths.size(); ++s) {
      // Between stages, 2x2 max pooling halves the resolution (a stage of its own).
      if (s > 0) model->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
      for (int b = 0; b < c_.blocks_per_stage; ++b) {
        model->push_back(BasicBlock(in, c_.widths[s], 1));
        in = c_.widths[s];
      }
    }
    model->push_back(Classifier(in, c_.classes));
    return model;
  }

  torch::Tensor loss(const torch::Tensor& output, const Batch& batch) const override {
    return torch::nn::functional::cross_entropy(output, batch.targets);
  }

  Batch batch(std::uint64_t seed, std::int64_t i) const override {
    std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(i));
    const auto side =
        c_.sides[std::uniform_int_distribution<std::size_t>(0, c_.sides.size() - 1)(rng)];
    return make(side, rng());
  }

  Batch largest_batch() const override {
    return make(*std::max_element(c_.sides.begin(), c_.sides.end()), 7);
  }

  std::string shape_of(const Batch& b) const override {
    return std::to_string(b.input.size(0)) + "x" + std::to_string(b.input.size(2)) + "x" +
           std::to_string(b.input.size(3));
  }

 private:
  Batch make(std::int64_t side, std::uint64_t seed) const {
    auto gen = at::detail::createCPUGenerator(seed);
    Batch b;
    b.input = torch::randn({c_.batch, 3, side, side}, gen);
    b.targets = torch::randint(c_.classes, {c_.batch}, gen, torch::kLong);
    return b;
  }

  ResNetConfig c_;
};

}  // namespace

std::unique_ptr<Workload> make_resnet_workload(ResNetConfig config) {
  return std::make_unique<ResNetWorkload>(std::move(config));
}

std::unique_ptr<Workload> make_workload(const std::string& name, const std::string& size) {
  if (size != "cpu" && size != "gpu") {
    throw ConfigError("unknown size '" + size + "'; use cpu or gpu");
  }
  const bool gpu = size == "gpu";
  if (name == "transformer") {
    TransformerConfig c;
    if (gpu) {
      c.vocab = 30522;
      c.d_model = 768;
      c.heads = 12;
      c.d_ff = 3072;
      c.layers = 12;
      c.max_seq = 512;
      c.batch = 16;
    }
    return make_transformer_workload(c);
  }
  if (name == "resnet") {
    ResNetConfig c;
    if (gpu) {
      // Deep, as on CPU: measured on the CPU, this CNN's least plan is 27% of its 5.6 GiB
      // peak, where ResNet-18's widths and depth (64 to 512, 2 blocks per stage) need all of it.
      c.widths = {64, 128, 256};
      c.blocks_per_stage = 12;
      c.classes = 1000;
      c.batch = 64;
      c.sides = {160, 192, 224, 256};
    }
    return make_resnet_workload(c);
  }
  throw ConfigError("unknown model '" + name + "'; use transformer or resnet");
}

}  // namespace monet::workloads
