// Predictor's JSON state: to_json, from_json, save, load and check_layout (predictor.h). The format
// is in docs/predictor.md; the statistics are the state, the laws are refitted on load.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "fmt/format.h"
#include "monet/errors.h"
#include "predictor/predictor.h"

namespace monet {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "monet-predictor-state";
constexpr int kVersion = 1;

json options_to_json(const PredictorOptions& o) {
  return json{{"dim_names", o.dim_names},
              {"max_terms", o.max_terms},
              {"max_total_degree", o.max_total_degree},
              {"min_profiled_shapes", o.min_profiled_shapes},
              {"bytes_tolerance", o.bytes_tolerance},
              {"time_tolerance", o.time_tolerance},
              {"bytes_slack", o.bytes_slack},
              {"time_slack", o.time_slack},
              {"time_share_slack", o.time_share_slack},
              {"extrapolation_limit", o.extrapolation_limit},
              {"bytes_noise_floor", o.bytes_noise_floor},
              {"time_noise_floor", o.time_noise_floor}};
}

// Fields left out keep their defaults, so that a state from an older monet still loads.
PredictorOptions options_from_json(const json& j) {
  PredictorOptions o;
  auto get = [&](const char* key, auto& field) {
    if (j.contains(key)) j.at(key).get_to(field);
  };
  get("dim_names", o.dim_names);
  get("max_terms", o.max_terms);
  get("max_total_degree", o.max_total_degree);
  get("min_profiled_shapes", o.min_profiled_shapes);
  get("bytes_tolerance", o.bytes_tolerance);
  get("time_tolerance", o.time_tolerance);
  get("bytes_slack", o.bytes_slack);
  get("time_slack", o.time_slack);
  get("time_share_slack", o.time_share_slack);
  get("extrapolation_limit", o.extrapolation_limit);
  get("bytes_noise_floor", o.bytes_noise_floor);
  get("time_noise_floor", o.time_noise_floor);
  return o;
}

[[noreturn]] void malformed(const std::string& source, const std::string& what) {
  throw ConfigError(fmt::format(
      "monet predictor state '{}': {}; fix the file or delete it to start without a warm start",
      source, what));
}

double finite_nonnegative(const json& j, const char* key, const std::string& source,
                          const std::string& where) {
  const double v = j.at(key).get<double>();
  if (!std::isfinite(v) || v < 0.0) {
    malformed(source, fmt::format("{}: {} = {} must be a finite number >= 0", where, key, v));
  }
  return v;
}

}  // namespace

json Predictor::to_json() const {
  json stages = json::array();
  for (int i = 0; i < num_stages(); ++i) {
    json variants = json::array();
    for (int v = 0; v < static_cast<int>(layout_[i].variants.size()); ++v) {
      const VariantModel& model = models_[i][v];
      json measurements = json::array();
      json laws = json::object();
      if (table_) {
        for (int id = 0; id < table_->size(); ++id) {
          if (!model.measured(id)) continue;
          const ShapeMeasurements& m = model.measurements(id);
          json entry{{"shape", id}, {"count", m.count}};
          for (Quantity q : kAllQuantities) {
            const RunningValue& r = m.values[static_cast<int>(q)];
            entry[quantity_name(q)] = json{{"mean", r.mean}, {"m2", r.m2}, {"max", r.max}};
          }
          measurements.push_back(std::move(entry));
        }
        for (Quantity q : kAllQuantities) {
          const FittedLaw& law = model.law(q);
          laws[quantity_name(q)] =
              json{{"law", law.law.describe(*basis_, options_.dim_names)},
                   {"points", law.points},
                   {"loo_error", law.validated() ? json(law.loo_error) : json(nullptr)}};
        }
      }
      variants.push_back(json{{"name", layout_[i].variants[v]},
                              {"measurements", std::move(measurements)},
                              {"laws", std::move(laws)}});
    }
    stages.push_back(json{{"name", layout_[i].name}, {"variants", std::move(variants)}});
  }
  json shapes = json::array();
  for (int id = 0; id < profiled_shapes(); ++id) shapes.push_back(table_->shape(id));
  return json{{"format", kFormat},
              {"version", kVersion},
              {"options", options_to_json(options_)},
              {"dims", num_dims()},
              {"fixed_bytes", fixed_bytes_},
              {"shapes", std::move(shapes)},
              {"stages", std::move(stages)}};
}

