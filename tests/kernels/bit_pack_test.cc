// The 1-bit masks and regenerating dropout's counter-based draw, against plain ATen references.
#include "kernels/bit_pack.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "kernels/catalogue.h"
#include "kernels/counter_rng.h"

namespace monet::kernels {
namespace {

// Sizes around word boundaries, and one large enough to run in parallel tasks.
const std::int64_t kSizes[] = {1, 31, 32, 33, 64, 1000, 300007};

TEST(BitPackTest, PackPositiveMatchesReference) {
  for (std::int64_t n : kSizes) {
    at::Tensor t = at::randn({n});
    at::Tensor mask = pack_positive(t);
    EXPECT_EQ(mask.numel(), (n + 31) / 32);
    EXPECT_TRUE(at::equal(mask, pack_bool_reference(t > 0))) << n;
    EXPECT_TRUE(at::equal(unpack_bool_reference(mask, n), t > 0)) << n;
  }
}

TEST(BitPackTest, NanIsNotPositive) {
  at::Tensor t = at::tensor({1.0f, std::nanf(""), -1.0f, 0.0f, -0.0f});
  at::Tensor bits = unpack_bool_reference(pack_positive(t), t.numel());
  EXPECT_TRUE(at::equal(bits, at::tensor({1, 0, 0, 0, 0}).to(at::kBool)));
}

TEST(BitPackTest, PackNonzeroMatchesReferenceInEveryDtype) {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    at::Tensor t = at::randint(0, 2, {1000}).to(dtype);
    EXPECT_TRUE(at::equal(pack_nonzero(t), pack_bool_reference(t != 0))) << dtype;
  }
}

TEST(BitPackTest, SelectAndUnpackFollowTheBits) {
  for (std::int64_t n : kSizes) {
    at::Tensor keep = at::rand({n}) > 0.5;
    at::Tensor mask = pack_bool_reference(keep);
    at::Tensor grad = at::randn({n}, at::kDouble);
    EXPECT_TRUE(at::equal(select_by_mask(grad, mask), at::where(keep, grad, at::zeros_like(grad))));
    EXPECT_TRUE(at::equal(mask_to_values(mask, grad), keep.to(at::kDouble)));
  }
}

TEST(BitPackTest, SelectKeepsTheShapeOfNonContiguousGrads) {
  at::Tensor grad = at::randn({6, 10}).t();  // 10 x 6, not contiguous
  at::Tensor keep = at::rand({10, 6}) > 0.3;
  at::Tensor out = select_by_mask(grad, pack_bool_reference(keep));
  EXPECT_EQ(out.sizes(), grad.sizes());
  EXPECT_TRUE(at::equal(out, at::where(keep, grad, at::zeros_like(grad))));
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
       {"relu", "dropout", "batch_norm", "batch_norm_relu", "max_pool2d", "gelu", "softmax"}) {
    for (OpMode mode : {OpMode::kDefault, OpMode::kCompact, OpMode::kRegenerate}) {
      const VariantEntry* entry = find_variant(op, mode);
      ASSERT_NE(entry, nullptr) << op << " " << op_mode_name(mode);
      EXPECT_LE(entry->kept_bytes, entry->reference_bytes) << op;
      if (mode == OpMode::kDefault) {
        EXPECT_EQ(entry->kept_bytes, entry->reference_bytes) << op;
      }
    }
  }
  EXPECT_EQ(find_variant("layer_norm", OpMode::kCompact), nullptr);
}

}  // namespace
}  // namespace monet::kernels
