// A predictor state as a restarted job or monet-plan --predictor reads it: anything is refused
// with a ConfigError or loaded, and a loaded state predicts, bounds, judges its confidence and
// chooses a shape to profile anywhere, and writes itself out again.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "monet/errors.h"
#include "predictor/predictor.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return 0;  // Predictor::load's own refusal of it is tested in predictor_json_test.cc
  }
  try {
    const monet::Predictor p = monet::Predictor::from_json(state, "state.json");
    if (p.num_dims() == 0) return 0;
    std::vector<monet::Shape> shapes = {monet::Shape(p.num_dims(), 1),
                                        monet::Shape(p.num_dims(), 7)};
    for (const monet::Shape& s : p.measured_shapes()) shapes.push_back(s);
    for (const monet::Shape& s : shapes) {
      p.predict(s);
      p.predict_with_bounds(s);
      p.confidence(s);
      p.coverage_gap(s);
    }
    p.next_shape_to_profile(shapes);
    monet::Predictor::from_json(p.to_json(), "written");
  } catch (const monet::ConfigError&) {
  }
  return 0;
}
