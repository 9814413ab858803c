// The 1-bit masks and regenerating dropout's counter-based draw, against plain ATen references.
#include "kernels/bit_pack.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/catalogue.h"
#include "kernels/counter_rng.h"

namespace monet::kernels {
namespace {

// Sizes around word boundaries, and one large enough to run in parallel tasks.
const std::int64_t kSizes[] = {1, 31, 32, 33, 64, 1000, 300007};

// ReLU's mask: where torch's ReLU backward (result <= 0 ? 0 : grad) passes the gradient.
at::Tensor relu_bits(const at::Tensor& t) { return t.le(0).logical_not(); }

TEST(BitPackTest, PackReluMaskMatchesReference) {
  for (std::int64_t n : kSizes) {
    at::Tensor t = at::randn({n});
    at::Tensor mask = pack_relu_mask(t);
    EXPECT_EQ(mask.numel(), (n + 31) / 32);
    EXPECT_TRUE(at::equal(mask, pack_bool_reference(relu_bits(t)))) << n;
    EXPECT_TRUE(at::equal(unpack_bool_reference(mask, n), relu_bits(t))) << n;
  }
}

// Every floating dtype the masks take: the loops run 16 bytes of elements at a time (8 halves or
// bfloat16s, 4 floats, 2 doubles) in every full word, and one at a time in a partial last word.
const at::ScalarType kDtypes[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

// The tensor's bits as integers of its width, so that NaNs and zeros' signs compare too.
at::Tensor bits_of(const at::Tensor& t) {
  switch (t.element_size()) {
    case 2:
      return t.view(at::kShort);
    case 4:
      return t.view(at::kInt);
    default:
      return t.view(at::kLong);
  }
}

TEST(BitPackTest, PackReluMaskMatchesReferenceInEveryDtype) {
  for (at::ScalarType dtype : kDtypes) {
    for (std::int64_t n : kSizes) {
      at::Tensor t = at::randn({n}).to(dtype);
      EXPECT_TRUE(at::equal(pack_relu_mask(t), pack_bool_reference(relu_bits(t))))
          << dtype << " " << n;
    }
  }
}

// torch's ReLU backward passes the gradient where its output is NaN (NaN <= 0 is false) and drops
// it at either zero: the mask's bit is 1 for NaN, as the loops (16 bytes at a time in a full word,
// one at a time in a partial one) and the ATen form both pack it.
TEST(BitPackTest, ReluMaskFollowsTorchsRuleAtNanAndZeros) {
  const float inf = std::numeric_limits<float>::infinity();
  for (at::ScalarType dtype : kDtypes) {
    // 40 elements: one full word and a partial one.
    at::Tensor t = at::tensor({1.0f, std::nanf(""), -1.0f, 0.0f, -0.0f, inf, -inf, -std::nanf("")})
                       .repeat({5})
                       .to(dtype);
    const at::Tensor want = at::tensor({1, 1, 0, 0, 0, 1, 0, 1}).repeat({5}).to(at::kBool);
    EXPECT_TRUE(at::equal(unpack_bool_reference(pack_relu_mask(t), t.numel()), want)) << dtype;
    EXPECT_TRUE(at::equal(unpack_bool_reference(pack_relu_mask_aten(t), t.numel()), want)) << dtype;
  }
}

// Doubles compare as doubles in the partial last word too: 1e-300 is positive and nonzero, where
// as a float it would be 0.
TEST(BitPackTest, DoublesBelowFloatsRangeCountInEveryWord) {
  for (double v : {1e-300, -1e-300}) {
    const at::Tensor t = at::full({33}, v, at::kDouble);  // a full word and one more element
    EXPECT_TRUE(at::equal(unpack_bool_reference(pack_relu_mask(t), 33), relu_bits(t))) << v;
    EXPECT_TRUE(at::equal(unpack_bool_reference(pack_nonzero(t), 33), t != 0)) << v;
  }
}

TEST(BitPackTest, PackNonzeroMatchesReferenceInEveryDtype) {
  for (at::ScalarType dtype : kDtypes) {
    for (std::int64_t n : kSizes) {
      // Negative zeros are zero.
      at::Tensor t = (at::randint(0, 2, {n}) * at::randn({n}).sign()).to(dtype);
      EXPECT_TRUE(at::equal(pack_nonzero(t), pack_bool_reference(t != 0))) << dtype << " " << n;
    }
  }
}

TEST(BitPackTest, SelectAndUnpackFollowTheBitsInEveryDtype) {
  for (at::ScalarType dtype : kDtypes) {
    for (std::int64_t n : kSizes) {
      at::Tensor keep = at::rand({n}) > 0.5;
      at::Tensor mask = pack_bool_reference(keep);
      at::Tensor grad = at::randn({n}).to(dtype);
      EXPECT_TRUE(
          at::equal(select_by_mask(grad, mask), at::where(keep, grad, at::zeros_like(grad))))
          << dtype << " " << n;
      EXPECT_TRUE(at::equal(mask_to_values(mask, grad), keep.to(dtype))) << dtype << " " << n;
    }
  }
}

TEST(BitPackTest, SelectKeepsEveryValueBitForBitAndDropsToPositiveZero) {
  const double inf = std::numeric_limits<double>::infinity();
  for (at::ScalarType dtype : kDtypes) {
    // 40 elements: one full word and a partial one.
    at::Tensor grad =
        at::tensor({std::nan(""), -0.0, inf, -inf, 1e-310, -2.5, 0.0, 3.0}, at::kDouble)
            .repeat({5})
            .to(dtype);
    at::Tensor keep = at::arange(40) % 3 != 1;
    at::Tensor out = select_by_mask(grad, pack_bool_reference(keep));
    EXPECT_TRUE(at::equal(bits_of(out).masked_select(keep), bits_of(grad).masked_select(keep)))
        << dtype;
    EXPECT_TRUE(at::equal(bits_of(out).masked_select(~keep),
                          at::zeros({(~keep).sum().item<std::int64_t>()}, bits_of(out).options())))
        << dtype;
  }
}

// Dropout's one-pass masking against torch's own steps (noise of 0 and 1, divided by keep, times
// x), bitwise, for special values, sizes around words and every dtype (half and bfloat16 take
// torch's steps themselves).
TEST(BitPackTest, ScaleByMaskIsTorchsNoiseTimesXBitForBit) {
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor specials =
      at::tensor({std::nan(""), -0.0, inf, -inf, 1e-310, -2.5, 0.0, 3.0}, at::kDouble);
  for (at::ScalarType dtype : kDtypes) {
    for (std::int64_t n : kSizes) {
      at::Tensor x = at::randn({n}, at::kDouble);
      x.narrow(0, 0, std::min<std::int64_t>(n, 8))
          .copy_(specials.narrow(0, 0, std::min<std::int64_t>(n, 8)));
      x = x.to(dtype);
      const at::Tensor keep = at::rand({n}) > 0.3;
      const at::Tensor mask = pack_bool_reference(keep);
      for (double kept : {0.7, 0.9, 1.0 / 3.0}) {
        at::Tensor noise = keep.to(dtype);
        noise.div_(kept);
        EXPECT_TRUE(at::equal(bits_of(scale_by_mask(x, mask, kept)), bits_of(x * noise)))
            << dtype << " " << n << " " << kept;
      }
    }
  }
}

TEST(BitPackTest, SelectKeepsTheShapeOfNonContiguousGrads) {
  at::Tensor grad = at::randn({6, 10}).t();  // 10 x 6, not contiguous
  at::Tensor keep = at::rand({10, 6}) > 0.3;
  at::Tensor out = select_by_mask(grad, pack_bool_reference(keep));
  EXPECT_EQ(out.sizes(), grad.sizes());
  EXPECT_TRUE(at::equal(out, at::where(keep, grad, at::zeros_like(grad))));
}

// The ATen forms (what CUDA data other than float32 runs: a half-precision model, autocast's
// activations) give the loops' masks and values, on the CPU, in every floating dtype. Dropout's
// scaling: in float32 and float64 torch's dropout backward (native_dropout_backward) bit for bit;
// in half and bfloat16 within two roundings of the exact product. How torch's CPU ops round those
// two dtypes changes between LibTorch versions (1.13 rounds the scale to the dtype before the
// product; on LibTorch 2.11 the two differed at every size here but 1): bit for bit against
// torch's own CUDA op, which is where these forms run, is `OpsCudaTest.OtherDtypesOnCuda`.
TEST(BitPackTest, AtenFormsEqualTheLoopsInEveryDtype) {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (std::int64_t n : kSizes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + std::to_string(n));
      at::Tensor t = at::randn({n}).to(dtype);
      t.index_put_({at::arange(0, n, 7)}, 0);  // zeros: in neither ReLU's mask nor nonzero
      t.masked_fill_(at::arange(n) % 11 == 3, std::nan(""));  // NaNs: in both
      const at::Tensor bits = at::rand({n}) > 0.3;
      EXPECT_TRUE(at::equal(pack_bits_aten(bits), pack_bool_reference(bits)));
      EXPECT_TRUE(at::equal(unpack_bits_aten(pack_bits_aten(bits), n), bits));
      EXPECT_TRUE(at::equal(pack_relu_mask_aten(t), pack_relu_mask(t)));
      EXPECT_TRUE(at::equal(pack_nonzero_aten(t), pack_nonzero(t)));
      const at::Tensor mask = pack_bool_reference(bits);
      const at::Tensor grad = at::randn({n}).to(dtype).view({1, n});
      EXPECT_TRUE(at::equal(select_by_mask_aten(grad, mask), select_by_mask(grad, mask)));
      EXPECT_TRUE(at::equal(mask_to_values_aten(mask, grad), mask_to_values(mask, grad)));
      const double keep = 0.7;
      const at::Tensor scaled = scale_by_mask_aten(grad, mask, keep);
      ASSERT_EQ(scaled.scalar_type(), dtype);
      if (dtype == at::kFloat || dtype == at::kDouble) {
        EXPECT_TRUE(
            at::equal(scaled, at::native_dropout_backward(grad, bits.view({1, n}), 1.0 / keep)));
      } else {
        // Two roundings at most (1.13 rounds the scale to the dtype, then the product), and the
        // spacing of half's subnormals, where randn's smallest values fall.
        const at::Tensor exact = grad.to(at::kDouble) * bits.view({1, n}) / keep;
        const double eps = dtype == at::kHalf ? 0x1p-10 : 0x1p-7;  // the dtype's machine epsilon
        const double spacing = dtype == at::kHalf ? 0x1p-24 : 0x1p-133;
        EXPECT_TRUE((scaled.to(at::kDouble) - exact)
                        .abs()
                        .le(exact.abs() * (2 * eps) + spacing)
                        .all()
                        .item<bool>());
      }
    }
  }
}

TEST(BitPackTest, DropoutMaskIsAFunctionOfItsKey) {
  const std::int64_t n = 1 << 20;
  at::Tensor a = dropout_keep_mask(42, 0, n, 0.3, at::TensorOptions());
  at::Tensor b = dropout_keep_mask(42, 0, n, 0.3, at::TensorOptions());
  at::Tensor c = dropout_keep_mask(43, 0, n, 0.3, at::TensorOptions());
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(at::equal(a, c));
  // An offset shifts the stream: element i of offset 64 is element i + 64 of offset 0.
  at::Tensor shifted = dropout_keep_mask(42, 64, n - 64, 0.3, at::TensorOptions());
  EXPECT_TRUE(at::equal(unpack_bool_reference(shifted, n - 64),
                        unpack_bool_reference(a, n).narrow(0, 64, n - 64)));
  const double kept = unpack_bool_reference(a, n).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 0.7, 0.003);  // about 6 standard deviations at 2^20 draws
}

