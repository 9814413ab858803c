#include "kernels/bit_pack.h"

#include <ATen/Dispatch.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>

#include <cstring>
#include <type_traits>

#include "kernels/counter_rng.h"
#include "kernels/device.h"

namespace monet::kernels {
namespace {

constexpr std::int64_t kWordBits = 32;
// Words per parallel task: 64 Ki elements, enough work to pay for the task.
constexpr std::int64_t kWordsPerTask = 2048;

std::uint32_t* words_of(const at::Tensor& mask) {
  return reinterpret_cast<std::uint32_t*>(mask.data_ptr<std::int32_t>());
}
const std::uint32_t* words_of_const(const at::Tensor& mask) {
  return reinterpret_cast<const std::uint32_t*>(mask.data_ptr<std::int32_t>());
}

// 16 bytes of elements of `Bytes` bytes each, as unsigned lanes, in GCC's and Clang's vector
// extensions: SSE2 on x86-64, NEON on ARM, scalar code elsewhere. A word's 32 elements are
// 32 / kCount such vectors; lane j of vector g is element g * kCount + j, i.e. bit g * kCount + j.
template <std::size_t Bytes>
struct Lanes;
template <>
struct Lanes<2> {
  using Lane = std::uint16_t;
  typedef Lane Vec __attribute__((vector_size(16)));
  static constexpr Vec kBits = {1, 2, 4, 8, 16, 32, 64, 128};
};
template <>
struct Lanes<4> {
  using Lane = std::uint32_t;
  typedef Lane Vec __attribute__((vector_size(16)));
  static constexpr Vec kBits = {1, 2, 4, 8};
  typedef float Float __attribute__((vector_size(16)));  // compares to lanes of all ones or zeros
};
template <>
struct Lanes<8> {
  using Lane = std::uint64_t;
  typedef Lane Vec __attribute__((vector_size(16)));
  static constexpr Vec kBits = {1, 2};
  typedef double Float __attribute__((vector_size(16)));
};

template <typename T>
constexpr bool kVectorCompare = std::is_same_v<T, float> || std::is_same_v<T, double>;

// Packs bit i = keep(data[i]) for n elements into `words`. `keep` is a predicate on one element;
// for float and double, `keep_vec` is the same predicate on a Lanes::Float, giving all-ones lanes
// where it holds (16 bytes at a time, with no branch). Only the last word can be partial.
template <typename T, typename Keep, typename KeepVec>
void pack_loop(const T* data, std::int64_t n, std::uint32_t* words, Keep keep, KeepVec keep_vec) {
  using L = Lanes<sizeof(T)>;
  constexpr int kCount = 16 / sizeof(T);
  at::parallel_for(
      0, (n + kWordBits - 1) / kWordBits, kWordsPerTask, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t w = begin; w < end; ++w) {
          const T* in = data + w * kWordBits;
          const std::int64_t count = std::min(kWordBits, n - w * kWordBits);
          std::uint32_t word = 0;
          if constexpr (kVectorCompare<T>) {
            if (count == kWordBits) {
              // Lanes of 32 or 64 bits hold their bit of the word in place: OR them once.
              typename L::Vec bits = {};
#pragma GCC unroll 16
              for (int g = 0; g < kWordBits / kCount; ++g) {
                typename L::Float v;
                std::memcpy(&v, in + g * kCount, sizeof(v));
                bits |= reinterpret_cast<typename L::Vec>(keep_vec(v)) & (L::kBits << (g * kCount));
              }
              for (int j = 0; j < kCount; ++j) word |= static_cast<std::uint32_t>(bits[j]);
              words[w] = word;
              continue;
            }
          }
          for (std::int64_t b = 0; b < count; ++b) {
            word |= static_cast<std::uint32_t>(keep(in[b])) << b;
          }
          words[w] = word;
        }
      });
}

// Calls full(word, first) for each mask word of 32 elements starting at element `first`, and
// partial(word, first, count) for a last word of fewer, in parallel tasks of kWordsPerTask words.
template <typename Full, typename Partial>
void each_word(const std::uint32_t* words, std::int64_t n, Full full, Partial partial) {
  at::parallel_for(0, (n + kWordBits - 1) / kWordBits, kWordsPerTask,
                   [&](std::int64_t begin, std::int64_t end) {
                     for (std::int64_t w = begin; w < end; ++w) {
                       const std::int64_t first = w * kWordBits;
                       const std::int64_t count = std::min(kWordBits, n - first);
                       if (count == kWordBits) {
                         full(words[w], first);
                       } else {
                         partial(words[w], first, count);
                       }
                     }
                   });
}

