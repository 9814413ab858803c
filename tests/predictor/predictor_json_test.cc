// The state saves to JSON and loads back into a predictor that predicts the same; malformed
// states are refused with a ConfigError.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "monet/errors.h"
#include "predictor/predictor.h"
#include "synthetic_models.h"
#include "tests/json_damage.h"

namespace monet {
namespace {

Predictor trained() {
  PredictorOptions options;
  options.dim_names = {"batch", "seq"};
  Predictor p = Predictor::for_chain(testing::synthetic_transformer({8, 64}, 2), options);
  for (Shape s : {Shape{32, 512}, Shape{4, 32}, Shape{24, 64}}) {
    p.observe(s, testing::synthetic_transformer(s, 2));
    p.observe(s, testing::synthetic_transformer(s, 2));
  }
  p.set_fixed_bytes(12345);
  p.set_measured_on("input int64 on cpu; parameters float32; every parameter trains");
  return p;
}

void expect_same(const Chain& a, const Chain& b) {
  ASSERT_EQ(a.stages.size(), b.stages.size());
  EXPECT_EQ(a.fixed_bytes, b.fixed_bytes);
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    EXPECT_EQ(a.stages[i].name, b.stages[i].name);
    const VariantCosts& x = a.stages[i].variants[0];
    const VariantCosts& y = b.stages[i].variants[0];
    EXPECT_EQ(x.out_bytes, y.out_bytes);
    EXPECT_EQ(x.saved_bytes, y.saved_bytes);
    EXPECT_EQ(x.fwd_peak, y.fwd_peak);
    EXPECT_EQ(x.bwd_peak, y.bwd_peak);
    EXPECT_DOUBLE_EQ(x.fwd_time, y.fwd_time);
    EXPECT_DOUBLE_EQ(x.bwd_time, y.bwd_time);
  }
}

TEST(PredictorJson, RoundTripPredictsTheSame) {
  const Predictor p = trained();
  const Predictor q = Predictor::from_json(p.to_json());
  EXPECT_EQ(q.profiled_shapes(), 3);
  EXPECT_EQ(q.num_dims(), 2);
  for (Shape s : {Shape{32, 512}, Shape{16, 100}, Shape{6, 48}}) {
    expect_same(p.predict(s), q.predict(s));
    EXPECT_EQ(p.confidence(s).confident, q.confidence(s).confident);
  }
  EXPECT_EQ(p.describe_law(0, 0, Quantity::kSavedBytes),
            q.describe_law(0, 0, Quantity::kSavedBytes));
  EXPECT_EQ(q.measured_on(), p.measured_on());
}

// A state from a monet that did not say what it measured on loads, saying nothing; a
// "measured_on" that is not a string is refused.
TEST(PredictorJson, MeasuredOnIsOptionalAndAString) {
  nlohmann::json j = trained().to_json();
  j.erase("measured_on");
  EXPECT_EQ(Predictor::from_json(j).measured_on(), "");
  j["measured_on"] = 3;
  EXPECT_THROW(Predictor::from_json(j), ConfigError);
}

TEST(PredictorJson, SaveAndLoadAFile) {
  const Predictor p = trained();
  const std::string path = ::testing::TempDir() + "/predictor_state.json";
  p.save(path);
  const Predictor q = Predictor::load(path);
  expect_same(p.predict({12, 200}), q.predict({12, 200}));
  q.check_layout(p.layout());
  std::remove(path.c_str());
}

TEST(PredictorJson, StateHoldsStatisticsAndReadableLaws) {
  const nlohmann::json j = trained().to_json();
  EXPECT_EQ(j.at("format"), "monet-predictor-state");
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("shapes").size(), 3u);
  const nlohmann::json& v = j.at("stages").at(0).at("variants").at(0);
  EXPECT_EQ(v.at("measurements").at(0).at("count"), 2);
  EXPECT_TRUE(v.at("measurements").at(0).at("out_bytes").contains("mean"));
  EXPECT_NE(v.at("laws").at("fwd_peak").at("law").get<std::string>().find("batch*seq^2"),
            std::string::npos);
}

TEST(PredictorJson, EmptyPredictorRoundTrips) {
  Predictor p(std::vector<StageLayout>{{"a"}, {"b", {"default", "inplace"}}});
  const Predictor q = Predictor::from_json(p.to_json());
  EXPECT_EQ(q.num_stages(), 2);
  EXPECT_EQ(q.profiled_shapes(), 0);
}

TEST(PredictorJson, MalformedStatesAreConfigErrors) {
  nlohmann::json j = trained().to_json();
  EXPECT_THROW(Predictor::from_json(nlohmann::json::object()), ConfigError);
  nlohmann::json bad = j;
  bad["version"] = 99;
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
  bad = j;
  bad["shapes"][0] = {1, 2, 3};
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
  bad = j;
  bad["stages"][0]["variants"][0]["measurements"][0]["shape"] = 7;
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
  bad = j;
  bad["stages"][0]["variants"][0]["measurements"][0]["out_bytes"]["mean"] = -1.0;
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
  bad = j;
  bad["stages"][0].erase("variants");
  EXPECT_THROW(Predictor::from_json(bad), ConfigError);
}