TEST(BitPackTest, DropThresholdEnds) {
  EXPECT_EQ(drop_threshold(0.0), 0u);
  EXPECT_EQ(drop_threshold(1.0), std::uint64_t{1} << 32);
  EXPECT_EQ(drop_threshold(0.5), std::uint64_t{1} << 31);
}

TEST(CatalogueTest, EveryOpHasEveryMode) {
  for (std::string_view op :
       {"relu", "dropout", "batch_norm", "batch_norm_relu", "batch_norm_relu_conv2d",
        "batch_norm_relu_conv2d_batch_norm", "max_pool2d", "gelu", "softmax"}) {
    for (OpMode mode :
         {OpMode::kDefault, OpMode::kCompact, OpMode::kRecompute, OpMode::kRegenerate}) {
      const VariantEntry* entry = find_variant(op, mode);
      ASSERT_NE(entry, nullptr) << op << " " << op_mode_name(mode);
      EXPECT_LE(entry->kept_bytes, entry->reference_bytes) << op;
      if (mode == OpMode::kDefault) {
        EXPECT_EQ(entry->kept_bytes, entry->reference_bytes) << op;
      }
    }
  }
  EXPECT_EQ(find_variant("layer_norm", OpMode::kCompact), nullptr);
  EXPECT_EQ(find_variant("layer_norm", OpMode::kRecompute), nullptr);
  // Recompute differs from compact only where an op recomputes.
  EXPECT_EQ(find_variant("relu", OpMode::kRecompute), find_variant("relu", OpMode::kCompact));
  EXPECT_LT(find_variant("batch_norm_relu_conv2d_batch_norm", OpMode::kRecompute)->kept_bytes,
            find_variant("batch_norm_relu_conv2d_batch_norm", OpMode::kCompact)->kept_bytes);
}

}  // namespace
}  // namespace monet::kernels
