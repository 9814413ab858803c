// A crash report for the command-line tools: on SIGSEGV, SIGBUS, SIGFPE or SIGILL, the tool's name,
// the signal and the native stack go to stderr, and the process then dies of the same signal (its
// exit status is what it would have been). A crash on a machine one reaches only through logs, a
// leased GPU machine, then says where it happened. The report runs on a stack of its own, so that a
// stack overflow (a SIGSEGV with no stack left to run a handler on) is reported too.
#pragma once

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <initializer_list>

namespace monet::tools {

namespace crash_detail {
inline const char* tool_name = "monet";

inline void write_text(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

inline const char* signal_name(int signal) {
  switch (signal) {
    case SIGSEGV:
      return "SIGSEGV, a bad memory access";
    case SIGBUS:
      return "SIGBUS, a bad memory access";
    case SIGFPE:
      return "SIGFPE, an arithmetic fault";
    case SIGILL:
      return "SIGILL, an illegal instruction";
    default:
      return "a fatal signal";
  }
}

// Only async-signal-safe calls: write, backtrace (preloaded below) and backtrace_symbols_fd,
// which writes without allocating.
inline void on_crash(int signal) {
  write_text("\n");
  write_text(tool_name);
  write_text(": crashed (");
  write_text(signal_name(signal));
  write_text("); the stack, innermost first:\n");
  void* frames[64];
  const int depth = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}
}  // namespace crash_detail

// Installs the report for `tool` (a string that outlives the process's run, e.g. a literal).
inline void report_crashes(const char* tool) {
  crash_detail::tool_name = tool;
  // The first backtrace() loads libgcc's unwinder, which allocates: done here, not in a handler.
  void* frame = nullptr;
  ::backtrace(&frame, 1);
  // The handler's own stack, for the main thread (where a deep recursion overflows). 64 KiB holds
  // the handler, backtrace() and the unwinder with room to spare.
  static char alternate_stack[1 << 16];
  stack_t stack{};
  stack.ss_sp = alternate_stack;
  stack.ss_size = sizeof(alternate_stack);
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = crash_detail::on_crash;
  action.sa_flags = SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::sigaction(signal, &action, nullptr);
}

}  // namespace monet::tools