// All-ones lanes where `word` has the bits of vector g of its elements (Lanes' layout).
template <typename T>
typename Lanes<sizeof(T)>::Vec lanes_of(std::uint32_t word, int g) {
  using L = Lanes<sizeof(T)>;
  constexpr int kCount = 16 / sizeof(T);
  const auto shifted = static_cast<typename L::Lane>(word >> (g * kCount));
  return reinterpret_cast<typename L::Vec>((shifted & L::kBits) != 0);
}

// out[i] = bit i ? value[i] : 0 (the zero of all-zero bits), where value is `in`, or `one` for
// every element when `in` is null. Bitwise, so exact for any value (NaN and -0 included), and
// with no branch on the bits, which a random mask would mispredict half of the time.
template <typename T>
void unpack_loop(const std::uint32_t* words, std::int64_t n, const T* in, T one, T* out) {
  using Vec = typename Lanes<sizeof(T)>::Vec;
  constexpr int kCount = 16 / sizeof(T);
  Vec ones;
  for (int j = 0; j < kCount; ++j) std::memcpy(&ones[j], &one, sizeof(T));
  each_word(
      words, n,
      [&](std::uint32_t word, std::int64_t first) {
#pragma GCC unroll 16
        for (int g = 0; g < kWordBits / kCount; ++g) {
          Vec v = ones;
          if (in != nullptr) std::memcpy(&v, in + first + g * kCount, sizeof(v));
          v &= lanes_of<T>(word, g);
          std::memcpy(out + first + g * kCount, &v, sizeof(v));
        }
      },
      [&](std::uint32_t word, std::int64_t first, std::int64_t count) {
        for (std::int64_t b = 0; b < count; ++b) {
          out[first + b] = ((word >> b) & 1u) ? (in != nullptr ? in[first + b] : one) : T(0);
        }
      });
}

// out[i] = in[i] * (bit i ? scale : 0), for float and double: the zero is +0, so that x * 0 gives
// what torch's multiply by a noise of 0 gives (-0 for a negative x, NaN for NaN and inf).
template <typename T>
void scale_loop(const std::uint32_t* words, std::int64_t n, const T* in, T scale, T* out) {
  using L = Lanes<sizeof(T)>;
  constexpr int kCount = 16 / sizeof(T);
  typename L::Vec scales;
  for (int j = 0; j < kCount; ++j) std::memcpy(&scales[j], &scale, sizeof(T));
  each_word(
      words, n,
      [&](std::uint32_t word, std::int64_t first) {
#pragma GCC unroll 16
        for (int g = 0; g < kWordBits / kCount; ++g) {
          typename L::Float v;
          std::memcpy(&v, in + first + g * kCount, sizeof(v));
          v *= reinterpret_cast<typename L::Float>(scales & lanes_of<T>(word, g));
          std::memcpy(out + first + g * kCount, &v, sizeof(v));
        }
      },
      [&](std::uint32_t word, std::int64_t first, std::int64_t count) {
        for (std::int64_t b = 0; b < count; ++b) {
          out[first + b] = in[first + b] * (((word >> b) & 1u) ? scale : T(0));
        }
      });
}

template <typename Keep>
void pack_cpu(const at::Tensor& c, const at::Tensor& mask, Keep keep) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.scalar_type(), "monet_pack", [&] {
    // Half and bfloat16 compare as float, which holds them exactly; float and double as
    // themselves (a double below float's range would round to 0 as a float).
    using Exact = std::conditional_t<kVectorCompare<scalar_t>, scalar_t, float>;
    pack_loop(
        c.data_ptr<scalar_t>(), c.numel(), words_of(mask),
        [keep](scalar_t v) { return keep(static_cast<Exact>(v)); }, keep);
  });
}

// Where the mask functions below run ATen operations: CUDA data that kernels/cuda/ does not take
// (any dtype but float32). CPU data runs the loops above, float32 CUDA data the launchers.
bool runs_aten(const at::Tensor& t) { return !t.is_cpu() && !cuda_kernels_take(t); }

}  // namespace

at::Tensor empty_mask(std::int64_t n, const at::TensorOptions& options) {
  return at::empty({(n + kWordBits - 1) / kWordBits}, options.dtype(at::kInt));
}

at::Tensor pack_bits_aten(const at::Tensor& bits) {
  const std::int64_t n = bits.numel();
  const std::int64_t words = (n + kWordBits - 1) / kWordBits;
  // One byte an element, zero past n; each byte times its bit's weight, eight to a byte of the
  // word (little-endian: byte k holds bits 8k to 8k + 7), summed in uint8 (at most 255).
  at::Tensor bytes = at::zeros({words * kWordBits}, bits.options().dtype(at::kByte));
  bytes.narrow(0, 0, n).copy_(bits.reshape({-1}));
  const at::Tensor weights =
      at::bitwise_left_shift(at::ones({8}, bytes.options()), at::arange(8, bytes.options()));
  return bytes.view({words * 4, 8})
      .mul_(weights)
      .sum(1, /*keepdim=*/false, at::kByte)
      .view(at::kInt);
}

