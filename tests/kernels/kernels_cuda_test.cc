// monet's CUDA kernels (kernels/cuda/launchers.h) on cudaMalloc'd memory against host references.
// Every test skips where cudaGetDeviceCount fails or finds no device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/counter_rng.h"
#include "kernels/cuda/launchers.h"

namespace monet::cuda {
namespace {

bool have_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device"

// A device buffer of n T's, copied from and to host vectors.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<std::size_t>(1, n) * sizeof(T)), cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() { return static_cast<T*>(ptr_); }
  std::vector<T> to_host() {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t n_;
};

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

bool bit(const std::vector<std::uint32_t>& mask, std::size_t i) {
  return (mask[i / 32] >> (i % 32)) & 1u;
}

// ReLU's mask bit for output (or input) v: where torch's ReLU backward (result <= 0 ? 0 : grad)
// passes the gradient, NaN included.
bool relu_bit(float v) { return !(v <= 0.0f); }

// Sizes around a word (32 elements), a thread's four and a warp's 128, and large.
const std::int64_t kSizes[] = {1, 3, 5, 31, 32, 33, 127, 128, 129, 1000, 4099, (1 << 20) + 3};

TEST(KernelsCudaTest, ReluPackAndMaskSelect) {
  SKIP_WITHOUT_DEVICE();
  for (std::int64_t n : kSizes) {
    std::vector<float> x = random_floats(n, 1);
    x[0] = std::nanf("");
    std::vector<float> g = random_floats(n, 2);
    DeviceBuffer<float> dx(x), dy(n), dg(g), dgx(n);
    DeviceBuffer<std::uint32_t> mask(mask_words(n));
    launch_relu_pack(dx.get(), dy.get(), mask.get(), n, nullptr);
    launch_mask_select(dg.get(), mask.get(), dgx.get(), n, nullptr);
    const auto y = dy.to_host();
    const auto m = mask.to_host();
    const auto gx = dgx.to_host();
    for (std::int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) {
        ASSERT_TRUE(std::isnan(y[i]));
      } else {
        ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f) << i;
      }
      ASSERT_EQ(bit(m, i), relu_bit(x[i])) << i;
      ASSERT_EQ(gx[i], relu_bit(x[i]) ? g[i] : 0.0f) << i;
    }
  }
}

TEST(KernelsCudaTest, PackNonzeroReluMaskAndUnpack) {
  SKIP_WITHOUT_DEVICE();
  for (std::int64_t n : kSizes) {
    std::vector<float> t = random_floats(n, 3);
    for (float& v : t) v = v > 0.3f ? 0.0f : v;
    t[0] = std::nanf("");  // nonzero, and in ReLU's mask
    DeviceBuffer<float> dt(t), out(n);
    DeviceBuffer<std::uint32_t> mask(mask_words(n));
    DeviceBuffer<std::uint32_t> relu_mask(mask_words(n));
    launch_pack_nonzero(dt.get(), mask.get(), n, nullptr);
    launch_pack_relu_mask(dt.get(), relu_mask.get(), n, nullptr);
    launch_unpack(mask.get(), out.get(), n, nullptr);
    const auto m = mask.to_host();
    const auto r = relu_mask.to_host();
    const auto o = out.to_host();
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bit(m, i), t[i] != 0.0f) << i;
      ASSERT_EQ(bit(r, i), relu_bit(t[i])) << i;
      ASSERT_EQ(o[i], t[i] != 0.0f ? 1.0f : 0.0f) << i;
    }
  }
}

TEST(KernelsCudaTest, PackBytes) {
  SKIP_WITHOUT_DEVICE();
  for (std::int64_t n : kSizes) {
    std::vector<float> r = random_floats(n, 6);
    std::vector<std::uint8_t> bytes(n);
    for (std::int64_t i = 0; i < n; ++i) bytes[i] = r[i] > 0.4f ? static_cast<std::uint8_t>(1) : 0;
    DeviceBuffer<std::uint8_t> db(bytes);
    DeviceBuffer<std::uint32_t> mask(mask_words(n));
    launch_pack_bytes(db.get(), mask.get(), n, nullptr);
    const auto m = mask.to_host();
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(bit(m, i), bytes[i] != 0) << i;
  }
}

