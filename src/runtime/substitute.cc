// The runtime's use of the kernels' substitution (monet/nn.h), behind the name stage.cc calls.
#include "monet/nn.h"

namespace monet {

std::vector<nn::Substitution> substitute_lean_modules(
    const std::vector<torch::nn::AnyModule>& modules) {
  return monet::nn::substitute_variants_traced(modules);
}

}  // namespace monet