std::string error_of(const nlohmann::json& state) {
  try {
    Predictor::from_json(state, "s.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A shape no variant measured would count as profiled, widen the range predictions are confident
// in, and never be asked for (observe() refuses a chain that measures nothing).
TEST(PredictorJson, AShapeNoVariantMeasuredIsRefused) {
  nlohmann::json j = trained().to_json();
  j["shapes"].push_back({256, 4096});
  EXPECT_EQ(error_of(j),
            "monet predictor state 's.json': shapes[3]: [256,4096] is measured by no variant of "
            "any stage; fix the file or delete it to start without a warm start");
}

// A hand-edited or damaged state is refused with where in the file the fault is, never loaded
// from a number that is not one.
TEST(PredictorJson, AnErrorNamesTheFieldAtFault) {
  const nlohmann::json j = trained().to_json();
  const std::string stage0 = "stages[0] \"" + j["stages"][0]["name"].get<std::string>() + "\"";
  nlohmann::json bad = j;
  bad["stages"][0]["variants"][0]["measurements"][1]["fwd_time"]["m2"] = "x";
  EXPECT_EQ(error_of(bad), "monet predictor state 's.json': " + stage0 +
                               " variants[0] \"default\" measurements[1] \"fwd_time\": \"m2\" "
                               "must be a number, got \"x\"; fix the file or delete it to start "
                               "without a warm start");
  bad = j;
  bad["stages"][0]["variants"][0]["measurements"][0].erase("count");
  EXPECT_NE(error_of(bad).find(stage0 + " variants[0] \"default\" measurements[0]: \"count\" is "
                                        "missing"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["stages"][0]["variants"][0]["measurements"][0]["shape"] = 1e300;
  EXPECT_NE(error_of(bad).find("measurements[0]: \"shape\" must be an integer, got 1e+300"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["shapes"][1][0] = 4.5;
  EXPECT_NE(error_of(bad).find("shapes[1]: [4.5,32] is not 2 dims > 0"), std::string::npos)
      << error_of(bad);
  bad = j;
  bad["options"]["max_terms"] = 1e300;
  EXPECT_NE(error_of(bad).find("options: \"max_terms\" must be an integer, got 1e+300"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["stages"][1]["variants"] = nlohmann::json::object();
  EXPECT_NE(error_of(bad).find("stages[1] \"" + j["stages"][1]["name"].get<std::string>() +
                               "\": \"variants\" must be an array, got object"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["format"] = 1;
  EXPECT_NE(error_of(bad).find("'s.json': it is not a predictor state (no \"format\": "
                               "\"monet-predictor-state\")"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["dims"] = "two";
  EXPECT_NE(error_of(bad).find("'s.json': \"dims\" must be an integer, got \"two\""),
            std::string::npos)
      << error_of(bad);
}

// Faults the reader does not meet field by field are named the same way: an option out of range
// (once a bare "monet predictor options: ..." that named no file), measurements of a state whose
// shapes are gone (once loaded as no measurements at all), and a shape measured twice in a variant
// (once loaded as its last entry, the first one's statistics lost).
TEST(PredictorJson, OptionsAndMeasurementsOutOfPlaceNameTheFile) {
  const nlohmann::json j = trained().to_json();
  const std::string variant0 =
      "stages[0] \"" + j["stages"][0]["name"].get<std::string>() + "\" variants[0] \"default\"";
  nlohmann::json bad = j;
  bad["options"]["max_terms"] = 9;
  EXPECT_EQ(error_of(bad),
            "monet predictor state 's.json': options: max_terms is 9; use 1 to 4; fix the file or "
            "delete it to start without a warm start");
  bad = j;
  bad["options"]["extrapolation_limit"] = 0.5;
  EXPECT_NE(error_of(bad).find("'s.json': options: extrapolation_limit is 0.5"), std::string::npos)
      << error_of(bad);
  bad = j;
  bad["shapes"] = nlohmann::json::array();
  EXPECT_NE(error_of(bad).find(variant0 +
                               " measurements[0]: shape index 0 is out of range: \"shapes\" is "
                               "empty"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  nlohmann::json& measurements = bad["stages"][0]["variants"][0]["measurements"];
  measurements.push_back(measurements[0]);
  measurements.back()["out_bytes"]["max"] = 5.0;
  EXPECT_NE(error_of(bad).find(variant0 + " measurements[3]: shape index 0 is measured twice"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["stages"][1]["variants"].push_back(bad["stages"][1]["variants"][0]);
  EXPECT_NE(error_of(bad).find("'s.json': monet predictor: stage '"), std::string::npos)
      << error_of(bad);
}

// Numbers observe() would refuse, and statistics no measurements give, are refused at load with
// the field: loaded, a time past 1e9 s made every plan at the shape fail with an error that named
// "chain", not the file, and a spread at one measurement left no shape confident.
TEST(PredictorJson, NumbersNoMeasurementGivesAreRefused) {
  const nlohmann::json j = trained().to_json();
  const std::string at = "measurements[0] \"fwd_time\": ";
  nlohmann::json bad = j;
  nlohmann::json& m = bad["stages"][0]["variants"][0]["measurements"][0];
  m["fwd_time"]["mean"] = 1e12;
  m["fwd_time"]["max"] = 1e12;
  EXPECT_NE(error_of(bad).find(at + "\"max\" = 1000000000000 is more than a stage can take"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["stages"][0]["variants"][0]["measurements"][0]["out_bytes"]["max"] = 1e17;
  EXPECT_NE(error_of(bad).find("\"out_bytes\": \"max\" = 1e+17 is more than a "
                               "stage can hold"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  nlohmann::json& low = bad["stages"][0]["variants"][0]["measurements"][0]["fwd_time"];
  low["max"] = low["mean"].get<double>() / 2;
  EXPECT_NE(error_of(bad).find(at + "\"max\" = "), std::string::npos) << error_of(bad);
  EXPECT_NE(error_of(bad).find("is below \"mean\""), std::string::npos) << error_of(bad);
  bad = j;
  nlohmann::json& once = bad["stages"][0]["variants"][0]["measurements"][0];
  once["count"] = 1;
  once["fwd_time"]["m2"] = 1e3;
  EXPECT_NE(error_of(bad).find(at + "\"m2\" = 1000 with \"count\" 1"), std::string::npos)
      << error_of(bad);
  bad = j;
  bad["fixed_bytes"] = std::int64_t{1} << 62;
  EXPECT_NE(error_of(bad).find("fixed_bytes = 4611686018427387904 is more than a chain can hold"),
            std::string::npos)
      << error_of(bad);
  // What a predictor saves loads: its maxima are at or above its means, and one measurement's
  // spread is 0.
  Predictor one = Predictor::for_chain(testing::synthetic_transformer({8, 64}, 2), {});
  one.observe({8, 64}, testing::synthetic_transformer({8, 64}, 2));
  EXPECT_EQ(error_of(one.to_json()), "");
  EXPECT_EQ(error_of(j), "");
}

// observe() refuses bytes above what a chain may hold, as it does such times.
TEST(PredictorJson, ObserveRefusesBytesNoChainHolds) {
  Predictor p = Predictor::for_chain(testing::synthetic_transformer({8, 64}, 2), {});
  Chain c = testing::synthetic_transformer({8, 64}, 2);
  c.stages[0].variants[0].saved_bytes = kMaxChainBytes + 1;
  try {
    p.observe({8, 64}, c);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("saved_bytes = 1125899906842625 bytes is more than a "
                                         "stage can hold"),
              std::string::npos)
        << e.what();
  }
}

// Damaged states, at random: each loads (and then predicts) or is refused with a ConfigError;
// nothing else escapes, and under ASan and UBSan (scripts/test) nothing reads a bad number.
TEST(PredictorJson, RandomDamageLoadsOrIsRefused) {
  const nlohmann::json state = trained().to_json();
  std::mt19937_64 rng(7);
  int loaded = 0;
  int refused = 0;
  for (int i = 0; i < 500; ++i) {
    const nlohmann::json j = testing::damaged(state, rng);
    try {
      const Predictor p = Predictor::from_json(j, "s.json");
      ++loaded;
      if (p.num_dims() == 0) continue;
      const Shape shape(static_cast<std::size_t>(p.num_dims()), 16);
      (void)p.predict_with_bounds(shape);
      (void)p.confidence(shape);
      (void)p.next_shape_to_profile({shape, Shape(static_cast<std::size_t>(p.num_dims()), 4)});
      (void)p.to_json();
    } catch (const ConfigError& e) {
      ++refused;
      EXPECT_EQ(std::string(e.what()).rfind("monet predictor", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(loaded, 50);
  EXPECT_GT(refused, 50);
}

TEST(PredictorJson, MissingOrBrokenFileIsAConfigError) {
  EXPECT_THROW(Predictor::load("/nonexistent/monet/state.json"), ConfigError);
  const std::string path = ::testing::TempDir() + "/broken_state.json";
  std::ofstream(path) << "{ not json";
  try {
    Predictor::load(path);
    ADD_FAILURE() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  // A number past a double's range: nlohmann's out_of_range, not its parse_error.
  std::ofstream(path) << R"({"format": "monet-predictor-state", "version": 1, "dims": 1e400})";
  try {
    Predictor::load(path);
    ADD_FAILURE() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON ([json.exception.out_of_range.406]"),
              std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
  // A folder opens as a file that reads empty: it was called "not valid JSON", to be fixed or
  // deleted.
  const std::string folder = ::testing::TempDir();
  try {
    Predictor::load(folder);
    ADD_FAILURE() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind(
            "monet predictor: the state file '" + folder + "' is a folder; name the JSON file", 0),
        0u)
        << e.what();
  }
}

TEST(PredictorJson, LayoutOfAnotherModelIsAConfigError) {
  const Predictor p = trained();
  std::vector<StageLayout> other = p.layout();
  other[1].name = "something_else";
  EXPECT_THROW(p.check_layout(other), ConfigError);
  other.pop_back();
  EXPECT_THROW(p.check_layout(other), ConfigError);
}

}  // namespace
}  // namespace monet
