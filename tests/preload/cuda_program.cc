// A program for the preload's tests: `cuda_program LIB` loads LIB as Python loads an extension
// module (dlopen, RTLD_LOCAL), so that the CUDA runtime LIB links is out of the process's global
// scope, and runs its fake_cuda_user_run().
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  auto run = reinterpret_cast<int (*)()>(dlsym(lib, "fake_cuda_user_run"));
  if (run == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  return run();
}
