// monet-plan end to end: the command line, the outputs and the errors a user sees.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "monet/chain.h"
#include "planner/chain_json.h"
#include "predictor/predictor.h"

namespace {

struct ToolRun {
  int status = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ToolRun run_tool(const std::string& args) {
  // Per test, so that tests run in parallel (ctest -j) do not share files.
  const std::string base = ::testing::TempDir() + "/monet_plan_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string out = base + ".out", err = base + ".err";
  const std::string command =
      std::string(MONET_PLAN_TOOL) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int raw = std::system(command.c_str());
  ToolRun run;
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  run.out = slurp(out);
  run.err = slurp(err);
  return run;
}

std::string data(const char* name) { return std::string(MONET_PLANNER_TEST_DATA) + "/" + name; }

std::string write_temp(const char* name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(MonetPlan, Help) {
  const ToolRun run = run_tool("--help");
  EXPECT_EQ(run.status, 0);
  EXPECT_TRUE(contains(run.out, "usage: monet-plan --chain FILE --budget B")) << run.out;
}

TEST(MonetPlan, UsageErrors) {
  ToolRun run = run_tool("");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(
      run.err, "monet-plan: --chain FILE (or --predictor STATE with --shape DIMS) is required"))
      << run.err;
  EXPECT_TRUE(contains(run.err, "usage: monet-plan")) << run.err;
  run = run_tool("--chain " + data("bert_base_b32_s128.json"));
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "--budget B is required")) << run.err;
  run = run_tool("--chain x.json --budget 1G --fast");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "unknown argument '--fast'")) << run.err;
  run = run_tool("--chain x.json --budget");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "--budget needs a value")) << run.err;
}

TEST(MonetPlan, BadValues) {
  ToolRun run =
      run_tool("--chain " + data("bert_base_b32_s128.json") + " --budget 3GiB --strategy rotor");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "--strategy='rotor' is not a planner strategy")) << run.err;
  run = run_tool("--chain " + data("bert_base_b32_s128.json") + " --budget lots");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "--budget='lots'")) << run.err;
  run = run_tool("--chain /nonexistent.json --budget 1G");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "/nonexistent.json: cannot open the chain file")) << run.err;
}

// A small encoder-like chain whose costs follow batch x seq: four stages, the middle two with a
// lean variant.
monet::Chain chain_at(const monet::Shape& shape) {
  const std::int64_t tokens = shape[0] * shape[1];
  monet::Chain chain;
  chain.fixed_bytes = 1 << 20;
  for (int i = 0; i < 4; ++i) {
    monet::Stage stage;
    stage.name = "layer" + std::to_string(i);
    monet::VariantCosts v;
    v.out_bytes = 4096 * tokens;
    v.saved_bytes = 8192 * tokens + 64 * tokens * shape[1];
    v.fwd_peak = 2048 * tokens;
    v.bwd_peak = 4096 * tokens;
    v.fwd_time = 1e-4 + 2e-8 * static_cast<double>(tokens);
    v.bwd_time = 2e-4 + 4e-8 * static_cast<double>(tokens);
    stage.variants.push_back(v);
    if (i == 1 || i == 2) {
      monet::VariantCosts lean = v;
      lean.name = "compact";
      lean.saved_bytes = v.saved_bytes / 4;
      lean.bwd_time = v.bwd_time * 1.05;
      stage.variants.push_back(lean);
    }
    chain.stages.push_back(stage);
  }
  return chain;
}

// A predictor's state file, fitted on three shapes of chain_at, and the chain of one of them.
std::string predictor_state() {
  monet::PredictorOptions options;
  options.dim_names = {"batch", "seq"};
  monet::Predictor p = monet::Predictor::for_chain(chain_at({8, 64}), options);
  for (const monet::Shape& s : {monet::Shape{32, 512}, monet::Shape{4, 32}, monet::Shape{16, 64}}) {
    p.observe(s, chain_at(s));
  }
  const std::string path = ::testing::TempDir() + "/monet_plan_predictor_state.json";
  p.save(path);
  return path;
}

