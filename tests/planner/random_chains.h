// Random chains for the planner's tests and benchmark: stage costs drawn at random, each extra
// variant trading memory for time the way MONeT's operator variants do (or, with
// arbitrary_variants, in any mix).
#pragma once

#include <cstdint>
#include <random>

#include "monet/chain.h"

namespace monet::testing {

struct RandomChainOptions {
  int stages = 8;
  int min_variants = 1;  // per stage, default included
  int max_variants = 1;
  // When false, extra variants also change out_bytes (as noisy predictions do).
  bool same_out_bytes = true;
  // When true, extra variants draw their saved and peak bytes and their times afresh, as the
  // default's are drawn, each on its own: a variant may keep less and be faster, or keep more and
  // be slower, in any mix, which no trade-off does. out_bytes as same_out_bytes says.
  bool arbitrary_variants = false;
  std::int64_t fixed_bytes = 1000;
  // When above 0, each stage's grad_bytes is drawn from 0..max_grad_bytes (after its variants,
  // so that chains drawn without it are unchanged).
  std::int64_t max_grad_bytes = 0;
};

// Sizes are small integers (tens to hundreds of bytes), times a few seconds: the planner only
// cares about ratios, and small numbers give ties, which the exactness tests must handle too.
Chain random_chain(std::mt19937_64& rng, const RandomChainOptions& options);

// A budget drawn uniformly between `low` and `high` (inclusive).
std::int64_t random_budget(std::mt19937_64& rng, std::int64_t low, std::int64_t high);

}  // namespace monet::testing
