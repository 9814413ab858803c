// Predictor's JSON state: to_json, from_json, save, load and check_layout (predictor.h). The format
// is in docs/predictor.md; the statistics are the state, the laws are refitted on load.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>

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

[[noreturn]] void malformed(const std::string& source, const std::string& what) {
  throw ConfigError(fmt::format(
      "monet predictor state '{}': {}; fix the file or delete it to start without a warm start",
      source, what));
}

// A JSON library error without its "[json.exception.type_error.302] " tag.
std::string plain(const json::exception& e) {
  const std::string what = e.what();
  const std::size_t tag_end = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos
             ? what.substr(tag_end + 2)
             : what;
}

// Reads a state, keeping where it is in the file, so that an error names the field at fault
// ("stages[3] \"attn\" variants[0] \"default\" measurements[1] \"fwd_time\" \"mean\": ...").
class StateReader {
 public:
  explicit StateReader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& what) const {
    malformed(source_, at_.empty() ? what : at_ + ": " + what);
  }
  // The field `key` of the object `j`; an error when `j` is not an object or has no `key`.
  const json& field(const json& j, const char* key) const {
    if (!j.is_object()) fail(fmt::format("must be a JSON object, got {}", j.type_name()));
    const auto it = j.find(key);
    if (it == j.end()) fail(fmt::format("\"{}\" is missing", key));
    return *it;
  }
  const json& array(const json& j, const char* key) const {
    const json& a = field(j, key);
    if (!a.is_array()) fail(fmt::format("\"{}\" must be an array, got {}", key, a.type_name()));
    return a;
  }
  std::int64_t integer(const json& j, const char* key) const {
    return as_integer(field(j, key), key);
  }
  std::int64_t as_integer(const json& v, const char* what) const {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX)) {
      fail(fmt::format("\"{}\" must be an integer, got {}", what, v.dump()));
    }
    return v.get<std::int64_t>();
  }
  int small_integer(const json& j, const char* key) const {
    const std::int64_t v = integer(j, key);
    if (v < INT32_MIN || v > INT32_MAX) fail(fmt::format("\"{}\" = {} is out of range", key, v));
    return static_cast<int>(v);
  }
  double number(const json& j, const char* key) const {
    const json& v = field(j, key);
    if (!v.is_number()) fail(fmt::format("\"{}\" must be a number, got {}", key, v.dump()));
    return v.get<double>();
  }
  double finite_nonnegative(const json& j, const char* key) const {
    const double d = number(j, key);
    if (!std::isfinite(d) || d < 0.0) {
      fail(fmt::format("\"{}\" = {} must be a finite number >= 0", key, d));
    }
    return d;
  }
  std::string string(const json& j, const char* key) const {
    const json& v = field(j, key);
    if (!v.is_string()) fail(fmt::format("\"{}\" must be a string, got {}", key, v.dump()));
    return v.get<std::string>();
  }

  // Fields left out keep their defaults, so that a state from an older monet still loads.
  PredictorOptions options(const json& j) const {
    PredictorOptions o;
    if (!j.is_object()) fail(fmt::format("must be a JSON object, got {}", j.type_name()));
    auto get_int = [&](const char* key, int& out) {
      if (j.contains(key)) out = small_integer(j, key);
    };
    auto get_double = [&](const char* key, double& out) {
      if (j.contains(key)) out = number(j, key);
    };
    if (j.contains("dim_names")) {
      const json& names = array(j, "dim_names");
      o.dim_names.clear();
      for (const json& n : names) {
        if (!n.is_string()) fail(fmt::format("\"dim_names\" must hold strings, got {}", n.dump()));
        o.dim_names.push_back(n.get<std::string>());
      }
    }
    get_int("max_terms", o.max_terms);
    get_int("max_total_degree", o.max_total_degree);
    get_int("min_profiled_shapes", o.min_profiled_shapes);
    get_double("bytes_tolerance", o.bytes_tolerance);
    get_double("time_tolerance", o.time_tolerance);
    get_double("bytes_slack", o.bytes_slack);
    get_double("time_slack", o.time_slack);
    get_double("time_share_slack", o.time_share_slack);
    get_double("extrapolation_limit", o.extrapolation_limit);
    get_double("bytes_noise_floor", o.bytes_noise_floor);
    get_double("time_noise_floor", o.time_noise_floor);
    return o;
  }

  std::string& at() { return at_; }

 private:
  const std::string& source_;
  std::string at_;
};

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
              {"measured_on", measured_on_},
              {"shapes", std::move(shapes)},
              {"stages", std::move(stages)}};
}