at::Tensor unpack_bits_aten(const at::Tensor& mask, std::int64_t n) {
  const at::Tensor bytes = mask.view(at::kByte).unsqueeze(1);
  const at::Tensor shifts = at::arange(8, bytes.options());
  return at::bitwise_right_shift(bytes, shifts)
      .bitwise_and_(1)
      .reshape({-1})
      .narrow(0, 0, n)
      .to(at::kBool);
}

at::Tensor pack_relu_mask_aten(const at::Tensor& t) {
  return pack_bits_aten(t.le(0).logical_not());
}

at::Tensor pack_nonzero_aten(const at::Tensor& t) { return pack_bits_aten(t.ne(0)); }

at::Tensor select_by_mask_aten(const at::Tensor& grad, const at::Tensor& mask) {
  const at::Tensor bits = unpack_bits_aten(mask, grad.numel()).view(grad.sizes());
  return at::where(bits, grad, at::zeros({}, grad.options())).contiguous();
}

at::Tensor mask_to_values_aten(const at::Tensor& mask, const at::Tensor& like) {
  return unpack_bits_aten(mask, like.numel()).view(like.sizes()).to(like.scalar_type());
}

at::Tensor scale_by_mask_aten(const at::Tensor& x, const at::Tensor& mask, double keep) {
  // x times 0 or 1 is exact; the scale then rounds once, as torch's dropout backward on CUDA.
  return (x.contiguous() * mask_to_values_aten(mask, x)).mul_(1.0 / keep);
}

at::Tensor pack_relu_mask(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  if (runs_aten(c)) return pack_relu_mask_aten(c);
  at::Tensor mask = empty_mask(c.numel(), c.options());
  if (on_cpu(c, "mask")) {
    // Not v > 0: a NaN output passes its gradient in torch's ReLU backward.
    pack_cpu(c, mask, [](auto v) { return !(v <= 0); });
    return mask;
  }
#ifdef MONET_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(c.device());
  cuda::launch_pack_relu_mask(c.data_ptr<float>(), words_of(mask), c.numel(), stream_of(c));
#endif
  return mask;
}

at::Tensor pack_nonzero(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
#ifdef MONET_CUDA_KERNELS
  if (c.is_cuda() && c.scalar_type() == at::kBool) {
    at::Tensor mask = empty_mask(c.numel(), c.options());
    c10::cuda::CUDAGuard guard(c.device());
    cuda::launch_pack_bytes(reinterpret_cast<const std::uint8_t*>(c.data_ptr<bool>()),
                            words_of(mask), c.numel(), stream_of(c));
    return mask;
  }
#endif
  if (runs_aten(c)) return pack_nonzero_aten(c);
  at::Tensor mask = empty_mask(c.numel(), c.options());
  if (on_cpu(c, "mask")) {
    pack_cpu(c, mask, [](auto v) { return v != 0; });
    return mask;
  }
#ifdef MONET_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(c.device());
  cuda::launch_pack_nonzero(c.data_ptr<float>(), words_of(mask), c.numel(), stream_of(c));
#endif
  return mask;
}

at::Tensor select_by_mask(const at::Tensor& grad, const at::Tensor& mask) {
  const at::Tensor g = grad.contiguous();
  at::Tensor out = at::empty_like(g, at::MemoryFormat::Contiguous);
  const std::int64_t n = g.numel();
  TORCH_CHECK(mask.numel() * kWordBits >= n, "monet: a mask of ", mask.numel(),
              " words is too short for ", n, " elements");
  if (runs_aten(g)) return select_by_mask_aten(g, mask);
  if (on_cpu(g, "mask")) {
    const std::uint32_t* words = words_of_const(mask);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "monet_select", [&] {
      unpack_loop(words, n, g.data_ptr<scalar_t>(), scalar_t(0), out.data_ptr<scalar_t>());
    });
    return out;
  }
#ifdef MONET_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(g.device());
  cuda::launch_mask_select(g.data_ptr<float>(), words_of_const(mask), out.data_ptr<float>(), n,
                           stream_of(g));
#endif
  return out;
}

