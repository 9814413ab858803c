// RetryMargins: the share of the budget that plans leave free, per input shape, for what the
// memory model does not count (the allocator's rounding and fragmentation, an optimizer's
// temporaries). It starts at Options::margin, rises for a shape whose batch ran out of memory and
// for the shapes planned after it, and comes down again after steps with no batch out of memory.
// Plain C++ (no LibTorch): the runtime's retry policy, testable from numbers alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "planner/shape_key.h"

namespace monet {

class RetryMargins {
 public:
  struct Options {
    std::int64_t budget_bytes = 0;  // the budget the plans share, bytes; > 0
    double margin = 0.10;           // share kept free before any retry (MONET_MARGIN)
    double retry_step = 0.10;       // what each retry adds to its shape's share
    // Steps in a row with no batch out of memory after which what retries added comes down by
    // one retry_step; 0 or less: never.
    int relax_steps = 200;
  };

  // A plan always keeps at least this much of the budget free: reserved memory grows by 2 MiB
  // granules, which a margin of a small budget would not cover.
  static constexpr std::int64_t kFloorBytes = std::int64_t{2} << 20;
  // No share kept free exceeds this.
  static constexpr double kMaxShare = 0.9;

  explicit RetryMargins(Options options) : options_(options) {}

  // The share of the budget a plan for `key` keeps free: the margin, raised by the retries of
  // this shape and, with `learned`, by those of any shape (learned_extra()); at most kMaxShare.
  double share(const ShapeKey& key, bool learned = true) const;
  // What a plan for `key` may use of the budget, bytes: all but max(share * budget, kFloorBytes).
  std::int64_t plan_budget(const ShapeKey& key, bool learned = true) const {
    return budget_less(share(key, learned));
  }
  // With the margin alone, before any retry raised it.
  std::int64_t unraised_plan_budget() const;
  // The budget less max(share * budget, kFloorBytes), bytes.
  std::int64_t budget_less(double share) const;

  // A batch of `key` ran out of memory under a plan made for `planned_for` bytes (0: not known).
  // Its shape keeps free from then on what that plan left free above the margin, plus one
  // retry_step; shapes planned after it start from at least that, since what the memory model
  // does not count is much the same from shape to shape.
  void ran_out_of_memory(const ShapeKey& key, std::int64_t planned_for);
  // A step ran with no batch out of memory. Returns true when that lowered what retries added (the
  // plans made with the higher shares are then stale and should be made again).
  bool step_ran();

  // What retries added, to a JSON file (written to `path`.tmp, then renamed), so that a job that
  // starts again does not lose batches to learn them again:
  //   {"format": "monet-retry-margins", "version": 1, "budget_bytes": B, "margin": 0.1,
  //    "learned_extra": 0.1, "shapes": [{"dims": [16, 384], "extra": 0.2}]}
  // Throws ConfigError when the file cannot be written.
  void save(const std::string& path) const;
  // Takes what a save() of the same budget and margin left in `path` and returns true. Returns
  // false, changing nothing, when the file does not exist or was saved for another budget or
  // margin (those shares would not fit this one's). Throws ConfigError, naming the file, when it
  // is malformed.
  bool load(const std::string& path);

  // The extra share carried to shapes planned after a retry: the largest a retry has needed.
  double learned_extra() const { return learned_extra_; }
  // The share a shape no retry has raised keeps free: the margin and learned_extra().
  double new_shape_share() const { return std::min(kMaxShare, options_.margin + learned_extra_); }

 private:
  Options options_;
  std::unordered_map<ShapeKey, double, ShapeKeyHash> extra_;  // per shape, from its retries
  double learned_extra_ = 0.0;
  int steps_without_retry_ = 0;  // steps in a row that ran out of memory on no attempt
};

}  // namespace monet
