// The counter-based random bits of regenerating dropout, shared by the CPU loops and the CUDA
// kernels so that both draw the same mask: element i of a draw keyed by (seed, offset) is kept
// when hash(seed, offset + i) >= threshold. Nothing is stored between forward and backward but
// the key, and any element can be redrawn alone, in any order, on any device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MONET_HOST_DEVICE __host__ __device__
#else
#define MONET_HOST_DEVICE
#endif

namespace monet::kernels {

// 32 uniform bits for counter `index` of stream `seed`: splitmix64's finalizer (a bijection with
// full avalanche) over the seed-salted counter. Not cryptographic; plenty for dropout masks.
MONET_HOST_DEVICE inline std::uint32_t counter_bits(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<std::uint32_t>(z >> 32);
}

// The threshold below which an element is dropped, for drop probability p in [0, 1]: an element
// survives with probability 1 - p (to within 2^-32).
inline std::uint64_t drop_threshold(double p) {
  if (p <= 0.0) return 0;
  if (p >= 1.0) return std::uint64_t{1} << 32;  // above every 32-bit value: all dropped
  return static_cast<std::uint64_t>(p * 4294967296.0);
}

}  // namespace monet::kernels
