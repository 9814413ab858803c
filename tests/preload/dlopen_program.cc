// Runs tests/preload/dlopen_caller.cc's dlopens, then one of the program's own by a $ORIGIN name
// (the loader keeps no origin for the main program until one is expanded); exits non-zero if any
// failed.
#include <dlfcn.h>

#include <cstdio>

extern "C" int open_neighbours();

int main() {
  int failures = open_neighbours();
  const char* name = "$ORIGIN/dlopen/dlopen_neighbours/libpreload_neighbour.so";
  if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
    auto answer = reinterpret_cast<int (*)()>(dlsym(handle, "neighbour_answer"));
    std::printf("the program's dlopen(%s): %d\n", name, answer != nullptr ? answer() : -1);
    dlclose(handle);
  } else {
    std::printf("the program's dlopen(%s) failed: %s\n", name, dlerror());
    ++failures;
  }
  std::printf("%s\n", failures == 0 ? "every neighbour found" : "a neighbour was not found");
  return failures == 0 ? 0 : 1;
}
