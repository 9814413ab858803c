// monet-knobs: every MONET_* variable, its value in this environment (or its default) and its
// meaning. `monet knobs` runs it.
#include <iostream>

#include "common/env.h"

int main() {
  std::cout << monet::describe_knobs();
  return 0;
}
