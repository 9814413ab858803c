// Waiting for what a finished backward still holds on a CUDA device.
//
// On a CUDA device, autograd runs a backward on that device's own engine thread, and backward()
// or autograd::grad() return once the last node has run, while that thread still holds the
// graph task until it finishes its loop: what the task keeps (the gradients autograd::grad
// returns, which its result also holds) is freed a moment later, on that thread. Memory read
// right after such a backward then counts bytes about to go, and a reading a little later misses
// bytes freed inside it. On the CPU the calling thread runs the backward and frees all before it
// returns.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <c10/core/GradMode.h>

namespace monet {

// Returns once every backward that ran on `device` before the call has let go of its graph
// task: an empty backward runs on the device's engine thread, which takes it only after it has
// finished with every earlier one. Nothing to do on the CPU. The empty backward launches no
// kernel and allocates nothing (its tensors have no elements), so it leaves no bytes behind for
// the next call to release in turn; still a thread hand-off each way, so for measurements, not
// for every training step.
inline void await_autograd_release(const c10::Device& device) {
  if (!device.is_cuda()) return;
  const at::AutoGradMode grad(true);
  const at::TensorOptions options = at::TensorOptions().device(device);
  const at::Tensor leaf = at::empty({0}, options).requires_grad_(true);
  leaf.view({0}).backward(at::empty({0}, options));
}

}  // namespace monet
