#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

// Writes `value` to the n bytes at p on `stream`.
cudaError_t monet_test_fill(void* p, size_t n, unsigned char value, cudaStream_t stream);
