// Runs a plan: kept stages normally, each maximal run of checkpointed stages as one segment
// (checkpoint.h), every stage in the operator mode of its planned variant.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "monet/planner.h"
#include "runtime/stage.h"

namespace monet {

// The output of the last stage of `stages` on `input` under `plan` (one StagePlan per stage).
// `anchor`: see run_checkpointed.
at::Tensor run_plan(const std::vector<RuntimeStage>& stages, const Plan& plan,
                    const at::Tensor& input, const at::Tensor& anchor);

// "KKCCSk": one letter per stage, K kept, C checkpointed, S checkpointed and starting a new
// segment right after another; lower case for a non-default variant.
std::string describe_plan(const Plan& plan);

}  // namespace monet
