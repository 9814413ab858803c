#include "planner/chain_json.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>

#include "monet/errors.h"
#include "planner/chain_model.h"

namespace monet {
namespace {

using nlohmann::json;

// Field access with errors that say where: `where` is "chain.json: stages[2] "b2": variants[0]".
class Fields {
 public:
  Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  void require_object(const char* what) const {
    if (!object_.is_object()) {
      fail(fmt::format("must be a JSON object ({}), got {}", what, shown(object_)));
    }
  }

  // Every key must be one of `allowed`.
  void only(std::initializer_list<const char*> allowed) const {
    for (const auto& item : object_.items()) {
      bool known = false;
      std::string list;
      for (const char* name : allowed) {
        known = known || item.key() == name;
        list += fmt::format("{}{}", list.empty() ? "" : ", ", name);
      }
      if (!known) fail(fmt::format("unknown field \"{}\" (the fields are {})", item.key(), list));
    }
  }

  const json& at(const char* field) const {
    const auto it = object_.find(field);
    if (it == object_.end()) fail(fmt::format("field \"{}\" is missing", field));
    return *it;
  }

  std::string string(const char* field) const {
    const json& v = at(field);
    if (!v.is_string()) fail_field(field, "must be a string", v);
    return v.get<std::string>();
  }

  std::int64_t bytes(const char* field) const {
    const json& v = at(field);
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
        fail_field(field, "is too large", v);
      }
      return static_cast<std::int64_t>(v.get<std::uint64_t>());
    }
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
      fail_field(field, "must be a non-negative integer (bytes)", v);
    }
    return v.get<std::int64_t>();
  }

  bool has(const char* field) const { return object_.find(field) != object_.end(); }

  double seconds(const char* field) const {
    const json& v = at(field);
    if (!v.is_number() || v.get<double>() < 0.0) {
      fail_field(field, "must be a non-negative number (seconds)", v);
    }
    return v.get<double>();
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw ConfigError(fmt::format("{}: {}", where_, why));
  }

 private:
  static std::string shown(const json& v) {
    std::string text = v.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
  }

  [[noreturn]] void fail_field(const char* field, const char* why, const json& v) const {
    fail(fmt::format("\"{}\" {}, got {}", field, why, shown(v)));
  }

  const json& object_;
  std::string where_;
};

// A name for messages before the stage's own "name" is known to be a string.
std::string name_of(const json& object) {
  if (object.is_object()) {
    const auto it = object.find("name");
    if (it != object.end() && it->is_string()) return it->get<std::string>();
  }
  return "?";
}

VariantCosts parse_variant(const json& value, const std::string& where) {
  const Fields f(value, where);
  f.require_object("a variant");
  f.only({"name", "out_bytes", "saved_bytes", "fwd_peak", "bwd_peak", "fwd_time", "bwd_time"});
  VariantCosts c;
  c.name = f.string("name");
  c.out_bytes = f.bytes("out_bytes");
  c.saved_bytes = f.bytes("saved_bytes");
  c.fwd_peak = f.bytes("fwd_peak");
  c.bwd_peak = f.bytes("bwd_peak");
  c.fwd_time = f.seconds("fwd_time");
  c.bwd_time = f.seconds("bwd_time");
  return c;
}

Stage parse_stage(const json& value, const std::string& where) {
  const Fields f(value, where);
  f.require_object("a stage");
  f.only({"name", "variants", "grad_bytes"});
  Stage stage;
  stage.name = f.string("name");
  if (f.has("grad_bytes")) stage.grad_bytes = f.bytes("grad_bytes");
  const json& variants = f.at("variants");
  if (!variants.is_array() || variants.empty()) {
    f.fail("\"variants\" must be a non-empty array; the first variant is the default one");
  }
  for (std::size_t v = 0; v < variants.size(); ++v) {
    stage.variants.push_back(parse_variant(
        variants[v], fmt::format("{}: variants[{}] \"{}\"", where, v, name_of(variants[v]))));
  }
  return stage;
}

}  // namespace

Chain parse_chain_json(std::string_view text, std::string_view source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number past a double's range
    throw ConfigError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  const Fields f(root, std::string(source));
  f.require_object("the chain");
  f.only({"fixed_bytes", "stages"});
  Chain chain;
  chain.fixed_bytes = f.bytes("fixed_bytes");
  const json& stages = f.at("stages");
  if (!stages.is_array() || stages.empty()) {
    f.fail("\"stages\" must be a non-empty array of stages");
  }
  for (std::size_t i = 0; i < stages.size(); ++i) {
    chain.stages.push_back(parse_stage(
        stages[i], fmt::format("{}: stages[{}] \"{}\"", source, i, name_of(stages[i]))));
  }
  validate_chain(chain, source);
  return chain;
}

Chain read_chain_file(const std::string& path) {
  // A folder opens as a file that reads empty, which would be called "not valid JSON".
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw ConfigError(fmt::format("{}: is a folder; name the chain's JSON file", path));
  }
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot open the chain file", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(fmt::format("{}: cannot read the chain file", path));
  return parse_chain_json(text.str(), path);
}

std::string chain_to_json(const Chain& chain) {
  nlohmann::ordered_json root;
  root["fixed_bytes"] = chain.fixed_bytes;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const Stage& stage : chain.stages) {
    nlohmann::ordered_json s;
    s["name"] = stage.name;
    nlohmann::ordered_json variants = nlohmann::ordered_json::array();
    for (const VariantCosts& c : stage.variants) {
      nlohmann::ordered_json v;
      v["name"] = c.name;
      v["out_bytes"] = c.out_bytes;
      v["saved_bytes"] = c.saved_bytes;
      v["fwd_peak"] = c.fwd_peak;
      v["bwd_peak"] = c.bwd_peak;
      v["fwd_time"] = c.fwd_time;
      v["bwd_time"] = c.bwd_time;
      variants.push_back(std::move(v));
    }
    s["variants"] = std::move(variants);
    if (stage.grad_bytes != 0) s["grad_bytes"] = stage.grad_bytes;
    stages.push_back(std::move(s));
  }
  root["stages"] = std::move(stages);
  return root.dump(2) + "\n";
}

}  // namespace monet
