// Runs tests/preload/dlopen_caller.cc's dlopens; exits non-zero if any failed.
#include <cstdio>

extern "C" int open_neighbours();

int main() {
  const int failures = open_neighbours();
  std::printf("%s\n", failures == 0 ? "every neighbour found" : "a neighbour was not found");
  return failures == 0 ? 0 : 1;
}
