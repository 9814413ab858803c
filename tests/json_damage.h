// Random damage to a JSON document: for tests that a reader refuses what it cannot read with a
// ConfigError naming the fault, and never crashes, hangs or reads a number that is not one.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

namespace monet::testing {

inline void collect_nodes(nlohmann::json& j, std::vector<nlohmann::json*>* out) {
  out->push_back(&j);
  if (j.is_object()) {
    for (auto& [key, value] : j.items()) collect_nodes(value, out);
  } else if (j.is_array()) {
    for (nlohmann::json& value : j) collect_nodes(value, out);
  }
}

// Replaces a node of `root`, chosen at random, with a value of another type or an extreme number,
// or drops an element or a field of it, or repeats its first element.
inline void damage(nlohmann::json& root, std::mt19937_64& rng) {
  std::vector<nlohmann::json*> nodes;
  collect_nodes(root, &nodes);
  nlohmann::json& n = *nodes[std::uniform_int_distribution<std::size_t>(0, nodes.size() - 1)(rng)];
  switch (std::uniform_int_distribution<int>(0, 15)(rng)) {
    case 0:
      n = -1;
      break;
    case 1:
      n = std::numeric_limits<double>::quiet_NaN();
      break;
    case 2:
      n = 1e308;
      break;
    case 3:
      n = "x";
      break;
    case 4:
      n = nlohmann::json::array();
      break;
    case 5:
      n = nlohmann::json::object();
      break;
    case 6:
      n = nullptr;
      break;
    case 7:
      n = std::int64_t{1} << 62;
      break;
    case 8:
      n = 0;
      break;
    case 9:
      n = std::numeric_limits<double>::infinity();
      break;
    case 10:
      n = std::numeric_limits<std::uint64_t>::max();
      break;
    case 11:
      n = 2.5;
      break;
    case 12:
      if (n.is_array() && !n.empty()) n.erase(n.size() - 1);
      break;
    case 13:
      if (n.is_array() && !n.empty()) n.push_back(n[0]);
      break;
    case 14:
      if (n.is_object() && !n.empty()) n.erase(n.begin());
      break;
    default:
      if (n.is_number()) n = n.get<double>() * 1e6;
      break;
  }
}

// A copy of `j` with one to three pieces of damage.
inline nlohmann::json damaged(const nlohmann::json& j, std::mt19937_64& rng) {
  nlohmann::json copy = j;
  for (int k = std::uniform_int_distribution<int>(1, 3)(rng); k > 0; --k) damage(copy, rng);
  return copy;
}

}  // namespace monet::testing
