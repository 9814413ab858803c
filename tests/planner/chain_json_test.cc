#include "planner/chain_json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "monet/errors.h"
#include "monet/planner.h"
#include "random_chains.h"
#include "tests/json_damage.h"

namespace monet {
namespace {

const char* kGood = R"({"fixed_bytes": 100,
  "stages": [{"name": "block0",
              "variants": [{"name": "default", "out_bytes": 10, "saved_bytes": 20,
                            "fwd_peak": 5, "bwd_peak": 7, "fwd_time": 0.5, "bwd_time": 1}]},
             {"name": "block1",
              "variants": [{"name": "default", "out_bytes": 10, "saved_bytes": 20,
                            "fwd_peak": 5, "bwd_peak": 7, "fwd_time": 0.5, "bwd_time": 1.0},
                           {"name": "lean", "out_bytes": 10, "saved_bytes": 2,
                            "fwd_peak": 5, "bwd_peak": 7, "fwd_time": 0.6, "bwd_time": 1.5}]}]})";

std::string error_of(const std::string& text) {
  try {
    parse_chain_json(text, "c.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(ChainJson, Parses) {
  const Chain chain = parse_chain_json(kGood);
  EXPECT_EQ(chain.fixed_bytes, 100);
  ASSERT_EQ(chain.stages.size(), 2u);
  EXPECT_EQ(chain.stages[1].name, "block1");
  ASSERT_EQ(chain.stages[1].variants.size(), 2u);
  EXPECT_EQ(chain.stages[1].variants[1].name, "lean");
  EXPECT_EQ(chain.stages[1].variants[1].saved_bytes, 2);
  EXPECT_DOUBLE_EQ(chain.stages[0].variants[0].bwd_time, 1.0);
}

TEST(ChainJson, RoundTrips) {
  std::mt19937_64 rng(51);
  testing::RandomChainOptions options;
  options.stages = 9;
  options.max_variants = 3;
  const Chain chain = testing::random_chain(rng, options);
  const Chain back = parse_chain_json(chain_to_json(chain));
  EXPECT_EQ(chain_to_json(back), chain_to_json(chain));
  EXPECT_EQ(back.stages[4].variants.size(), chain.stages[4].variants.size());
  EXPECT_EQ(back.stages[4].variants[0].fwd_time, chain.stages[4].variants[0].fwd_time);
}

// A stage's "grad_bytes" is optional: 0 when absent, written only when not 0.
TEST(ChainJson, GradBytesAreOptional) {
  EXPECT_EQ(parse_chain_json(kGood).stages[0].grad_bytes, 0);
  EXPECT_EQ(chain_to_json(parse_chain_json(kGood)).find("grad_bytes"), std::string::npos);
  const std::string with =
      replaced(kGood, "{\"name\": \"block1\",", "{\"name\": \"block1\", \"grad_bytes\": 64,");
  const Chain chain = parse_chain_json(with);
  EXPECT_EQ(chain.stages[1].grad_bytes, 64);
  EXPECT_EQ(parse_chain_json(chain_to_json(chain)).stages[1].grad_bytes, 64);
  EXPECT_EQ(error_of(replaced(with, "64", "-64")),
            "c.json: stages[1] \"block1\": \"grad_bytes\" must be a non-negative integer "
            "(bytes), got -64");
}

TEST(ChainJson, ErrorsNameTheStageTheVariantAndTheField) {
  EXPECT_EQ(error_of(replaced(kGood, "\"saved_bytes\": 2,", "\"saved_bytes\": -2,")),
            "c.json: stages[1] \"block1\": variants[1] \"lean\": \"saved_bytes\" must be a "
            "non-negative integer (bytes), got -2");
  EXPECT_EQ(error_of(replaced(kGood, "\"out_bytes\": 10, \"saved_bytes\": 2,", "")),
            "c.json: stages[1] \"block1\": variants[1] \"lean\": field \"out_bytes\" is missing");
  EXPECT_EQ(error_of(replaced(kGood, "\"fwd_time\": 0.6", "\"fwd_time\": \"fast\"")),
            "c.json: stages[1] \"block1\": variants[1] \"lean\": \"fwd_time\" must be a "
            "non-negative number (seconds), got \"fast\"");
  EXPECT_EQ(error_of(replaced(kGood, "\"out_bytes\": 10, \"saved_bytes\": 20,",
                              "\"out_bytes\": 1.5, \"saved_bytes\": 20,")),
            "c.json: stages[0] \"block0\": variants[0] \"default\": \"out_bytes\" must be a "
            "non-negative integer (bytes), got 1.5");
}

TEST(ChainJson, UnknownFieldsAreErrors) {
  const std::string what =
      error_of(replaced(kGood, "\"fwd_peak\": 5, \"bwd_peak\": 7, \"fwd_time\": 0.6",
                        "\"fwd_peek\": 5, \"bwd_peak\": 7, \"fwd_time\": 0.6"));
  EXPECT_NE(what.find("stages[1] \"block1\": variants[1] \"lean\": unknown field \"fwd_peek\""),
            std::string::npos)
      << what;
  EXPECT_NE(error_of(replaced(kGood, "\"fixed_bytes\"", "\"fixed\"")).find("unknown field"),
            std::string::npos);
}

TEST(ChainJson, StructureErrors) {
  EXPECT_NE(error_of("{").find("c.json: not valid JSON"), std::string::npos);
  // A number past a double's range is no JSON number monet can read (it was nlohmann's own
  // out_of_range exception, naming no file).
  EXPECT_NE(error_of(replaced(kGood, "\"fixed_bytes\": 100", "\"fixed_bytes\": 1e400"))
                .find("c.json: not valid JSON: [json.exception.out_of_range.406] number overflow"),
            std::string::npos)
      << error_of(replaced(kGood, "\"fixed_bytes\": 100", "\"fixed_bytes\": 1e400"));
  EXPECT_NE(error_of("[]").find("must be a JSON object (the chain)"), std::string::npos);
  EXPECT_NE(error_of(R"({"fixed_bytes": 0, "stages": []})").find("non-empty array of stages"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"fixed_bytes": 0, "stages": [{"name": "x", "variants": []}]})"),
            "c.json: stages[0] \"x\": \"variants\" must be a non-empty array; the first variant "
            "is the default one");
  EXPECT_NE(error_of(R"({"fixed_bytes": 0, "stages": [{"variants": []}]})")
                .find("stages[0] \"?\": field \"name\" is missing"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"fixed_bytes": 0, "stages": [3]})")
                .find("stages[0] \"?\": must be a JSON object (a stage)"),
            std::string::npos);
  const std::string dup = replaced(kGood, "\"name\": \"lean\"", "\"name\": \"default\"");
  EXPECT_NE(error_of(dup).find("repeats an earlier variant's name"), std::string::npos);
}

