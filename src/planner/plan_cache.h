// PlanCache: plans by ShapeKey, so that an input shape met before is planned in well under a
// microsecond. Bounded: when full, the least recently used plan goes. A plan whose measured peak
// turns out to differ from its simulated peak is dropped, so the next batch of that shape is
// planned again from the predictor's corrected chain.
//
// Not thread-safe: one cache belongs to one runtime thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>

#include "monet/planner.h"
#include "planner/shape_key.h"

namespace monet {

class PlanCache {
 public:
  struct Options {
    std::size_t capacity = 256;  // plans kept; at least 1
    // report_measured_peak() drops a plan whose measured peak is off its simulated peak by more
    // than this fraction of the simulated peak, either way: above, the plan is unsafe; below, it
    // recomputes more than it needs to.
    double peak_tolerance = 0.05;
  };

  struct Stats {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t evictions = 0;      // dropped because the cache was full
    std::uint64_t invalidations = 0;  // dropped by report_measured_peak() or erase()
  };

  PlanCache() : PlanCache(Options{}) {}
  // Throws ConfigError for a capacity of 0 or a negative or non-finite tolerance.
  explicit PlanCache(Options options);

  // The plan for `key`, now the most recently used, or nullptr. The pointer stays valid until
  // the next insert(), report_measured_peak(), erase() or clear().
  const PlanResult* find(const ShapeKey& key);

  // Stores `plan` for `key` (replacing any), evicting the least recently used plan when full.
  const PlanResult& insert(const ShapeKey& key, PlanResult plan);

  // What the allocator measured for an iteration that ran `key`'s plan. Drops the plan and
  // returns true when it differs from the plan's peak_bytes by more than peak_tolerance; returns
  // false otherwise, or when no plan for `key` is cached.
  bool report_measured_peak(const ShapeKey& key, std::int64_t measured_peak_bytes);

  // Drops `key`'s plan; true when there was one.
  bool erase(const ShapeKey& key);
  // Drops every plan (a new budget, say); the statistics stay.
  void clear();

  std::size_t size() const { return index_.size(); }
  const Options& options() const { return options_; }
  const Stats& stats() const { return stats_; }

 private:
  using Entry = std::pair<ShapeKey, PlanResult>;
  using Order = std::list<Entry>;  // most recently used first

  Options options_;
  Order order_;
  std::unordered_map<ShapeKey, Order::iterator, ShapeKeyHash> index_;
  Stats stats_;
};

}  // namespace monet
