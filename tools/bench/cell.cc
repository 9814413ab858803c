#include "bench/cell.h"

namespace monet::bench {
namespace {

nlohmann::ordered_json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

PoolWork PoolWork::between(const MemoryStats& before, const MemoryStats& after) {
  PoolWork w;
  w.cache_flushes = after.cache_flushes - before.cache_flushes;
  w.out_of_memory = after.out_of_memory - before.out_of_memory;
  w.out_of_memory_in_pieces = after.out_of_memory_in_pieces - before.out_of_memory_in_pieces;
  w.segment_reserves = after.segment_reserves - before.segment_reserves;
  w.segment_releases = after.segment_releases - before.segment_releases;
  w.committed_bytes = after.committed_bytes_total - before.committed_bytes_total;
  w.decommitted_bytes = after.decommitted_bytes_total - before.decommitted_bytes_total;
  w.decommits = after.decommits - before.decommits;
  return w;
}

PoolWork& PoolWork::operator+=(const PoolWork& o) {
  cache_flushes += o.cache_flushes;
  out_of_memory += o.out_of_memory;
  out_of_memory_in_pieces += o.out_of_memory_in_pieces;
  segment_reserves += o.segment_reserves;
  segment_releases += o.segment_releases;
  committed_bytes += o.committed_bytes;
  decommitted_bytes += o.decommitted_bytes;
  decommits += o.decommits;
  return *this;
}

nlohmann::ordered_json to_json(const PoolWork& w) {
  return {{"cache_flushes", w.cache_flushes},
          {"out_of_memory", w.out_of_memory},
          {"out_of_memory_in_pieces", w.out_of_memory_in_pieces},
          {"segment_reserves", w.segment_reserves},
          {"segment_releases", w.segment_releases},
          {"committed_bytes", w.committed_bytes},
          {"decommitted_bytes", w.decommitted_bytes},
          {"decommits", w.decommits}};
}

nlohmann::ordered_json to_json(const Cell& c) {
  return {
      {"model", c.model},
      {"strategy", c.strategy},
      {"warm", c.warm},
      {"autocast", c.autocast},
      {"budget_percent", c.budget_percent},
      {"budget_bytes", c.budget_bytes},
      {"margin", c.strategy == "none" ? nlohmann::ordered_json(nullptr)  // no budget, no margin
                                      : nlohmann::ordered_json(c.margin_percent / 100.0)},
      {"feasible", c.feasible},
      {"least_budget_bytes", c.feasible || c.least_budget_bytes == 0
                                 ? nlohmann::ordered_json(nullptr)
                                 : nlohmann::ordered_json(c.least_budget_bytes)},
      {"error",
       c.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.error)},
      {"peak_bytes", c.peak_bytes},
      {"peak_in_use_bytes", c.peak_in_use_bytes},
      {"peak_over_budget", c.budget_bytes > 0 ? number_or_null(static_cast<double>(c.peak_bytes) /
                                                               static_cast<double>(c.budget_bytes))
                                              : nlohmann::ordered_json(nullptr)},
      {"iterations", c.iterations},
      {"retries", c.stats.retries},
      {"plans", c.stats.plans_made},
      {"cache_hits", c.stats.cache_hits},
      {"cache_hit_rate", number_or_null(c.cache_hit_rate())},
      {"plan_us_mean", number_or_null(c.plan_us())},
      {"measured_shapes", c.stats.profiled_steps},
      {"predictor_error", number_or_null(c.predictor_error)},
      {"predictor_error_max", number_or_null(c.predictor_error_max)},
      {"predictor_bias", number_or_null(c.predictor_bias)},
      {"seconds", c.seconds},
      {"baseline_seconds", c.baseline_seconds},
      {"overhead", number_or_null(c.overhead)},
      {"rounds", c.rounds},
      {"overhead_se", number_or_null(c.overhead_se)},
      {"overhead_rounds", c.round_overheads},
      {"against_best_other",
       c.rival.empty() ? nlohmann::ordered_json(nullptr)
                       : nlohmann::ordered_json{{"strategy", c.rival},
                                                {"difference", number_or_null(c.rival_difference)},
                                                {"se", number_or_null(c.rival_difference_se)}}},
      {"baseline_runs", c.baseline_runs},
      {"planned_overhead", number_or_null(c.planned_overhead())},
      {"stage_share", number_or_null(c.stage_share())},
      {"plans_by_shape", c.plans_by_shape},
      {"allocator",  // none for the baseline, whose runs are not cells
       c.strategy == "none" ? nlohmann::ordered_json(nullptr) : to_json(c.pool)},
      {"against_dp_by_plan",
       std::isfinite(c.alike_points)
           ? nlohmann::ordered_json{{"alike",
                                     {{"shapes", c.alike_shapes},
                                      {"points", 100.0 * c.alike_points}}},
                                    {"apart",
                                     {{"shapes", c.apart_shapes},
                                      {"points", number_or_null(100.0 * c.apart_points)}}}}
           : nlohmann::ordered_json(nullptr)},
      {"steps_by_shape", [&] {
         nlohmann::ordered_json o = nlohmann::ordered_json::object();
         for (const auto& [shape, steps] : c.steps_by_shape) {
           o[shape] = {{"steps", steps.steps},
                       {"seconds", steps.seconds},
                       {"planned_seconds", steps.planned_seconds},
                       {"unconstrained_seconds", steps.unconstrained_seconds}};
         }
         return o;
       }()}};
}

}  // namespace monet::bench