TEST(MonetPlan, PlansAPredictorsChainAtAShape) {
  const std::string state = predictor_state();
  // At a profiled shape the predictor's chain is the measured one: the same plan as the file's.
  const std::string chain_file =
      write_temp("predictor_shape_chain.json", monet::chain_to_json(chain_at({16, 64})));
  ToolRun from_state = run_tool("--predictor " + state +
                                " --shape 16x64 --fixed 1MiB --budget 60% --compare --json");
  ToolRun from_file = run_tool("--chain " + chain_file + " --budget 60% --compare --json");
  ASSERT_EQ(from_state.status, 0) << from_state.err;
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  // The same plans, the planning times apart.
  auto plans = [](const std::string& out) {
    nlohmann::json j = nlohmann::json::parse(out);
    for (auto& plan : j) plan.erase("plan_us");
    return j;
  };
  EXPECT_EQ(plans(from_state.out), plans(from_file.out));
  EXPECT_FALSE(contains(from_state.err, "not confident")) << from_state.err;
  // --fixed replaces the chain's fixed bytes (a saved state holds none).
  const ToolRun fixed =
      run_tool("--predictor " + state + " --shape 16x64 --fixed 3MiB --budget 1GiB");
  ASSERT_EQ(fixed.status, 0) << fixed.err;
  EXPECT_TRUE(contains(fixed.out, "fixed 3.00 MiB")) << fixed.out;
  // A shape the predictor has not measured is planned from its laws.
  const ToolRun predicted =
      run_tool("--predictor " + state + " --shape 8x128 --budget 50% --strategy monet --json");
  ASSERT_EQ(predicted.status, 0) << predicted.err;
  const auto j = nlohmann::json::parse(predicted.out);
  EXPECT_EQ(j["stages"].size(), 4u);
  EXPECT_LE(j["peak_bytes"].get<std::int64_t>(), j["budget_bytes"].get<std::int64_t>());
}

// --print-chain prints the chain it would plan: at a profiled shape the measured one, with --fixed,
// and a file's chain as the file has it; planned again from the printout, the same plans.
TEST(MonetPlan, PrintsTheChainItWouldPlan) {
  const std::string state = predictor_state();
  const ToolRun printed =
      run_tool("--predictor " + state + " --shape 16x64 --fixed 1MiB --print-chain");
  ASSERT_EQ(printed.status, 0) << printed.err;
  monet::Chain want = chain_at({16, 64});
  want.fixed_bytes = 1 << 20;
  EXPECT_EQ(printed.out, monet::chain_to_json(want) + "\n");
  const std::string unmeasured = write_temp(
      "printed_chain.json",
      run_tool("--predictor " + state + " --shape 8x128 --fixed 1MiB --print-chain").out);
  auto plans = [](const std::string& out) {
    nlohmann::json j = nlohmann::json::parse(out);
    for (auto& plan : j) plan.erase("plan_us");
    return j;
  };
  const ToolRun from_state = run_tool("--predictor " + state +
                                      " --shape 8x128 --fixed 1MiB --budget 60% --compare --json");
  const ToolRun from_file = run_tool("--chain " + unmeasured + " --budget 60% --compare --json");
  ASSERT_EQ(from_state.status, 0) << from_state.err;
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  EXPECT_EQ(plans(from_state.out), plans(from_file.out));
  const ToolRun file = run_tool("--chain " + data("bert_base_b32_s128.json") + " --print-chain");
  ASSERT_EQ(file.status, 0) << file.err;
  EXPECT_EQ(file.out,
            monet::chain_to_json(monet::read_chain_file(data("bert_base_b32_s128.json"))) + "\n");
  const ToolRun planned =
      run_tool("--chain " + data("bert_base_b32_s128.json") + " --print-chain --budget 50%");
  EXPECT_EQ(planned.status, 2);
  EXPECT_TRUE(contains(planned.err, "--print-chain plans nothing: leave out --budget, --strategy"))
      << planned.err;
}

