#include "common/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace monet {

const std::vector<Knob>& knobs() {
  // Never destroyed: the statistics report at exit reads MONET_STATS through it, from a handler
  // std::atexit may have registered before the table was made, which would run after its
  // destructor (a C program's first monet_free did that, and crashed at exit).
  static const std::vector<Knob>* table = new std::vector<Knob>{
      {"MONET_BUDGET", "unset (no cap)",
       "Cap on the bytes monet holds from the training device, cached or in use: 8GiB, 8G, "
       "7500MB, 512MiB, 1073741824, or 60% of the device's memory (of RAM on CPU)."},
      {"MONET_CPU_BUDGET", "unset (no cap)",
       "Cap on monet's CPU pool when a GPU is the training device (same forms as MONET_BUDGET)."},
      {"MONET_CUDA_SEGMENTS", "whole",
       "How monet holds CUDA memory: whole (cudaMalloc segments) or expandable (address ranges "
       "whose memory is mapped 2 MiB at a time, so changing shapes fragment less)."},
      {"MONET_LOG", "warn", "How much monet says on stderr: error, warn, info or debug."},
      {"MONET_MARGIN", "10%",
       "Share of the budget that plans leave free for what the memory model does not count "
       "(allocator rounding, optimizer temporaries); a batch that runs out of memory raises it "
       "by 10 points for its shape, and what retries added comes down 10 points after each 200 "
       "steps without one. 0 to 90%, as 15% or 0.15."},
      {"MONET_MEASURE_REPEATS", "1",
       "Times each stage's operator modes are timed when a new shape is measured, keeping each "
       "mode's fastest (1 to 20): 3 costs about two more steps' work per measured shape and "
       "keeps the planner from choosing a mode for one lucky timing on a noisy machine."},
      {"MONET_PLANNER", "monet",
       "How plans are chosen: none, all, sqrt, greedy, dp or monet (docs/planner.md)."},
      {"MONET_PREDICTOR_STATE", "unset",
       "JSON file the runtime's predictor warm-starts from when it exists and saves to after "
       "every measured shape, so that a restarted job measures none of the shapes it covers; "
       "what retries added to the margin is kept beside it (the same path and .margins)."},
      {"MONET_STAGE_CLOCK", "auto",
       "How a measured shape's stages are timed on a GPU: auto (the device's busy time from "
       "CUPTI's kernel, copy and memset records; the wall clock where CUPTI does not load) or "
       "wall. The CPU is timed by the wall clock."},
      {"MONET_STATS", "auto",
       "Print the allocator's statistics at exit: 1, 0, or auto (under the preload or the "
       "pluggable hook when monet served any allocation; always when MONET_LOG is info or "
       "debug)."},
      {"MONET_TRACE", "unset",
       "File to write every allocation and free to (docs/trace.md); replay it with monet-replay."},
  };
  return *table;
}

std::optional<std::string> env_value(std::string_view name) {
  const auto& table = knobs();
  const bool known =
      std::any_of(table.begin(), table.end(), [&](const Knob& k) { return name == k.name; });
  if (!known) throw std::logic_error(fmt::format("{} is not in monet's knob table", name));
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string describe_knobs() {
  std::size_t name_width = 0;
  for (const Knob& k : knobs()) name_width = std::max(name_width, std::strlen(k.name));
  std::string out;
  for (const Knob& k : knobs()) {
    const char* value = std::getenv(k.name);
    out += fmt::format("{:<{}} {:<16} {}\n", k.name, name_width,
                       value != nullptr && *value != '\0' ? value : k.default_value, k.meaning);
  }
  return out;
}

}  // namespace monet
