// A chain file as monet-plan reads it: anything is refused with a ConfigError or parsed, and a
// parsed chain plans under every strategy at a budget between its least and its peak, its plans
// judged by simulate() as the planners judged them.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "monet/errors.h"
#include "monet/planner.h"
#include "planner/chain_json.h"
#include "planner/simulate.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  monet::Chain chain;
  try {
    chain = monet::parse_chain_json(text, "chain.json");
  } catch (const monet::ConfigError&) {
    return 0;
  }
  const monet::PlanResult none = monet::Planner(monet::Strategy::kNone).try_plan(chain, 0);
  for (const monet::Strategy s : monet::all_strategies()) {
    const monet::PlanResult r = monet::Planner(s).try_plan(chain, none.peak_bytes / 2 + 1);
    if (monet::simulate(chain, r.plan).peak_bytes != r.peak_bytes) {
      std::fprintf(stderr, "strategy %s: the plan's peak is not simulate()'s\n",
                   std::string(monet::strategy_name(s)).c_str());
      std::abort();
    }
  }
  return 0;
}