// --laws prints what a state learned: its dims, its shapes, and each number's law with its check.
TEST(MonetPlan, PrintsAStatesLaws) {
  const std::string state = predictor_state();
  const ToolRun run = run_tool("--predictor " + state + " --laws");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(contains(run.out, state + ": 4 stages, varying dims batch x seq\n")) << run.out;
  EXPECT_TRUE(contains(run.out, "3 shapes measured: [32, 512], [4, 32], [16, 64]\n")) << run.out;
  // chain_at's laws, each exact at the three shapes.
  for (const char* line : {"  default      out_bytes    4096*batch*seq ",
                           "               saved_bytes  8192*batch*seq + 64*batch*seq^2 ",
                           "               fwd_time     0.0001 + 2e-08*batch*seq ",
                           "  compact      out_bytes    4096*batch*seq "}) {
    const std::size_t at = run.out.find(line);
    ASSERT_NE(at, std::string::npos) << line << "\n" << run.out;
    const std::string rest = run.out.substr(at, run.out.find('\n', at) - at);
    EXPECT_TRUE(contains(rest, "exact at 3 shapes")) << rest;
  }
  EXPECT_TRUE(contains(run.out, "\nlayer2\n  default ")) << run.out;

  // A state that has measured nothing says so.
  monet::Predictor fresh = monet::Predictor::for_chain(chain_at({8, 64}));
  const std::string empty = ::testing::TempDir() + "/monet_plan_fresh_state.json";
  fresh.save(empty);
  const ToolRun none = run_tool("--predictor " + empty + " --laws");
  ASSERT_EQ(none.status, 0) << none.err;
  EXPECT_TRUE(contains(none.out, "4 stages, varying dims none yet\n0 shapes measured\n"))
      << none.out;

  ToolRun bad = run_tool("--chain " + data("bert_base_b32_s128.json") + " --laws");
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, "--laws prints a predictor state's laws: give --predictor STATE"))
      << bad.err;
  bad = run_tool("--predictor " + state + " --laws --shape 8x64");
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, "give --predictor STATE alone")) << bad.err;
}

TEST(MonetPlan, SaysWhereThePredictorIsNotConfident) {
  // Far outside the profiled range (batch 4 to 32, seq 32 to 512).
  const ToolRun run =
      run_tool("--predictor " + predictor_state() + " --shape 256x4096 --budget 50%");
  EXPECT_TRUE(contains(run.err, "monet-plan: the predictor is not confident at 256x4096"))
      << run.err;
}

TEST(MonetPlan, PredictorUsageErrors) {
  const std::string state = predictor_state();
  ToolRun run = run_tool("--predictor " + state + " --budget 1GiB");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "--predictor STATE needs --shape DIMS")) << run.err;
  run = run_tool("--chain " + data("bert_base_b32_s128.json") + " --shape 8x64 --budget 1GiB");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "--shape DIMS goes with --predictor STATE")) << run.err;
  run = run_tool("--chain " + data("bert_base_b32_s128.json") + " --predictor " + state +
                 " --shape 8x64 --budget 1GiB");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "give --chain FILE or --predictor STATE, not both")) << run.err;
  run = run_tool("--predictor " + state + " --shape 8xx64 --budget 1GiB");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "--shape='8xx64': give the input's varying dims")) << run.err;
  run = run_tool("--predictor " + state + " --shape 8x64x3 --budget 1GiB");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "has 3 dims, but the shapes seen so far have 2")) << run.err;
  run = run_tool("--predictor /nonexistent/state.json --shape 8x64 --budget 1GiB");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "cannot read the state file '/nonexistent/state.json'")) << run.err;
  run = run_tool("--predictor " + state + " --shape 8x64 --fixed lots --budget 1GiB");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "--fixed")) << run.err;
}

TEST(MonetPlan, MalformedChainNamesFieldAndStage) {
  const std::string path = write_temp("malformed_chain.json", R"({"fixed_bytes": 0, "stages": [
      {"name": "b0", "variants": [{"name": "default", "out_bytes": 1, "saved_bytes": 1,
        "fwd_peak": 0, "bwd_peak": 0, "fwd_time": 0.1, "bwd_time": 0.2}]},
      {"name": "b1", "variants": [{"name": "default", "out_bytes": 1, "saved_bytes": "many",
        "fwd_peak": 0, "bwd_peak": 0, "fwd_time": 0.1, "bwd_time": 0.2}]}]})");
  const ToolRun run = run_tool("--chain " + path + " --budget 100");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err,
                       "stages[1] \"b1\": variants[0] \"default\": \"saved_bytes\" must "
                       "be a non-negative integer (bytes), got \"many\""))
      << run.err;
}

