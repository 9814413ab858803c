// monet-plan end to end: the command line, the outputs and the errors a user sees.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

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
  EXPECT_TRUE(contains(run.err, "monet-plan: --chain FILE is required")) << run.err;
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
