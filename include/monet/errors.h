// Errors that monet raises for things a user can cause. Each message says what was wrong and
// what to do about it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace monet {

// A MONET_* variable, a command-line flag or an option holds a value monet cannot use.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A budget below what the model holds before any activation: its parameters and buffers and the
// gradients of those that train, on the device the budget caps. monet::Runtime's constructor
// throws it; what() says both numbers.
class BudgetBelowModelError : public ConfigError {
 public:
  BudgetBelowModelError(const std::string& message, std::int64_t model_bytes)
      : ConfigError(message), model_bytes(model_bytes) {}

  std::int64_t model_bytes;  // what the model holds: parameters, buffers, gradients
};

// A use of autograd that monet's checkpointed segments cannot serve: gradients of gradients
// (backward with create_graph) or torch::autograd::grad() through a segment, whose recomputation
// runs its own backward and adds to the parameters' .grad. Also a Runtime's step started while a
// step runs in another thread: monet trains from one thread per process.
class UnsupportedError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// A request that cannot be served within the budget even after every cached block was released.
// what() is one line with the numbers below and the knob to turn. The LibTorch hooks rethrow it
// as c10::OutOfMemoryError, which PyTorch shows as torch.cuda.OutOfMemoryError.
class OutOfMemoryError : public std::runtime_error {
 public:
  OutOfMemoryError(const std::string& message, std::size_t requested_bytes,
                   std::size_t allocated_bytes, std::size_t reserved_bytes,
                   std::size_t budget_bytes, std::size_t largest_free_bytes)
      : std::runtime_error(message),
        requested_bytes(requested_bytes),
        allocated_bytes(allocated_bytes),
        reserved_bytes(reserved_bytes),
        budget_bytes(budget_bytes),
        largest_free_bytes(largest_free_bytes) {}

  std::size_t requested_bytes;     // what the failed call asked for
  std::size_t allocated_bytes;     // bytes in blocks handed out at the time
  std::size_t reserved_bytes;      // bytes held from the device (in use or cached)
  std::size_t budget_bytes;        // the cap on reserved bytes; 0 means none
  std::size_t largest_free_bytes;  // the largest cached free block
};

}  // namespace monet
