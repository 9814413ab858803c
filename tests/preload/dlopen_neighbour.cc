// The neighbour tests/preload/dlopen_caller.cc loads.
extern "C" __attribute__((visibility("default"))) int neighbour_answer() { return 42; }
