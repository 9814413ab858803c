#include "planner/chain_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "monet/errors.h"

namespace monet {
namespace {

std::string stage_label(const Chain& chain, std::size_t index) {
  return fmt::format("stages[{}] \"{}\"", index, chain.stages[index].name);
}

// Where a field is, for an error message: made only when there is an error, since chains are
// checked on every plan.
std::string stage_where(const Chain& chain, std::string_view source, std::size_t stage) {
  return fmt::format("{}: {}", source, stage_label(chain, stage));
}

std::string variant_where(const Chain& chain, std::string_view source, std::size_t stage,
                          std::size_t variant) {
  return fmt::format("{}: variants[{}] \"{}\"", stage_where(chain, source, stage), variant,
                     chain.stages[stage].variants[variant].name);
}

// Whether `value` can be a byte count of a chain. The planners add these numbers in 64 bits, a
// stage's to its neighbours', and mark what no plan reaches with 2^61: a number far beyond any
// device's memory would overflow those sums or pass for that mark.
bool valid_bytes(std::int64_t value) { return value >= 0 && value <= kMaxChainBytes; }

// Why `value` is not valid_bytes().
std::string bytes_fault(const char* field, std::int64_t value) {
  if (value < 0) {
    return fmt::format("\"{}\" must be a non-negative number of bytes, got {}", field, value);
  }
  return fmt::format(
      "\"{}\" is {} bytes, more than the 1 PiB (2^50 bytes) a chain's numbers may be", field,
      value);
}

void check_bytes(const Chain& chain, std::string_view source, std::size_t stage,
                 std::size_t variant, const char* field, std::int64_t value) {
  if (!valid_bytes(value)) {
    throw ConfigError(fmt::format("{}: {}", variant_where(chain, source, stage, variant),
                                  bytes_fault(field, value)));
  }
}

void check_time(const Chain& chain, std::string_view source, std::size_t stage, std::size_t variant,
                const char* field, double value) {
  if (!std::isfinite(value) || value < 0.0) {
    throw ConfigError(
        fmt::format("{}: \"{}\" must be a non-negative, finite number of seconds, got {}",
                    variant_where(chain, source, stage, variant), field, value));
  }
  // The planners sum times over stages and their recomputations; the largest double summed
  // overflows to infinity, where no plan compares with another.
  if (value > kMaxChainSeconds) {
    throw ConfigError(fmt::format(
        "{}: \"{}\" is {} seconds, more than the 1e9 seconds (about 32 years) a chain's times "
        "may be",
        variant_where(chain, source, stage, variant), field, value));
  }
}

// The first index whose name repeats an earlier one, or names.size(). Chains are checked on
// every plan: long lists are sorted first, since a repeat is rare.
std::size_t first_repeat(const std::vector<std::string_view>& names) {
  if (names.size() > 8) {
    std::vector<std::string_view> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) return names.size();
  }
  for (std::size_t i = 1; i < names.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (names[i] == names[j]) return i;
    }
  }
  return names.size();
}

}  // namespace

