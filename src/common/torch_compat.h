// The few places where LibTorch 1.13 (Debian's libtorch-dev) and 2.x (the PyTorch wheel's) differ,
// in one header, keyed on TORCH_VERSION_MAJOR.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <optional>
// c10::Allocator::allocate lost its const in 2.x and gained copy_data().
#define MONET_ALLOCATE_CONST
#define MONET_TORCH_HAS_COPY_DATA 1
namespace monet::compat {
template <typename T>
using optional = std::optional<T>;
inline constexpr auto nullopt = std::nullopt;
}  // namespace monet::compat
#else
#include <c10/util/Optional.h>
#define MONET_ALLOCATE_CONST const
#define MONET_TORCH_HAS_COPY_DATA 0
namespace monet::compat {
template <typename T>
using optional = c10::optional<T>;
inline constexpr auto nullopt = c10::nullopt;
}  // namespace monet::compat
#endif