at::Tensor mask_to_values(const at::Tensor& mask, const at::Tensor& like) {
  if (runs_aten(like)) return mask_to_values_aten(mask, like);
  at::Tensor out =
      at::empty(like.sizes(), like.options().memory_format(at::MemoryFormat::Contiguous));
  const std::int64_t n = out.numel();
  if (on_cpu(out, "mask")) {
    const std::uint32_t* words = words_of_const(mask);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "monet_unpack",
                                    [&] {
                                      unpack_loop(words, n, static_cast<const scalar_t*>(nullptr),
                                                  scalar_t(1), out.data_ptr<scalar_t>());
                                    });
    return out;
  }
#ifdef MONET_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(out.device());
  cuda::launch_unpack(words_of_const(mask), out.data_ptr<float>(), n, stream_of(out));
#endif
  return out;
}

at::Tensor scale_by_mask(const at::Tensor& x, const at::Tensor& mask, double keep) {
  const at::Tensor c = x.contiguous();
  const std::int64_t n = c.numel();
  TORCH_CHECK(mask.numel() * kWordBits >= n, "monet: a mask of ", mask.numel(),
              " words is too short for ", n, " elements");
  if (runs_aten(c)) return scale_by_mask_aten(c, mask, keep);
  if (on_cpu(c, "dropout")) {
    if (c.scalar_type() != at::kFloat && c.scalar_type() != at::kDouble) {
      // Half and bfloat16 round the noise and the product as torch does, through its own ops.
      at::Tensor noise = mask_to_values(mask, c);
      noise.div_(keep);
      return c * noise;
    }
    at::Tensor out = at::empty_like(c, at::MemoryFormat::Contiguous);
    AT_DISPATCH_FLOATING_TYPES(c.scalar_type(), "monet_scale", [&] {
      // torch divides the noise's 1 by keep in the noise's dtype.
      const scalar_t scale = scalar_t(1) / static_cast<scalar_t>(keep);
      scale_loop(words_of_const(mask), n, c.data_ptr<scalar_t>(), scale, out.data_ptr<scalar_t>());
    });
    return out;
  }
  at::Tensor out = at::empty_like(c, at::MemoryFormat::Contiguous);
#ifdef MONET_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(c.device());
  // torch's CUDA dropout backward (native_dropout_backward) scales by 1 / keep, a double,
  // converted to float.
  cuda::launch_scale_by_mask(c.data_ptr<float>(), words_of_const(mask),
                             static_cast<float>(1.0 / keep), out.data_ptr<float>(), n,
                             stream_of(c));
#endif
  return out;
}

at::Tensor dropout_keep_mask(std::uint64_t seed, std::uint64_t offset, std::int64_t n, double p,
                             const at::TensorOptions& options) {
  at::Tensor mask = empty_mask(n, options);
  const std::uint64_t threshold = drop_threshold(p);
  // The words are the same for data of any dtype: the check is on the device alone.
  if (on_cpu(options.device(), at::kFloat, "dropout")) {
    std::uint32_t* words = words_of(mask);
    at::parallel_for(0, mask.numel(), kWordsPerTask, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t w = begin; w < end; ++w) {
        const std::int64_t first = w * kWordBits;
        const std::int64_t count = std::min(kWordBits, n - first);
        std::uint32_t word = 0;
        for (std::int64_t b = 0; b < count; ++b) {
          const std::uint64_t index = offset + static_cast<std::uint64_t>(first + b);
          word |= static_cast<std::uint32_t>(counter_bits(seed, index) >= threshold) << b;
        }
        words[w] = word;
      }
    });
    return mask;
  }
#ifdef MONET_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(mask.device());
  cuda::launch_dropout_keep_mask(seed, offset, threshold, words_of(mask), n, stream_of(mask));
#endif
  return mask;
}

at::Tensor pack_bool_reference(const at::Tensor& bits) {
  const std::int64_t n = bits.numel();
  const std::int64_t words = (n + kWordBits - 1) / kWordBits;
  at::Tensor padded = at::zeros({words * kWordBits}, bits.options().dtype(at::kLong));
  padded.narrow(0, 0, n).copy_(bits.reshape({-1}));
  at::Tensor shifts = at::arange(kWordBits, padded.options());
  // Distinct powers of two: their int64 sum is their OR; the low 32 bits are the word.
  return at::bitwise_left_shift(padded.view({words, kWordBits}), shifts).sum(1).to(at::kInt);
}

at::Tensor unpack_bool_reference(const at::Tensor& mask, std::int64_t n) {
  at::Tensor shifts = at::arange(kWordBits, mask.options().dtype(at::kLong));
  at::Tensor bits = at::bitwise_right_shift(mask.to(at::kLong).unsqueeze(1), shifts).bitwise_and(1);
  return bits.reshape({-1}).narrow(0, 0, n).to(at::kBool);
}

}  // namespace monet::kernels
