// The stages a Runtime runs: the children of the user's Sequential (nested Sequentials opened),
// each with the module buffers a recomputation or a retry must put back, and the operator modes
// (variants) it has. The loss is one more stage, last, whose function each step sets.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "monet/nn.h"
#include "monet/op_mode.h"

namespace monet {

struct RuntimeStage {
  std::string name;                                 // "3:BatchNorm2d", "loss"
  std::function<at::Tensor(const at::Tensor&)> fn;  // the stage's forward
  std::vector<at::Tensor> buffers;                  // running statistics and such
  // All of the stage's parameters. Which of them train is read when it matters (trains(),
  // trained_parameters()): a model may freeze or unfreeze parameters between steps.
  std::vector<at::Tensor> parameters;
  std::vector<OpMode> modes = {OpMode::kDefault};  // variant index -> mode
  // monet::nn modules made in place of the user's, each with the user's modules it stands for:
  // every step, each part takes what its original has then: its training flag, a Dropout's p, a
  // BatchNorm's momentum and eps (nn::follow_originals).
  std::vector<nn::Substitution> substitutions;

  // How many parameters require grad now, and whether any does.
  int trained_count() const;
  bool trains() const { return trained_count() > 0; }
  // The parameters that require grad now.
  std::vector<at::Tensor> trained_parameters() const;
};

// The stages of `model`, in order: each child, nested Sequentials opened. With `substitute`,
// torch::nn modules that have memory-lean variants are replaced by their monet::nn equivalents
// (sharing parameters and buffers). Throws ConfigError for an empty model.
std::vector<RuntimeStage> cut_stages(const torch::nn::Sequential& model, bool substitute);

// `stages` with each stage whose `joins_previous` is set run as one stage with the stage before
// it: its forward after the earlier one's, its buffers, parameters and substitutions added, the
// names joined by '+' ("3:Linear+4:Flatten"). The merged stages have only the default mode until
// they are measured. `joins_previous` has one flag per stage; the first's must be false.
std::vector<RuntimeStage> merge_stages(std::vector<RuntimeStage> stages,
                                       const std::vector<bool>& joins_previous);

// Copies of the buffers of some stages, put back by restore(): a stage recomputed in backward,
// or a batch run again, must not update BatchNorm's running statistics twice.
class BufferSnapshot {
 public:
  // Where the copies live: in the pools (a snapshot for the length of a pass or a backward), or
  // outside them, in host memory (pinned for a device's buffers), for a snapshot held from a
  // segment's forward to its backward, where the memory model counts nothing.
  enum class Copies { kInPools, kOutsidePools };
  BufferSnapshot() = default;
  BufferSnapshot(const std::vector<RuntimeStage>& stages, int first, int last,
                 Copies copies = Copies::kInPools);
  void restore() const;
  bool empty() const { return saved_.empty(); }
  // Forgets the buffers that nothing has written since the snapshot (their version counter has
  // not moved): restore() would copy them onto themselves.
  void drop_unchanged();

 private:
  std::vector<at::Tensor> live_;        // the module's own tensors
  std::vector<at::Tensor> saved_;       // their values at the snapshot
  std::vector<std::int64_t> versions_;  // their version counters then
};

}  // namespace monet
