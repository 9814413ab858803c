// A library that dlopens a neighbour the loader finds only through this library's own RUNPATH
// ($ORIGIN/dlopen_neighbours), as a pip-installed cuDNN loads its sub-libraries: by a bare name,
// and by a name with $ORIGIN in it. Under the preload both must still be found.
#include <dlfcn.h>

#include <cstdio>
#include <initializer_list>

extern "C" __attribute__((visibility("default"))) int open_neighbours() {
  int failures = 0;
  for (const char* name :
       {"libpreload_neighbour.so", "$ORIGIN/dlopen_neighbours/libpreload_neighbour.so"}) {
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      std::printf("dlopen(%s) failed: %s\n", name, dlerror());
      ++failures;
      continue;
    }
    auto answer = reinterpret_cast<int (*)()>(dlsym(handle, "neighbour_answer"));
    std::printf("dlopen(%s): %d\n", name, answer != nullptr ? answer() : -1);
    dlclose(handle);
  }
  return failures;
}