// Damaged chains, at random: each parses and plans under every strategy, within the budget where
// a plan fits, or is refused with a ConfigError naming the file; nothing else escapes, nothing
// hangs, and under ASan and UBSan (scripts/test) no sum overflows.
TEST(ChainJson, RandomDamageParsesAndPlansOrIsRefused) {
  std::mt19937_64 rng(11);
  testing::RandomChainOptions options;
  options.stages = 8;
  options.max_variants = 3;
  const nlohmann::json chain =
      nlohmann::json::parse(chain_to_json(testing::random_chain(rng, options)));
  int planned = 0;
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    const nlohmann::json j = testing::damaged(chain, rng);
    try {
      const Chain c = parse_chain_json(j.dump(), "c.json");
      ++planned;
      for (Strategy s : all_strategies()) {
        for (std::int64_t budget : {c.fixed_bytes, std::numeric_limits<std::int64_t>::max()}) {
          const PlanResult r = Planner(s).try_plan(c, budget);
          if (r.feasible) {
            EXPECT_LE(r.peak_bytes, budget) << strategy_name(s);
          }
        }
      }
    } catch (const ConfigError& e) {
      ++refused;
      EXPECT_EQ(std::string(e.what()).rfind("c.json", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(planned, 30);
  EXPECT_GT(refused, 30);
}

TEST(ChainJson, MissingFileIsAConfigError) {
  EXPECT_THROW(read_chain_file("/nonexistent/chain.json"), ConfigError);
}

// A folder opens as a file that reads empty: it was called "not valid JSON".
TEST(ChainJson, AFolderIsNamedAsOne) {
  const std::string folder = ::testing::TempDir();
  try {
    read_chain_file(folder);
    ADD_FAILURE() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), folder + ": is a folder; name the chain's JSON file");
  }
}

}  // namespace
}  // namespace monet