void validate_chain(const Chain& chain, std::string_view source) {
  if (chain.stages.empty()) {
    throw ConfigError(
        fmt::format("{}: \"stages\" is empty; a chain needs at least one stage", source));
  }
  if (!valid_bytes(chain.fixed_bytes)) {
    throw ConfigError(fmt::format("{}: {}", source, bytes_fault("fixed_bytes", chain.fixed_bytes)));
  }
  // The errors come in the order of the fields, the first repeated name where it repeats.
  std::vector<std::string_view> names;
  names.reserve(chain.stages.size());
  for (const Stage& stage : chain.stages) names.push_back(stage.name);
  const std::size_t repeated_stage = first_repeat(names);
  // Each term is at most kMaxChainBytes once checked, so the sum cannot overflow before it passes
  // kMaxChainTotalBytes.
  std::int64_t total = chain.fixed_bytes;
  for (std::size_t i = 0; i < chain.stages.size(); ++i) {
    const Stage& stage = chain.stages[i];
    if (stage.name.empty()) {
      throw ConfigError(fmt::format("{}: \"name\" is empty", stage_where(chain, source, i)));
    }
    if (i == repeated_stage) {
      throw ConfigError(fmt::format("{}: \"name\" repeats an earlier stage's name",
                                    stage_where(chain, source, i)));
    }
    if (!valid_bytes(stage.grad_bytes)) {
      throw ConfigError(fmt::format("{}: {}", stage_where(chain, source, i),
                                    bytes_fault("grad_bytes", stage.grad_bytes)));
    }
    if (stage.variants.empty()) {
      throw ConfigError(
          fmt::format("{}: \"variants\" is empty; a stage needs at least its default variant",
                      stage_where(chain, source, i)));
    }
    names.clear();
    for (const VariantCosts& c : stage.variants) names.push_back(c.name);
    const std::size_t repeated_variant = first_repeat(names);
    for (std::size_t v = 0; v < stage.variants.size(); ++v) {
      const VariantCosts& c = stage.variants[v];
      if (c.name.empty()) {
        throw ConfigError(fmt::format("{}: \"name\" is empty", variant_where(chain, source, i, v)));
      }
      if (v == repeated_variant) {
        throw ConfigError(fmt::format("{}: \"name\" repeats an earlier variant's name",
                                      variant_where(chain, source, i, v)));
      }
      check_bytes(chain, source, i, v, "out_bytes", c.out_bytes);
      check_bytes(chain, source, i, v, "saved_bytes", c.saved_bytes);
      check_bytes(chain, source, i, v, "fwd_peak", c.fwd_peak);
      check_bytes(chain, source, i, v, "bwd_peak", c.bwd_peak);
      check_time(chain, source, i, v, "fwd_time", c.fwd_time);
      check_time(chain, source, i, v, "bwd_time", c.bwd_time);
    }
    std::int64_t out = 0, saved = 0, fwd_peak = 0, bwd_peak = 0;
    for (const VariantCosts& c : stage.variants) {
      out = std::max(out, c.out_bytes);
      saved = std::max(saved, c.saved_bytes);
      fwd_peak = std::max(fwd_peak, c.fwd_peak);
      bwd_peak = std::max(bwd_peak, c.bwd_peak);
    }
    total += stage.grad_bytes + out + saved + fwd_peak + bwd_peak;
    if (total > kMaxChainTotalBytes) {
      throw ConfigError(fmt::format(
          "{}: the chain's bytes pass 256 PiB (2^58 bytes) in all by this stage (fixed_bytes, "
          "and each stage's grad_bytes and largest out_bytes, saved_bytes, fwd_peak and "
          "bwd_peak); no device holds that, and the planners cannot sum it: give the numbers in "
          "bytes",
          stage_where(chain, source, i)));
    }
  }
}

void check_plan_shape(const Chain& chain, const Plan& plan) {
  if (plan.stages.size() != chain.stages.size()) {
    throw std::invalid_argument(fmt::format("plan has {} stages but the chain has {}",
                                            plan.stages.size(), chain.stages.size()));
  }
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const int v = plan.stages[i].variant;
    if (v < 0 || v >= static_cast<int>(chain.stages[i].variants.size())) {
      throw std::invalid_argument(
          fmt::format("plan: stage {} \"{}\" has no variant {}", i, chain.stages[i].name, v));
    }
  }
}

Plan uniform_plan(const Chain& chain, bool checkpoint) {
  Plan plan;
  plan.stages.assign(chain.stages.size(), StagePlan{checkpoint, 0});
  return plan;
}

std::int64_t retained_bytes(const Chain& chain, const Plan& plan, int index) {
  const StagePlan& stage = plan.stages[index];
  const std::int64_t input =
      index == 0 ? 0 : chain.stages[index - 1].variants[plan.stages[index - 1].variant].out_bytes;
  if (!stage.checkpoint) {
    return input + chain.stages[index].variants[stage.variant].saved_bytes;
  }
  return starts_segment(plan, index) ? input : 0;
}

int checkpointed_stages(const Plan& plan) {
  int n = 0;
  for (const StagePlan& s : plan.stages) n += s.checkpoint ? 1 : 0;
  return n;
}

void no_variant_faster_than_the_first(Chain* chain) {
  for (Stage& stage : chain->stages) {
    if (stage.variants.empty()) continue;
    const double fwd = stage.variants[0].fwd_time, bwd = stage.variants[0].bwd_time;
    for (std::size_t v = 1; v < stage.variants.size(); ++v) {
      stage.variants[v].fwd_time = std::max(stage.variants[v].fwd_time, fwd);
      stage.variants[v].bwd_time = std::max(stage.variants[v].bwd_time, bwd);
    }
  }
}

int non_default_variants(const Plan& plan) {
  int n = 0;
  for (const StagePlan& s : plan.stages) n += s.variant != 0 ? 1 : 0;
  return n;
}

}  // namespace monet
