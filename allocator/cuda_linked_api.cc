// The CUDA runtime that libmonet links. Kept apart from cuda_backend.cc so that
// libmonet_preload, which must not link CUDA, can use the backend with its own table.
#include "allocator/cuda_api.h"

namespace monet {

const CudaApi& linked_cuda_api() {
  static const CudaApi api = [] {
    CudaApi a;
#define MONET_LINK(member, function) a.member = &function;
    MONET_CUDA_API(MONET_LINK)
#undef MONET_LINK
    return a;
  }();
  return api;
}

}  // namespace monet