TEST(KernelsCudaTest, ScaleByMaskIsDropoutsMultiply) {
  SKIP_WITHOUT_DEVICE();
  const float scale = 1.0f / 0.7f;
  for (std::int64_t n : kSizes) {
    std::vector<float> x = random_floats(n, 4);
    x[0] = -1.0f;  // dropped: -0, as torch's x * 0
    std::vector<float> keep = random_floats(n, 5);
    DeviceBuffer<float> dx(x), dk(keep), out(n);
    DeviceBuffer<std::uint32_t> mask(mask_words(n));
    // Any mask will do: ReLU's of random floats.
    launch_pack_relu_mask(dk.get(), mask.get(), n, nullptr);
    launch_scale_by_mask(dx.get(), mask.get(), scale, out.get(), n, nullptr);
    const auto o = out.to_host();
    for (std::int64_t i = 0; i < n; ++i) {
      const float expected = x[i] * (relu_bit(keep[i]) ? scale : 0.0f);
      ASSERT_EQ(std::memcmp(&o[i], &expected, sizeof(float)), 0) << i << ": " << o[i];
    }
  }
}

TEST(KernelsCudaTest, DropoutMaskIsTheHostsDraw) {
  SKIP_WITHOUT_DEVICE();
  for (std::int64_t n : kSizes) {
    const std::uint64_t seed = 0x1234567890ull, offset = 77;
    const std::uint64_t threshold = kernels::drop_threshold(0.3);
    DeviceBuffer<std::uint32_t> mask(mask_words(n));
    launch_dropout_keep_mask(seed, offset, threshold, mask.get(), n, nullptr);
    const auto m = mask.to_host();
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bit(m, i), kernels::counter_bits(seed, offset + i) >= threshold) << i;
    }
  }
}

// The kernels take four elements at a time where every pointer they read or write allows it,
// one at a time where one does not: the same results from pointers one element off.
TEST(KernelsCudaTest, PointersOffTheVectorAlignmentGiveTheSameResults) {
  SKIP_WITHOUT_DEVICE();
  const float scale = 1.0f / 0.9f;
  for (std::int64_t n : kSizes) {
    std::vector<float> x = random_floats(n + 1, 7);
    x[1] = std::nanf("");
    std::vector<float> g = random_floats(n + 1, 8);
    std::vector<std::uint8_t> bytes(n + 1);
    for (std::int64_t i = 0; i <= n; ++i)
      bytes[i] = g[i] > 0.2f ? std::uint8_t{1} : std::uint8_t{0};
    DeviceBuffer<float> dx(x), dy(n + 1), dg(g), dgx(n + 1), dscaled(n + 1), dones(n + 1);
    DeviceBuffer<std::uint8_t> db(bytes);
    DeviceBuffer<std::uint32_t> relu_mask(mask_words(n)), nonzero(mask_words(n)),
        byte_mask(mask_words(n));
    launch_relu_pack(dx.get() + 1, dy.get() + 1, relu_mask.get(), n, nullptr);
    launch_mask_select(dg.get() + 1, relu_mask.get(), dgx.get() + 1, n, nullptr);
    launch_pack_nonzero(dy.get() + 1, nonzero.get(), n, nullptr);
    launch_pack_bytes(db.get() + 1, byte_mask.get(), n, nullptr);
    launch_scale_by_mask(dg.get() + 1, byte_mask.get(), scale, dscaled.get() + 1, n, nullptr);
    launch_unpack(byte_mask.get(), dones.get() + 1, n, nullptr);
    const auto y = dy.to_host();
    const auto gx = dgx.to_host();
    const auto scaled = dscaled.to_host();
    const auto ones = dones.to_host();
    const auto m = relu_mask.to_host();
    const auto nz = nonzero.to_host();
    const auto bm = byte_mask.to_host();
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = x[i + 1];
      if (std::isnan(v)) {
        ASSERT_TRUE(std::isnan(y[i + 1])) << i;
      } else {
        ASSERT_EQ(y[i + 1], v > 0 ? v : 0.0f) << i;
      }
      ASSERT_EQ(bit(m, i), relu_bit(v)) << i;
      ASSERT_EQ(bit(nz, i), std::isnan(v) || v > 0) << i;
      ASSERT_EQ(gx[i + 1], relu_bit(v) ? g[i + 1] : 0.0f) << i;
      ASSERT_EQ(bit(bm, i), bytes[i + 1] != 0) << i;
      const float expected = g[i + 1] * (bytes[i + 1] != 0 ? scale : 0.0f);
      ASSERT_EQ(std::memcmp(&scaled[i + 1], &expected, sizeof(float)), 0) << i;
      ASSERT_EQ(ones[i + 1], bytes[i + 1] != 0 ? 1.0f : 0.0f) << i;
    }
  }
}