Predictor Predictor::from_json(const json& state, const std::string& source) {
  try {
    if (!state.is_object() || state.value("format", std::string()) != kFormat) {
      malformed(source,
                fmt::format("it is not a predictor state (no \"format\": \"{}\")", kFormat));
    }
    const int version = state.at("version").get<int>();
    if (version != kVersion) {
      malformed(source, fmt::format("version {} is not supported (this monet reads {})", version,
                                    kVersion));
    }
    std::vector<StageLayout> layout;
    for (const json& s : state.at("stages")) {
      StageLayout l{s.at("name").get<std::string>(), {}};
      for (const json& v : s.at("variants")) l.variants.push_back(v.at("name").get<std::string>());
      layout.push_back(std::move(l));
    }
    Predictor p(std::move(layout), options_from_json(state.value("options", json::object())));
    const std::int64_t fixed = state.value("fixed_bytes", std::int64_t{0});
    if (fixed < 0) malformed(source, fmt::format("fixed_bytes = {} is negative", fixed));
    p.fixed_bytes_ = fixed;

    const json& shapes = state.at("shapes");
    const int dims = state.at("dims").get<int>();
    if (shapes.empty()) return p;
    if (dims < 1 || dims > kMaxDims) {
      malformed(source, fmt::format("dims = {} (1 to {} expected)", dims, kMaxDims));
    }
    p.start(dims);
    for (const json& js : shapes) {
      const Shape shape = js.get<Shape>();
      bool ok = static_cast<int>(shape.size()) == dims;
      for (std::int64_t d : shape) ok = ok && d > 0;
      if (!ok) {
        malformed(source, fmt::format("shape {} is not {} dims > 0", js.dump(), dims));
      }
      if (p.table_->find(shape) >= 0) malformed(source, fmt::format("shape {} repeats", js.dump()));
      p.table_->add(shape);
    }
    const json& stages = state.at("stages");
    for (int i = 0; i < p.num_stages(); ++i) {
      const json& variants = stages[i].at("variants");
      for (int v = 0; v < static_cast<int>(variants.size()); ++v) {
        for (const json& m : variants[v].at("measurements")) {
          const std::string where =
              fmt::format("stage '{}' variant '{}'", p.layout_[i].name, p.layout_[i].variants[v]);
          const int id = m.at("shape").get<int>();
          if (id < 0 || id >= p.table_->size()) {
            malformed(source, fmt::format("{}: shape index {} is out of range (0 to {})", where, id,
                                          p.table_->size() - 1));
          }
          ShapeMeasurements sm;
          sm.count = m.at("count").get<std::int64_t>();
          if (sm.count < 1) malformed(source, fmt::format("{}: count must be >= 1", where));
          for (Quantity q : kAllQuantities) {
            const json& r = m.at(quantity_name(q));
            const std::string at = where + " " + quantity_name(q);
            RunningValue& value = sm.values[static_cast<int>(q)];
            value.mean = finite_nonnegative(r, "mean", source, at);
            value.m2 = finite_nonnegative(r, "m2", source, at);
            value.max = finite_nonnegative(r, "max", source, at);
          }
          p.models_[i][v].restore(id, sm);
        }
        p.refit(i, v);
      }
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    malformed(source, e.what());
  } catch (const std::invalid_argument& e) {
    if (dynamic_cast<const ConfigError*>(&e)) throw;
    malformed(source, e.what());
  }
}

void Predictor::save(const std::string& path) const {
  write_file_atomically(path, to_json().dump(1) + "\n", "monet predictor", "the state");
}

Predictor Predictor::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(fmt::format(
        "monet predictor: cannot read the state file '{}'; check the path, or leave it unset to "
        "start without a warm start",
        path));
  }
  std::stringstream text;
  text << in.rdbuf();
  json state;
  try {
    state = json::parse(text.str());
  } catch (const json::parse_error& e) {
    malformed(path, fmt::format("not valid JSON ({})", e.what()));
  }
  return from_json(state, path);
}

void Predictor::check_layout(const std::vector<StageLayout>& stages) const {
  auto differ = [](const std::string& what) {
    throw ConfigError("monet predictor: the warm-start state was saved for another model: " + what +
                      "; delete the state file, or give the one saved for this model");
  };
  if (stages.size() != layout_.size()) {
    differ(fmt::format("it has {} stages, the model {}", layout_.size(), stages.size()));
  }
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].name != layout_[i].name || stages[i].variants != layout_[i].variants) {
      differ(fmt::format("stage {} is '{}' there, '{}' here (or its variants differ)", i,
                         layout_[i].name, stages[i].name));
    }
  }
}

}  // namespace monet
