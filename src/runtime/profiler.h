// The measurement pass: how the runtime learns a shape's chain (include/monet/chain.h) from the
// allocator and the clock. It runs forward without a graph keeping every stage's input, then,
// from the last stage back, runs each stage alone with grad enabled in each of its operator
// modes and back-propagates through it, measuring:
//   out_bytes    the stage's output
//   saved_bytes  what stays in use after its forward beyond the output (what backward keeps)
//   fwd_peak     the peak during its forward above what stays in use after it
//   bwd_peak     the peak during its backward above what was in use when it began, less the
//                input's gradient (the model counts that) plus the output (the model has freed
//                it; a stage that saves its output still holds it)
//   fwd_time, bwd_time   wall-clock seconds
// It holds the stages' inputs and one stage's working set at a time: little more than a plan
// that checkpoints every stage alone, so it fits where a plan fits. It leaves no trace: the
// gradients it computes are discarded, and the RNG state and module buffers are put back.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "allocator/caching_allocator.h"
#include "monet/chain.h"
#include "runtime/stage.h"

namespace monet {

struct MeasuredChain {
  Chain chain;  // one variant per mode of each stage, in the stages' order; fixed_bytes 0
  double seconds = 0.0;
};

// Measures `stages` on `input` through `pool`. With `find_variants`, every stage that called a
// variant-aware operator is measured in each OpMode, and a mode is kept in the stage's modes
// only when it keeps fewer bytes than every mode before it; otherwise each stage's current
// modes are measured.
// `candidate_modes` are the modes tried when finding variants (kDefault first).
MeasuredChain measure_chain(std::vector<RuntimeStage>& stages, const at::Tensor& input,
                            CachingAllocator& pool, bool find_variants,
                            const std::vector<OpMode>& candidate_modes);

}  // namespace monet
