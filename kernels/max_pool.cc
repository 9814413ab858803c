// 2-d max pooling that keeps, for backward, a 4-bit code per output (where in its window the
// maximum was) and the input's sizes: not the input, not 64-bit indices.
#include <ATen/Dispatch.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/accumulate.h>
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

// torch's pooling_output_shape: the output's size along one dim (stride not 0).
std::int64_t pooled_size(std::int64_t in, std::int64_t k, std::int64_t pad, std::int64_t stride,
                         std::int64_t dilation, bool ceil_mode) {
  const std::int64_t span = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Rounded down (torch's div_rtn), not toward 0: a window longer than the padded input gives no
  // output, which the caller refuses.
  std::int64_t out = span / stride;
  if (span % stride != 0 && (span < 0) != (stride < 0)) --out;
  ++out;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// max_pool2d's window for input x, checked as torch's max_pool2d_with_indices checks its arguments
// (in its order, with its messages): the CUDA path sizes its output and casts the window to int
// itself, where a zero stride divided by zero and a 5-d input was pooled as planes.
Window checked_window(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride,
                      at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  TORCH_CHECK(kernel.size() == 1 || kernel.size() == 2,
              "max_pool2d: kernel_size must either be a single int, or a tuple of two ints");
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 2,
              "max_pool2d: stride must either be omitted, a single int, or a tuple of two ints");
  TORCH_CHECK(padding.size() == 1 || padding.size() == 2,
              "max_pool2d: padding must be either be a single int, or a tuple of two ints");
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == 2,
              "max_pool2d: dilation must be either a single int, or a tuple of two ints");
  const at::IntArrayRef s = stride.empty() ? kernel : stride;
  const Window win{at_or_only(kernel, 0),   at_or_only(kernel, 1),   at_or_only(s, 0),
                   at_or_only(s, 1),        at_or_only(padding, 0),  at_or_only(padding, 1),
                   at_or_only(dilation, 0), at_or_only(dilation, 1), ceil_mode};
  for (std::int64_t v : {win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw}) {
    TORCH_CHECK(std::numeric_limits<int>::min() <= v && v <= std::numeric_limits<int>::max(),
                "integer out of range");
  }
  TORCH_CHECK(x.dim() == 3 || x.dim() == 4,
              "non-empty 3D or 4D (batch mode) tensor expected for input");
  const std::int64_t height = x.size(-2), width = x.size(-1);
  const auto size_along = [ceil_mode](std::int64_t in, std::int64_t k, std::int64_t pad,
                                      std::int64_t step, std::int64_t dilation) {
    TORCH_CHECK(step != 0, "stride should not be zero");
    TORCH_CHECK(pad >= 0, "pad must be non-negative, but got pad: ", pad);
    TORCH_CHECK(pad <= k / 2, "pad should be at most half of kernel size, but got pad=", pad,
                " and kernel_size=", k);
    return pooled_size(in, k, pad, step, dilation, ceil_mode);
  };
  const std::int64_t out_height = size_along(height, win.kh, win.ph, win.sh, win.dh);
  const std::int64_t out_width = size_along(width, win.kw, win.pw, win.sw, win.dw);
  TORCH_CHECK(win.kw > 0 && win.kh > 0, "kernel size should be greater than zero, but got ",
              "kH: ", win.kh, " kW: ", win.kw);
  TORCH_CHECK(win.sw > 0 && win.sh > 0, "stride should be greater than zero, but got dH: ", win.sh,
              " dW: ", win.sw);
  TORCH_CHECK(win.dh > 0 && win.dw > 0, "dilation should be greater than zero, but got ",
              "dilationH: ", win.dh, " dilationW: ", win.dw);
  const bool valid_dims = x.size(1) != 0 && x.size(2) != 0;
  TORCH_CHECK((x.dim() == 3 && x.size(0) != 0 && valid_dims) ||
                  (x.dim() == 4 && valid_dims && x.size(3) != 0),
              "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
              "but got:",
              x.sizes());
  const std::int64_t planes = x.size(-3);
  TORCH_CHECK(out_height >= 1 && out_width >= 1, "Given input size: (", planes, "x", height, "x",
              width, "). Calculated output size: (", planes, "x", out_height, "x", out_width,
              "). Output size is too small");
  return win;
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

// torch's int64 indices (h * width + w within each plane) of outputs of `out_sizes`, from their
// codes, in ATen operations on the codes' device.
at::Tensor indices_from_codes(const at::Tensor& codes, const Window& win, at::IntArrayRef out_sizes,
                              std::int64_t width) {
  const std::int64_t n = c10::multiply_integers(out_sizes);
  const at::Tensor bytes = codes.to(at::kLong);
  // Nibble o is the low half of byte o / 2 for even o, the high half for odd o.
  const at::Tensor code = at::stack({bytes.bitwise_and(0xF), at::bitwise_right_shift(bytes, 4)}, 1)
                              .view({-1})
                              .narrow(0, 0, n)
                              .view(out_sizes);
  const std::int64_t oh_count = out_sizes[out_sizes.size() - 2], ow_count = out_sizes.back();
  const at::Tensor top = (at::arange(oh_count, bytes.options()) * win.sh - win.ph).view({-1, 1});
  const at::Tensor left = at::arange(ow_count, bytes.options()) * win.sw - win.pw;
  const at::Tensor h = top + at::div(code, win.kw, "floor") * win.dh;
  const at::Tensor w = left + at::remainder(code, win.kw) * win.dw;
  return h * width + w;
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
    ctx->saved_data["window"] = std::vector<std::int64_t>{
        win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw, win.ceil_mode ? 1 : 0};
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor codes = ctx->get_saved_variables()[0];
    const std::vector<std::int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const std::vector<std::int64_t> w = ctx->saved_data["window"].toIntVector();
    const Window win{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8] != 0};
    const at::Tensor& g = grads[0];
    if (at::GradMode::is_enabled()) {
      // Under create_graph the gradient must carry a graph for the gradient of this gradient:
      // ATen's own backward, whose derivative torch has, on torch's indices rebuilt from the
      // codes. It takes an input only for its sizes.
      const at::Tensor indices = indices_from_codes(codes, win, g.sizes(), sizes.back());
      return {at::max_pool2d_with_indices_backward(
                  g, at::empty(sizes, g.options()), {win.kh, win.kw}, {win.sh, win.sw},
                  {win.ph, win.pw}, {win.dh, win.dw}, win.ceil_mode, indices),
              at::Tensor()};
    }
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
  const auto plain = [&] {
    return at::max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode);
  };
  if (!kernels::run_variant(x) || !kernels::pool_codes_run_on(x)) return plain();
  const Window win = checked_window(x, kernel_size, stride, padding, dilation, ceil_mode);
  // The codes index windows of at most 16 positions in planes of under 2^32 elements.
  if (win.kh * win.kw > kMaxWindow ||
      x.size(-2) * x.size(-1) > std::numeric_limits<std::uint32_t>::max()) {
    return plain();
  }
  return CompactMaxPool::apply(x, win);
}

}  // namespace monet::ops
