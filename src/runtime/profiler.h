// The measurement pass: how the runtime learns a shape's chain (include/monet/chain.h) from the
// allocator and the clock. Stage by stage from the first, it runs the stage without a graph to
// get its output, then alone with grad enabled in each of its operator modes, back-propagating a
// gradient of ones shaped like its output (bytes and times do not depend on its values),
// measuring:
//   out_bytes    the stage's output
//   saved_bytes  what stays in use after its forward beyond the output (what backward keeps)
//   fwd_peak     the peak during its forward above what stays in use after it
//   bwd_peak     the peak during its backward above what was in use when it began, less the
//                input's gradient (the model counts that, as the stage before's output gradient;
//                the first stage's input has one only where the caller asked for it, and it
//                stays in) plus the output while a step holds it there (the model has freed
//                it): while the stage's graph keeps it (a ReLU's, up to its node), and for the
//                model's output and the loss, to the step's end. The backward runs from the
//                output's graph with the pass's own reference to the output dropped.
// A stage's input needs a gradient in the pass only where one flows in a training step: from the
// first stage whose parameters train (or from the model's input, where it needs one) on.
//   fwd_time, bwd_time   seconds: on CUDA the device's busy time from CUPTI's kernel, copy and
//                memset records (KernelClock) where the clock is StageClock::kAuto and CUPTI
//                loads, else the wall clock with the device synchronised around each
// A stage that still holds bytes after its backward ran, its graph still alive, is named once
// with a warning: the model frees a kept stage's saved bytes there (a custom autograd Function
// keeping tensors in ctx->saved_data holds them until its node is destroyed). A lean mode that
// does so is not kept when finding variants.
// It holds one stage's input, output, output gradient and working set at a time, so it fits
// wherever a plan does (every plan runs each stage with its input at hand). It leaves no trace: the
// gradients it computes are discarded, and the RNG state and module buffers are put back.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <vector>

#include "allocator/caching_allocator.h"
#include "monet/chain.h"
#include "monet/runtime.h"
#include "runtime/stage.h"

namespace monet {

// How the stretches of a measurement pass timed by CUPTI went. A stretch CUPTI could not time
// (it refused to record, or dropped records), or in which it recorded no device work (a view, or
// another profiler took CUPTI's callbacks), is timed by the wall clock instead.
struct KernelTimings {
  int stretches = 0;     // forward and backward runs timed
  int with_records = 0;  // those CUPTI recorded device work in and timed
  int untimed = 0;       // those CUPTI could not time
  std::string why;       // why the last of those could not be timed
};

// What the graph of a stage's forward keeps of the stage's input and of its output for its
// backward (a Linear its input, a ReLU its output, a Dropout neither, only its mask).
struct StageKeeps {
  bool input = true;
  bool output = true;
};

struct MeasuredChain {
  Chain chain;  // one variant per mode of each stage, in the stages' order; fixed_bytes 0
  double seconds = 0.0;
  bool kernel_times = false;  // the stages are timed by CUPTI's device busy times, as below
  KernelTimings kernel_timings;
  // Per stage: its output shares its input's storage, a view of it or the input written in place
  // (an operator that writes in place cannot take the leaf that needs a gradient a stage's
  // measurement, or a checkpointed segment, starts from: such a stage after the first is run on a
  // copy of its input). The memory model counts a stage's input and output apart, so such a stage
  // is run as part of the stage before it (merge_stages) and the chain measured again.
  std::vector<bool> aliases_input;
  // Per stage: in one of its modes measured, its graph keeps not its input (frees_input), or not
  // its output (frees_output); StageKeeps. The memory model keeps x(i) from stage i's forward to
  // stage i+1's backward: where neither stage i keeps it nor stage i+1 (in some of their modes),
  // a step frees it once stage i+1's forward has run, and the model would count it all along.
  // Such a stage i+1 is run as part of stage i (the runtime's joins), whose measurement then has
  // the step's bytes.
  std::vector<bool> frees_input;
  std::vector<bool> frees_output;
  // The first stage's forward wrote its input in place: the model's input, which the runtime's
  // stages run again from.
  bool first_writes_input = false;
};

// An out-of-memory error from monet's allocator, whichever way LibTorch passed it on (the
// measurement pass and a step tell it from other errors alike).
bool is_out_of_memory(const c10::Error& e);

// Measures `stages` on `input` through `pool`. With `find_variants`, every stage that called a
// variant-aware operator is measured in each OpMode, and a mode is kept in the stage's modes
// only when it keeps fewer bytes than every mode before it and holds nothing past its backward
// (a mode whose run throws, but for running out of memory, is not kept either); otherwise each
// stage's current modes are measured.
// `candidate_modes` are the modes tried when finding variants (kDefault first). `clock` says how
// stages on a CUDA device are timed. Each stage's modes are timed `repeats` times (at least once),
// keeping each mode's fastest time; bytes are those of the first run.
MeasuredChain measure_chain(std::vector<RuntimeStage>& stages, const at::Tensor& input,
                            CachingAllocator& pool, bool find_variants,
                            const std::vector<OpMode>& candidate_modes, StageClock clock,
                            int repeats = 1);

}  // namespace monet