// Every number within 1 PiB, but 2,047 stages of them: refused, where planning never ended.
TEST(MonetPlan, ChainWhoseBytesSumPastTheLimitIsRefused) {
  monet::Chain chain;
  for (int i = 0; i < 2047; ++i) {
    monet::VariantCosts v;
    v.out_bytes = v.saved_bytes = std::int64_t{1} << 50;
    chain.stages.push_back(monet::Stage{"s" + std::to_string(i), {v}, std::int64_t{1} << 50});
  }
  const std::string path = write_temp("huge_chain.json", monet::chain_to_json(chain));
  const ToolRun run = run_tool("--chain " + path + " --budget 100%");
  EXPECT_EQ(run.status, 2);
  EXPECT_TRUE(contains(run.err, "stages[85] \"s85\": the chain's bytes pass 256 PiB (2^58 bytes)"))
      << run.err;
}

TEST(MonetPlan, TablePlan) {
  const ToolRun run = run_tool("--chain " + data("bert_base_b32_s128.json") + " --budget 60%");
  EXPECT_EQ(run.status, 0) << run.err;
  for (const char* part : {"stage", "plan", "variant", "retained", "layer11.ffn", "checkpoint",
                           "strategy monet", "peak", "time", "against no checkpointing"}) {
    EXPECT_TRUE(contains(run.out, part)) << part << "\n" << run.out;
  }
}

TEST(MonetPlan, JsonPlan) {
  const ToolRun run =
      run_tool("--chain " + data("resnet50_b32_i224.json") + " --budget 70% --strategy dp --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["strategy"], "dp");
  EXPECT_EQ(j["feasible"], true);
  EXPECT_LE(j["peak_bytes"].get<std::int64_t>(), j["budget_bytes"].get<std::int64_t>());
  ASSERT_EQ(j["stages"].size(), 18u);
  EXPECT_EQ(j["stages"][0]["name"], "stem");
  EXPECT_EQ(j["stages"][0]["variant"], "default");
  EXPECT_TRUE(j["stages"][0]["checkpoint"].is_boolean());
}

TEST(MonetPlan, Compare) {
  ToolRun run =
      run_tool("--chain " + data("bert_base_b32_s128.json") + " --budget 2.5GiB --compare --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto j = nlohmann::json::parse(run.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 6u);
  const char* names[] = {"none", "all", "sqrt", "greedy", "dp", "monet"};
  for (std::size_t k = 0; k < 6; ++k) EXPECT_EQ(j[k]["strategy"], names[k]);
  run = run_tool("--chain " + data("bert_base_b32_s128.json") + " --budget 2.5GiB --compare");
  ASSERT_EQ(run.status, 0) << run.err;
  for (const char* part :
       {"strategy", "least feasible", "overhead", "greedy", "monet", "keep:gelu_recompute"}) {
    EXPECT_TRUE(contains(run.out, part)) << part << "\n" << run.out;
  }
}

TEST(MonetPlan, InfeasibleBudgetSaysTheLeastThatFits) {
  ToolRun run = run_tool("--chain " + data("bert_base_b32_s128.json") + " --budget 1GiB");
  EXPECT_EQ(run.status, 1);
  EXPECT_TRUE(contains(run.out, "does not fit: the least budget the 'monet' strategy fits in is"))
      << run.out;
  run = run_tool("--chain " + data("bert_base_b32_s128.json") + " --budget 1GiB --json");
  EXPECT_EQ(run.status, 1);
  const auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["feasible"], false);
  EXPECT_GT(j["min_feasible_bytes"].get<std::int64_t>(), 1 << 30);
  EXPECT_TRUE(contains(run.err, "the least budget the 'monet' strategy fits in")) << run.err;
}

}  // namespace
