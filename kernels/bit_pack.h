// 1-bit masks for the compact variants: bits packed 32 to an int32 word (element i is bit i % 32
// of word i / 32, elements in row-major order of the tensor's sizes), 1/32 of an fp32 tensor.
// CPU tensors run loops here; float32 CUDA tensors run kernels/cuda/ where LibTorch and monet were
// both built with CUDA, and CUDA tensors of other dtypes the same in ATen operations (`*_aten`
// below); any other device is an error naming the op.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace monet::kernels {

// The packed words of `n` bits (int32, ceil(n / 32) words, on `options`' device).
at::Tensor empty_mask(std::int64_t n, const at::TensorOptions& options);

// ReLU's mask: bit i = !(t[i] <= 0), the elements where torch's ReLU backward
// (threshold_backward: result <= 0 ? 0 : grad) passes the gradient. NaN gives 1, either zero 0.
at::Tensor pack_relu_mask(const at::Tensor& t);
// bit i = (t[i] != 0). Floating tensors; and bool tensors on CUDA (torch's CUDA dropout mask).
at::Tensor pack_nonzero(const at::Tensor& t);
// A tensor of grad's sizes and dtype: grad[i] where bit i is set, else 0.
at::Tensor select_by_mask(const at::Tensor& grad, const at::Tensor& mask);
// A contiguous tensor of like's sizes and dtype: 1 where bit i is set, else 0.
at::Tensor mask_to_values(const at::Tensor& mask, const at::Tensor& like);
// Dropout's masking of x: x * (bit ? scale : 0), a contiguous tensor of x's sizes and dtype, in
// one pass (float and double; other dtypes build the noise). scale is rounded as torch rounds it
// on the device, so that the results are torch's bit for bit: on the CPU as its dropout (noise
// divided by keep in x's dtype, then x * noise), on CUDA as its dropout's backward (x times
// 1 / keep computed in double, rounded to float). keep = 1 - p, in (0, 1].
at::Tensor scale_by_mask(const at::Tensor& x, const at::Tensor& mask, double keep);
// Regenerating dropout's keep mask for `n` elements (kernels/counter_rng.h), on `options`' device.
at::Tensor dropout_keep_mask(std::uint64_t seed, std::uint64_t offset, std::int64_t n, double p,
                             const at::TensorOptions& options);

// The same in ATen operations, on any device: what CUDA data of a dtype other than float32 runs
// (float16, bfloat16: a half-precision model, autocast's activations). Each allocates a byte an
// element on the way, which a measured stage's transient peak counts. scale_by_mask_aten rounds as
// torch's dropout backward on CUDA (x times 0 or 1, then times 1 / keep, rounded once).
// pack_bits_aten packs a bool tensor; unpack_bits_aten gives `n` bools back.
at::Tensor pack_bits_aten(const at::Tensor& bits);
at::Tensor unpack_bits_aten(const at::Tensor& mask, std::int64_t n);
at::Tensor pack_relu_mask_aten(const at::Tensor& t);
at::Tensor pack_nonzero_aten(const at::Tensor& t);
at::Tensor select_by_mask_aten(const at::Tensor& grad, const at::Tensor& mask);
at::Tensor mask_to_values_aten(const at::Tensor& mask, const at::Tensor& like);
at::Tensor scale_by_mask_aten(const at::Tensor& x, const at::Tensor& mask, double keep);

// The same packing in plain ATen operations, for the tests: bool tensor -> words, and back.
at::Tensor pack_bool_reference(const at::Tensor& bits);
at::Tensor unpack_bool_reference(const at::Tensor& mask, std::int64_t n);

}  // namespace monet::kernels