// The host reference: max pooling with torch's rule (`val > maxval || isnan(val)`: the first
// maximum wins, and the last NaN), window codes.
void host_pool(const std::vector<float>& x, const PoolGeometry& g, std::vector<float>* y,
               std::vector<int>* codes) {
  for (std::int64_t p = 0; p < g.planes; ++p) {
    for (std::int64_t oh = 0; oh < g.out_height; ++oh) {
      for (std::int64_t ow = 0; ow < g.out_width; ++ow) {
        float best = 0;
        int code = -1;
        for (int i = 0; i < g.kernel_h; ++i) {
          for (int j = 0; j < g.kernel_w; ++j) {
            const std::int64_t h = oh * g.stride_h - g.pad_h + i * g.dilation_h;
            const std::int64_t w = ow * g.stride_w - g.pad_w + j * g.dilation_w;
            if (h < 0 || h >= g.height || w < 0 || w >= g.width) continue;
            const float v = x[(p * g.height + h) * g.width + w];
            if (code < 0 || v > best || std::isnan(v)) {
              best = v;
              code = i * g.kernel_w + j;
            }
          }
        }
        y->push_back(best);
        codes->push_back(code);
      }
    }
  }
}

TEST(KernelsCudaTest, MaxPoolCodesAndBackward) {
  SKIP_WITHOUT_DEVICE();
  const PoolGeometry geometries[] = {
      {6, 8, 8, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1},      // 2x2 stride 2
      {5, 11, 10, 6, 5, 3, 3, 2, 2, 1, 1, 1, 1},    // 3x3 stride 2 pad 1: overlapping windows
      {3, 9, 9, 3, 3, 4, 4, 3, 3, 1, 1, 1, 1},      // 16 positions
      {2, 10, 9, 6, 5, 2, 3, 1, 2, 0, 1, 2, 1},     // dilated, rectangular
      {70000, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0, 1, 1},  // more planes than a grid has rows
  };
  for (const PoolGeometry& g : geometries) {
    const std::int64_t in = g.planes * g.height * g.width;
    const std::int64_t out = g.planes * g.out_height * g.out_width;
    std::vector<float> x = random_floats(in, 4);
    // NaNs, two of them in the first window of every geometry here (a row's first two elements).
    for (std::int64_t i = 0; i < in; i += 13) x[i] = std::nanf("");
    x[1] = std::nanf("");
    const std::vector<float> gy = random_floats(out, 5);
    std::vector<float> want_y;
    std::vector<int> want_codes;
    host_pool(x, g, &want_y, &want_codes);
    std::vector<double> want_gx(in, 0.0);
    for (std::int64_t o = 0; o < out; ++o) {
      const std::int64_t p = o / (g.out_height * g.out_width), r = o % (g.out_height * g.out_width);
      const std::int64_t oh = r / g.out_width, ow = r % g.out_width;
      const std::int64_t h =
          oh * g.stride_h - g.pad_h + (want_codes[o] / g.kernel_w) * g.dilation_h;
      const std::int64_t w =
          ow * g.stride_w - g.pad_w + (want_codes[o] % g.kernel_w) * g.dilation_w;
      want_gx[(p * g.height + h) * g.width + w] += gy[o];
    }
    DeviceBuffer<float> dx(x), dy(out), dgy(gy), dgx(in);
    DeviceBuffer<std::uint8_t> codes((out + 1) / 2);
    launch_max_pool2d_compact(dx.get(), dy.get(), codes.get(), g, nullptr);
    launch_max_pool2d_compact_backward(dgy.get(), codes.get(), dgx.get(), g, nullptr);
    const auto y = dy.to_host();
    const auto c = codes.to_host();
    const auto gx = dgx.to_host();
    for (std::int64_t o = 0; o < out; ++o) {
      ASSERT_EQ(std::memcmp(&y[o], &want_y[o], sizeof(float)), 0) << o << ": " << y[o];
      ASSERT_EQ((c[o / 2] >> ((o & 1) * 4)) & 0xF, want_codes[o]) << o;
    }
    for (std::int64_t i = 0; i < in; ++i) ASSERT_NEAR(gx[i], want_gx[i], 1e-5) << i;
  }
}

