// 2-d max pooling that keeps, for backward, a 4-bit code per output (where in its window the
// maximum was) and the input's sizes: not the input, not 64-bit indices.
#include <ATen/Dispatch.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/device.h"
#include "kernels/variant_util.h"
#include "monet/ops.h"

namespace monet::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A 4-bit code names one of at most 16 window positions.
constexpr std::int64_t kMaxWindow = 16;

// Kernel, stride, padding and dilation, each (height, width).
struct Window {
  std::int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode;
};

std::int64_t at_or_only(at::IntArrayRef a, std::size_t i) { return a.size() == 1 ? a[0] : a[i]; }

Window window_of(at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                 at::IntArrayRef dilation, bool ceil_mode) {
  TORCH_CHECK(kernel.size() == 1 || kernel.size() == 2,
              "max_pool2d: kernel_size must be one int or two, got ", kernel.size());
  at::IntArrayRef s = stride.empty() ? kernel : stride;
  return {at_or_only(kernel, 0),   at_or_only(kernel, 1),   at_or_only(s, 0),
          at_or_only(s, 1),        at_or_only(padding, 0),  at_or_only(padding, 1),
          at_or_only(dilation, 0), at_or_only(dilation, 1), ceil_mode};
}

// Nibble o of `codes`: low half of byte o / 2 for even o, high half for odd o.
inline std::uint8_t nibble(const std::uint8_t* codes, std::int64_t o) {
  return (codes[o / 2] >> ((o & 1) * 4)) & 0xF;
}

// Codes from torch's indices (h * W + w within each plane). One division per output (the index
// into h and w); the window's position comes from the loops, not from dividing the output's.
at::Tensor codes_from_indices(const at::Tensor& indices, const Window& win, std::int64_t width) {
  const at::Tensor idx = indices.contiguous();
  const std::int64_t oh_count = idx.size(-2), ow_count = idx.size(-1), n = idx.numel();
  const std::int64_t planes = n / (oh_count * ow_count);
  const auto plane_width = static_cast<std::uint32_t>(width);
  at::Tensor codes = at::zeros({(n + 1) / 2}, idx.options().dtype(at::kByte));
  const std::int64_t* in = idx.data_ptr<std::int64_t>();
  std::uint8_t* out = codes.data_ptr<std::uint8_t>();
  // An even number of planes per task, or a plane of an even number of outputs, so that no two
  // tasks write the same byte.
  const std::int64_t grain = (oh_count * ow_count) % 2 == 0 ? 1 : 2;
  // Undilated windows (the usual case) divide by nothing more: the compiler would otherwise divide
  // by a dilation of 1 rather than branch around it.
  const auto fill = [&](auto dilated) {
    at::parallel_for(0, (planes + grain - 1) / grain, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin * grain; p < std::min(planes, end * grain); ++p) {
        std::int64_t o = p * oh_count * ow_count;
        for (std::int64_t oh = 0; oh < oh_count; ++oh) {
          for (std::int64_t ow = 0; ow < ow_count; ++ow, ++o) {
            // An index within one plane: 32 bits hold it, and divide faster than 64.
            const auto index = static_cast<std::uint32_t>(in[o]);
            const std::int64_t h = index / plane_width, w = index % plane_width;
            std::int64_t dh = h - (oh * win.sh - win.ph), dw = w - (ow * win.sw - win.pw);
            if constexpr (decltype(dilated)::value) {
              dh /= win.dh;
              dw /= win.dw;
            }
            out[o / 2] |= static_cast<std::uint8_t>(dh * win.kw + dw) << ((o & 1) * 4);
          }
        }
      }
    });
  };
  if (win.dh == 1 && win.dw == 1) {
    fill(std::false_type{});
  } else {
    fill(std::true_type{});
  }
  return codes;
}

// grad_x of `input_sizes` with each output's grad added at its window's argmax.
at::Tensor scatter_to_argmax(const at::Tensor& grad, const at::Tensor& codes, const Window& win,
                             const std::vector<std::int64_t>& input_sizes) {
  const at::Tensor g = grad.contiguous();
  at::Tensor grad_x =
      at::zeros(input_sizes, g.options().memory_format(at::MemoryFormat::Contiguous));
  const std::int64_t height = input_sizes[input_sizes.size() - 2];
  const std::int64_t width = input_sizes.back();
  const std::int64_t oh_count = g.size(-2), ow_count = g.size(-1);
  const std::int64_t planes = g.numel() / (oh_count * ow_count);
  const std::uint8_t* c = codes.data_ptr<std::uint8_t>();
  // Each code's offset in the plane from its window's corner, looked up rather than divided.
  std::array<std::int64_t, kMaxWindow> offset{};
  for (std::int64_t code = 0; code < win.kh * win.kw; ++code) {
    offset[code] = (code / win.kw) * win.dh * width + (code % win.kw) * win.dw;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "monet_pool_bwd", [&] {
    const scalar_t* gy = g.data_ptr<scalar_t>();
    scalar_t* gx = grad_x.data_ptr<scalar_t>();
    // One plane per task, its outputs in order: the same additions in the same order as torch's
    // CPU backward where windows overlap.
    at::parallel_for(0, planes, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p) {
        for (std::int64_t oh = 0; oh < oh_count; ++oh) {
          const std::int64_t row = (p * height + oh * win.sh - win.ph) * width - win.pw;
          for (std::int64_t ow = 0; ow < ow_count; ++ow) {
            const std::int64_t o = (p * oh_count + oh) * ow_count + ow;
            gx[row + ow * win.sw + offset[nibble(c, o)]] += gy[o];
          }
        }
      }
    });
  });
  return grad_x;
}

