// monet-knobs: every MONET_* variable, its value in this environment (or its default) and its
// meaning. `monet knobs` runs it. `--defaults` prints each knob's name and default, a tab between,
// whatever the environment holds (the README's table is checked against it).
#include <cstring>
#include <iostream>

#include "common/env.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--defaults") == 0) {
    for (const monet::Knob& k : monet::knobs())
      std::cout << k.name << '\t' << k.default_value << '\n';
    return 0;
  }
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
    const bool known = help || std::strcmp(argv[1], "--defaults") == 0;
    if (!help || argc > 2) {
      // After a flag it knows, the argument it does not is the next one.
      std::cerr << "monet-knobs: unknown argument '" << argv[known ? 2 : 1] << "'\n";
    }
    (help && argc == 2 ? std::cout : std::cerr)
        << "usage: monet-knobs [--defaults]\n"
           "Prints every MONET_* knob, its value here (or its default) and its meaning;\n"
           "with --defaults, each knob's name and default.\n";
    return help && argc == 2 ? 0 : 2;
  }
  std::cout << monet::describe_knobs();
  return 0;
}