Predictor Predictor::from_json(const json& state, const std::string& source) {
  StateReader r(source);
  try {
    // A "format" of another type is another file's, as a missing one is.
    if (!state.is_object() || !state.contains("format") || state.at("format") != kFormat) {
      malformed(source,
                fmt::format("it is not a predictor state (no \"format\": \"{}\")", kFormat));
    }
    const std::int64_t version = r.integer(state, "version");
    if (version != kVersion) {
      malformed(source, fmt::format("version {} is not supported (this monet reads {})", version,
                                    kVersion));
    }
    const json& stages = r.array(state, "stages");
    std::vector<StageLayout> layout;
    for (std::size_t i = 0; i < stages.size(); ++i) {
      r.at() = fmt::format("stages[{}]", i);
      StageLayout l{r.string(stages[i], "name"), {}};
      r.at() += fmt::format(" \"{}\"", l.name);
      const json& variants = r.array(stages[i], "variants");
      const std::string stage_at = r.at();
      for (std::size_t v = 0; v < variants.size(); ++v) {
        r.at() = fmt::format("{} variants[{}]", stage_at, v);
        l.variants.push_back(r.string(variants[v], "name"));
      }
      layout.push_back(std::move(l));
    }
    r.at() = "options";
    PredictorOptions options =
        r.options(state.contains("options") ? state.at("options") : json::object());
    // The constructor refuses bad options (ConfigError) and a bad layout (std::invalid_argument):
    // both are named with the file and where in it, as every other fault is.
    Predictor p = [&]() {
      try {
        return Predictor(std::move(layout), std::move(options));
      } catch (const ConfigError& e) {
        constexpr std::string_view kPrefix = "monet predictor options: ";
        const std::string what = e.what();
        r.fail(what.rfind(kPrefix, 0) == 0 ? what.substr(kPrefix.size()) : what);
      } catch (const std::invalid_argument& e) {
        r.at().clear();
        r.fail(e.what());
      }
    }();
    r.at().clear();
    const std::int64_t fixed = state.contains("fixed_bytes") ? r.integer(state, "fixed_bytes") : 0;
    if (fixed < 0) malformed(source, fmt::format("fixed_bytes = {} is negative", fixed));
    if (fixed > kMaxChainBytes) {
      malformed(source, fmt::format("fixed_bytes = {} is more than a chain can hold ({}, 1 PiB)",
                                    fixed, kMaxChainBytes));
    }
    p.fixed_bytes_ = fixed;
    if (state.contains("measured_on")) p.measured_on_ = r.string(state, "measured_on");

    const json& shapes = r.array(state, "shapes");
    const std::int64_t dims = r.integer(state, "dims");
    if (!shapes.empty()) {
      if (dims < 1 || dims > kMaxDims) {
        malformed(source, fmt::format("dims = {} (1 to {} expected)", dims, kMaxDims));
      }
      p.start(static_cast<int>(dims));
    }
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const json& js = shapes[k];
      r.at() = fmt::format("shapes[{}]", k);
      bool ok = js.is_array() && static_cast<std::int64_t>(js.size()) == dims;
      Shape shape;
      for (std::size_t d = 0; ok && d < js.size(); ++d) {
        ok = js[d].is_number_integer() && r.as_integer(js[d], "dim") > 0;
        if (ok) shape.push_back(js[d].get<std::int64_t>());
      }
      if (!ok) r.fail(fmt::format("{} is not {} dims > 0", js.dump(), dims));
      if (p.table_->find(shape) >= 0) r.fail(fmt::format("{} repeats", js.dump()));
      p.table_->add(shape);
    }
    for (int i = 0; i < p.num_stages(); ++i) {
      const json& variants = stages[i].at("variants");
      for (int v = 0; v < static_cast<int>(variants.size()); ++v) {
        const std::string where = fmt::format("stages[{}] \"{}\" variants[{}] \"{}\"", i,
                                              p.layout_[i].name, v, p.layout_[i].variants[v]);
        r.at() = where;
        const json& measurements = r.array(variants[v], "measurements");
        for (std::size_t k = 0; k < measurements.size(); ++k) {
          const json& m = measurements[k];
          r.at() = fmt::format("{} measurements[{}]", where, k);
          const std::int64_t id = r.integer(m, "shape");
          if (p.profiled_shapes() == 0) {
            r.fail(fmt::format("shape index {} is out of range: \"shapes\" is empty", id));
          }
          if (id < 0 || id >= p.table_->size()) {
            r.fail(
                fmt::format("shape index {} is out of range (0 to {})", id, p.table_->size() - 1));
          }
          // A second entry would silently replace the first one's statistics.
          if (p.models_[i][v].measured(static_cast<int>(id))) {
            r.fail(fmt::format(
                "shape index {} is measured twice; give each shape's statistics once", id));
          }
          ShapeMeasurements sm;
          sm.count = r.integer(m, "count");
          if (sm.count < 1) r.fail("\"count\" must be >= 1");
          const std::string measurement_at = r.at();
          for (Quantity q : kAllQuantities) {
            const json& values = r.field(m, quantity_name(q));
            r.at() = fmt::format("{} \"{}\"", measurement_at, quantity_name(q));
            RunningValue& value = sm.values[static_cast<int>(q)];
            value.mean = r.finite_nonnegative(values, "mean");
            value.m2 = r.finite_nonnegative(values, "m2");
            value.max = r.finite_nonnegative(values, "max");
            // What observe() refuses, and statistics no measurements give: each would load and
            // then mislead every plan (a time the planner refuses, a spread that leaves no shape
            // confident).
            const double most =
                is_bytes(q) ? static_cast<double>(kMaxChainBytes) : kMaxChainSeconds;
            if (value.max > most) {
              r.fail(fmt::format("\"max\" = {} is more than a stage can {} ({} {})", value.max,
                                 is_bytes(q) ? "hold" : "take", most,
                                 is_bytes(q) ? "bytes, 1 PiB" : "s, about 32 years"));
            }
            if (value.max < value.mean * (1.0 - 1e-9)) {
              r.fail(
                  fmt::format("\"max\" = {} is below \"mean\" = {}; the largest measurement "
                              "cannot be below their mean",
                              value.max, value.mean));
            }
            if (sm.count == 1 && value.m2 != 0.0) {
              r.fail(
                  fmt::format("\"m2\" = {} with \"count\" 1; one measurement has no spread "
                              "(m2 0)",
                              value.m2));
            }
            r.at() = measurement_at;
          }
          p.models_[i][v].restore(static_cast<int>(id), sm);
        }
        r.at() = where;
        if (p.profiled_shapes() > 0) p.refit(i, v);
      }
    }
    // A shape no variant measured would count as profiled (widening the range predictions are
    // confident in) and never be asked for: observe() refuses a chain that measures nothing.
    for (int id = 0; id < p.profiled_shapes(); ++id) {
      bool measured = false;
      for (int i = 0; i < p.num_stages() && !measured; ++i) {
        for (const VariantModel& m : p.models_[i]) measured = measured || m.measured(id);
      }
      if (!measured) {
        r.at() = fmt::format("shapes[{}]", id);
        r.fail(fmt::format("{} is measured by no variant of any stage",
                           shapes[static_cast<std::size_t>(id)].dump()));
      }
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    r.fail(plain(e));
  } catch (const std::invalid_argument& e) {
    if (dynamic_cast<const ConfigError*>(&e)) throw;
    r.fail(e.what());
  }
}

void Predictor::save(const std::string& path) const {
  write_file_atomically(path, to_json().dump(1) + "\n", "monet predictor", "the state");
}

Predictor Predictor::load(const std::string& path) {
  // A folder opens as a file that reads empty, which would be called "not valid JSON".
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw ConfigError(fmt::format(
        "monet predictor: the state file '{}' is a folder; name the JSON file the predictor's "
        "state was saved to, or leave it unset to start without a warm start",
        path));
  }
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
  } catch (const json::exception& e) {  // a syntax error, or a number past a double's range
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
