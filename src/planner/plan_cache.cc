#include "planner/plan_cache.h"

#include <fmt/format.h>

#include <cmath>

#include "monet/errors.h"

namespace monet {

PlanCache::PlanCache(Options options) : options_(options) {
  if (options_.capacity == 0) {
    throw ConfigError("PlanCache: capacity must be at least 1 plan");
  }
  if (!std::isfinite(options_.peak_tolerance) || options_.peak_tolerance < 0.0) {
    throw ConfigError(fmt::format(
        "PlanCache: peak_tolerance must be a non-negative fraction (0.05 is 5%), got {}",
        options_.peak_tolerance));
  }
  index_.reserve(options_.capacity);
}

const PlanResult* PlanCache::find(const ShapeKey& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  order_.splice(order_.begin(), order_, it->second);
  return &it->second->second;
}

const PlanResult& PlanCache::insert(const ShapeKey& key, PlanResult plan) {
  const auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->second = std::move(plan);
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }
  if (index_.size() >= options_.capacity) {
    index_.erase(order_.back().first);
    order_.pop_back();
    ++stats_.evictions;
  }
  order_.emplace_front(key, std::move(plan));
  index_.emplace(key, order_.begin());
  return order_.front().second;
}

bool PlanCache::report_measured_peak(const ShapeKey& key, std::int64_t measured_peak_bytes) {
  const auto it = index_.find(key);
  if (it == index_.end()) return false;
  const double predicted = static_cast<double>(it->second->second.peak_bytes);
  const double error = std::fabs(static_cast<double>(measured_peak_bytes) - predicted);
  if (error <= options_.peak_tolerance * predicted) return false;
  order_.erase(it->second);
  index_.erase(it);
  ++stats_.invalidations;
  return true;
}

bool PlanCache::erase(const ShapeKey& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return false;
  order_.erase(it->second);
  index_.erase(it);
  ++stats_.invalidations;
  return true;
}

void PlanCache::clear() {
  order_.clear();
  index_.clear();
}

}  // namespace monet
