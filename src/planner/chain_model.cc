#include "planner/chain_model.h"

#include <fmt/format.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

#include "monet/errors.h"

namespace monet {
namespace {

std::string stage_label(const Chain& chain, std::size_t index) {
  return fmt::format("stages[{}] \"{}\"", index, chain.stages[index].name);
}

void check_bytes(std::string_view where, const char* field, std::int64_t value) {
  if (value < 0) {
    throw ConfigError(fmt::format("{}: \"{}\" must be a non-negative number of bytes, got {}",
                                  where, field, value));
  }
}

void check_time(std::string_view where, const char* field, double value) {
  if (!std::isfinite(value) || value < 0.0) {
    throw ConfigError(
        fmt::format("{}: \"{}\" must be a non-negative, finite number of seconds, got {}", where,
                    field, value));
  }
}

}  // namespace

void validate_chain(const Chain& chain, std::string_view source) {
  if (chain.stages.empty()) {
    throw ConfigError(
        fmt::format("{}: \"stages\" is empty; a chain needs at least one stage", source));
  }
  check_bytes(source, "fixed_bytes", chain.fixed_bytes);
  std::set<std::string> stage_names;
  for (std::size_t i = 0; i < chain.stages.size(); ++i) {
    const Stage& stage = chain.stages[i];
    const std::string label = fmt::format("{}: {}", source, stage_label(chain, i));
    if (stage.name.empty()) throw ConfigError(fmt::format("{}: \"name\" is empty", label));
    if (!stage_names.insert(stage.name).second) {
      throw ConfigError(fmt::format("{}: \"name\" repeats an earlier stage's name", label));
    }
    if (stage.variants.empty()) {
      throw ConfigError(fmt::format(
          "{}: \"variants\" is empty; a stage needs at least its default variant", label));
    }
    std::set<std::string> variant_names;
    for (std::size_t v = 0; v < stage.variants.size(); ++v) {
      const VariantCosts& c = stage.variants[v];
      const std::string where = fmt::format("{}: variants[{}] \"{}\"", label, v, c.name);
      if (c.name.empty()) throw ConfigError(fmt::format("{}: \"name\" is empty", where));
      if (!variant_names.insert(c.name).second) {
        throw ConfigError(fmt::format("{}: \"name\" repeats an earlier variant's name", where));
      }
      check_bytes(where, "out_bytes", c.out_bytes);
      check_bytes(where, "saved_bytes", c.saved_bytes);
      check_bytes(where, "fwd_peak", c.fwd_peak);
      check_bytes(where, "bwd_peak", c.bwd_peak);
      check_time(where, "fwd_time", c.fwd_time);
      check_time(where, "bwd_time", c.bwd_time);
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
  const bool starts_segment = index == 0 || !plan.stages[index - 1].checkpoint;
  return starts_segment ? input : 0;
}

int checkpointed_stages(const Plan& plan) {
  int n = 0;
  for (const StagePlan& s : plan.stages) n += s.checkpoint ? 1 : 0;
  return n;
}

int non_default_variants(const Plan& plan) {
  int n = 0;
  for (const StagePlan& s : plan.stages) n += s.variant != 0 ? 1 : 0;
  return n;
}

}  // namespace monet
