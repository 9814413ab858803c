// A kernel that writes every byte of a block, to prove the CUDA pool's memory is usable.
#include "fill_kernel.h"

namespace {
__global__ void fill(unsigned char* p, size_t n, unsigned char value) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p[i] = value;
  }
}
}  // namespace

cudaError_t monet_test_fill(void* p, size_t n, unsigned char value, cudaStream_t stream) {
  fill<<<64, 256, 0, stream>>>(static_cast<unsigned char*>(p), n, value);
  return cudaGetLastError();
}
