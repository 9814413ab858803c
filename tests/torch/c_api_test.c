/* The C functions of include/monet/c_api.h from a C program that uses nothing else of monet: the
 * header compiles as C, host memory comes and goes within MONET_BUDGET (1 MiB, set by the test),
 * and the process ends cleanly after the statistics report at exit. Exits 0 when all holds.
 * With the argument "device -2", it asks for a block on that device index instead (which must
 * end the program with monet's message, not hand out host memory). */
#include <monet/c_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "c_api_test: %s\n", what);
    ++failures;
  }
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "device") == 0) {
    void* p = monet_malloc(16, atoi(argv[2]), NULL);
    printf("c_api_test: device %s gave a block at %p\n", argv[2], p);
    return 0;
  }
  void* a = monet_malloc(1000, -1, NULL);
  check(a != NULL, "monet_malloc(1000) on the host gave NULL");
  memset(a, 7, 1000);
  void* b = monet_try_malloc(4096, -1, NULL);
  check(b != NULL, "monet_try_malloc(4096) on the host gave NULL");
  size_t allocated = 0, reserved = 0, budget = 0;
  monet_memory_info(-1, &allocated, &reserved, &budget);
  check(allocated >= 5096, "monet_memory_info counts fewer bytes than the two blocks");
  check(reserved >= allocated, "monet_memory_info reserves less than it allocated");
  check(budget == 1 << 20, "monet_memory_info's budget is not MONET_BUDGET's 1 MiB");
  check(monet_try_malloc(2 << 20, -1, NULL) == NULL,
        "monet_try_malloc of 2 MiB under a 1 MiB budget did not give NULL");
  monet_free(a, 1000, -1, NULL);
  monet_free(b, 4096, -1, NULL);
  monet_free(NULL, 0, -1, NULL);
  monet_memory_info(-1, &allocated, NULL, NULL);
  check(allocated == 0, "bytes are still allocated after every block was freed");
  printf("c_api_test: %s\n", failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}