// A plane of more than 2^31 rows (one column): the backward's rows past 2^31 get their windows'
// gradients. 26 GB of device memory; skipped where less is free.
TEST(KernelsCudaTest, MaxPoolBackwardPastRow2To31) {
  SKIP_WITHOUT_DEVICE();
  const std::int64_t height = (std::int64_t{1} << 31) + 6;
  const PoolGeometry g{1, height, 1, (height - 2) / 2 + 1, 1, 2, 1, 2, 1, 0, 0, 1, 1};
  const std::int64_t out = g.out_height;
  std::size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  const std::size_t needed = static_cast<std::size_t>(2 * height + 2 * out) * sizeof(float) +
                             static_cast<std::size_t>((out + 1) / 2) + (std::size_t{1} << 30);
  if (free < needed) GTEST_SKIP() << "needs " << (needed >> 30) << " GiB of device memory free";
  DeviceBuffer<float> x_buffer(height), y_buffer(out), gy_buffer(out), gx_buffer(height);
  DeviceBuffer<std::uint8_t> codes_buffer((out + 1) / 2);
  float *x = x_buffer.get(), *y = y_buffer.get(), *gy = gy_buffer.get(), *gx = gx_buffer.get();
  std::uint8_t* codes = codes_buffer.get();
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  // Zeros, so that each window's first row is its maximum, but for the windows from row 2^31 - 4
  // on, whose second row holds 1. Every output gradient is the float of bytes 0x3F.
  ASSERT_EQ(cudaMemset(x, 0, height * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(gy, 0x3F, out * sizeof(float)), cudaSuccess);
  const std::int64_t first_one = (std::int64_t{1} << 30) - 2;  // the window of row 2^31 - 4
  const float one = 1.0f;
  for (std::int64_t k = first_one; k < out; ++k) {
    ASSERT_EQ(cudaMemcpy(x + 2 * k + 1, &one, sizeof one, cudaMemcpyHostToDevice), cudaSuccess);
  }
  launch_max_pool2d_compact(x, y, codes, g, nullptr);
  launch_max_pool2d_compact_backward(gy, codes, gx, g, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float v = 0.0f;
  std::memset(&v, 0x3F, sizeof v);
  const std::int64_t from = (std::int64_t{1} << 31) - 16;
  std::vector<float> tail(height - from);
  ASSERT_EQ(cudaMemcpy(tail.data(), gx + from, tail.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (std::int64_t h = from; h < height; ++h) {
    const std::int64_t k = h / 2;
    const bool picked = k >= first_one ? h % 2 == 1 : h % 2 == 0;
    EXPECT_EQ(tail[h - from], picked ? v : 0.0f) << "row " << h;
  }
}

}  // namespace
}  // namespace monet::cuda
