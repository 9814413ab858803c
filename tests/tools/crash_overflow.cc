// Overflows its stack under the crash report (tools/crash_report.h): the report must still be
// written, from the handler's own stack, before the process dies of SIGSEGV.
#include <cstdio>

#include "crash_report.h"

namespace {

// Each frame keeps a buffer the compiler cannot drop, and the call is not in tail position. The
// end is never reached: a kilobyte a frame overflows any stack long before.
volatile int no_end = 1 << 30;

int deeper(int depth) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  if (depth == no_end) return 0;
  return deeper(depth + 1) + frame[0];
}

}  // namespace

int main() {
  monet::tools::report_crashes("crash-overflow");
  std::printf("%d\n", deeper(0));
  return 0;
}
