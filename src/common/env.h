// Every MONET_* knob, read in one place. Each knob has an entry in the table in env.cc with its
// default and meaning; the README's table is the same list. Reading a name that is not in the
// table is a programming error (std::logic_error), so no knob goes undocumented.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace monet {

struct Knob {
  const char* name;           // "MONET_BUDGET"
  const char* default_value;  // as shown to users; "unset" where unset has a meaning
  const char* meaning;        // one line
};

// The table, in the order the README lists it.
const std::vector<Knob>& knobs();

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> env_value(std::string_view name);

// One line per knob: name, value in this process (or its default), meaning.
std::string describe_knobs();

}  // namespace monet
