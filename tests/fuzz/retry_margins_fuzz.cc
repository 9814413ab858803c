// The margins file a restarted job reads beside its predictor state (MONET_PREDICTOR_STATE and
// ".margins"): anything is refused with a ConfigError naming the file, passed over (another budget
// or margin), or taken; what was taken plans, relaxes and saves and loads again alike.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "monet/errors.h"
#include "planner/shape_key.h"
#include "runtime/retry_margins.h"

namespace {

const std::string& path() {
  static const std::string p = "/tmp/monet_retry_margins_fuzz." + std::to_string(getpid());
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::ofstream(path(), std::ios::binary)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  monet::RetryMargins::Options options;
  options.budget_bytes = std::int64_t{1} << 30;
  monet::RetryMargins margins(options);
  try {
    if (!margins.load(path())) return 0;
  } catch (const monet::ConfigError&) {
    return 0;
  }
  const monet::ShapeKey key({16, 384});
  const std::int64_t budget = margins.plan_budget(key);
  if (budget <= 0 || budget > options.budget_bytes) {
    std::fprintf(stderr, "retry_margins_fuzz: a plan budget of %lld of %lld\n",
                 static_cast<long long>(budget), static_cast<long long>(options.budget_bytes));
    std::abort();
  }
  margins.ran_out_of_memory(key, budget);
  margins.step_ran();
  margins.save(path());
  monet::RetryMargins again(options);
  if (!again.load(path()) || again.share(key) != margins.share(key)) {
    std::fprintf(stderr, "retry_margins_fuzz: a saved file loads otherwise\n");
    std::abort();
  }
  std::remove(path().c_str());
  return 0;
}