#ifdef MONET_CUDA_KERNELS
// torch's pooling_output_shape.
std::int64_t pooled_size(std::int64_t in, std::int64_t k, std::int64_t pad, std::int64_t stride,
                         std::int64_t dilation, bool ceil_mode) {
  const std::int64_t span = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  std::int64_t out = span / stride + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

cuda::PoolGeometry geometry_of(const std::vector<std::int64_t>& input_sizes,
                               std::int64_t out_height, std::int64_t out_width, const Window& win) {
  const std::int64_t height = input_sizes[input_sizes.size() - 2], width = input_sizes.back();
  std::int64_t planes = 1;
  for (std::size_t i = 0; i + 2 < input_sizes.size(); ++i) planes *= input_sizes[i];
  return {planes,
          height,
          width,
          out_height,
          out_width,
          static_cast<int>(win.kh),
          static_cast<int>(win.kw),
          static_cast<int>(win.sh),
          static_cast<int>(win.sw),
          static_cast<int>(win.ph),
          static_cast<int>(win.pw),
          static_cast<int>(win.dh),
          static_cast<int>(win.dw)};
}
#endif

struct CompactMaxPool : torch::autograd::Function<CompactMaxPool> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Window& win) {
    const std::vector<std::int64_t> sizes = x.sizes().vec();
    at::Tensor y, codes;
    if (kernels::on_cpu(x, "max_pool2d")) {
      auto [out, indices] = at::max_pool2d_with_indices(
          x, {win.kh, win.kw}, {win.sh, win.sw}, {win.ph, win.pw}, {win.dh, win.dw}, win.ceil_mode);
      codes = codes_from_indices(indices, win, x.size(-1));
      y = out;
    } else {
#ifdef MONET_CUDA_KERNELS
      const at::Tensor c = x.contiguous();
      c10::cuda::CUDAGuard guard(c.device());
      std::vector<std::int64_t> out_sizes = sizes;
      out_sizes[sizes.size() - 2] =
          pooled_size(sizes[sizes.size() - 2], win.kh, win.ph, win.sh, win.dh, win.ceil_mode);
      out_sizes.back() = pooled_size(sizes.back(), win.kw, win.pw, win.sw, win.dw, win.ceil_mode);
      y = at::empty(out_sizes, c.options());
      codes = at::empty({(y.numel() + 1) / 2}, c.options().dtype(at::kByte));
      cuda::launch_max_pool2d_compact(
          c.data_ptr<float>(), y.data_ptr<float>(), codes.data_ptr<std::uint8_t>(),
          geometry_of(sizes, out_sizes[sizes.size() - 2], out_sizes.back(), win),
          kernels::stream_of(c));
#endif
    }
    // Saved tensors, unlike saved_data, are released when this node's backward has run.
    ctx->save_for_backward({codes});
    ctx->saved_data["sizes"] = sizes;
    ctx->saved_data["window"] =
        std::vector<std::int64_t>{win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw};
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor codes = ctx->get_saved_variables()[0];
    const std::vector<std::int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const std::vector<std::int64_t> w = ctx->saved_data["window"].toIntVector();
    const Window win{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], false};
    const at::Tensor& g = grads[0];
    if (kernels::on_cpu(g, "max_pool2d")) {
      return {scatter_to_argmax(g, codes, win, sizes), at::Tensor()};
    }
    at::Tensor grad_x = at::empty(sizes, g.options());
#ifdef MONET_CUDA_KERNELS
    const at::Tensor c = g.contiguous();
    c10::cuda::CUDAGuard guard(c.device());
    cuda::launch_max_pool2d_compact_backward(
        c.data_ptr<float>(), codes.data_ptr<std::uint8_t>(), grad_x.data_ptr<float>(),
        geometry_of(sizes, c.size(-2), c.size(-1), win), kernels::stream_of(c));
#endif
    return {grad_x, at::Tensor()};
  }
};

}  // namespace

at::Tensor max_pool2d(const at::Tensor& x, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                      at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  const bool variant = kernels::run_variant(x) && kernels::pool_codes_run_on(x);
  const Window win = window_of(kernel_size, stride, padding, dilation, ceil_mode);
  // The codes index windows of at most 16 positions in planes of under 2^32 elements.
  if (!variant || win.kh * win.kw > kMaxWindow || x.dim() < 3 ||
      x.size(-2) * x.size(-1) > std::numeric_limits<std::uint32_t>::max()) {
    return at::max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode);
  }
  return CompactMaxPool::apply(x, win);
}

}  // namespace monet::ops
