// A progress line on stderr for the command-line tools: rewritten in place on a terminal, and
// printed at every tenth of the run otherwise (a log file gets ten lines, not thousands).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace monet::tools {

class Progress {
 public:
  // `label` starts the line; `total` is the count of steps; `quiet` prints nothing.
  Progress(std::string label, int total, bool quiet)
      : label_(std::move(label)),
        total_(std::max(1, total)),
        quiet_(quiet),
        tty_(::isatty(STDERR_FILENO) != 0) {}

  // `done` steps of `total` in `seconds`; `detail` ends the line.
  void update(int done, double seconds, const std::string& detail) const {
    if (quiet_) return;
    const bool milestone = done == total_ || done % std::max(1, total_ / 10) == 0;
    if (!tty_ && !milestone) return;
    constexpr int kWidth = 24;
    const int filled = kWidth * done / total_;
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < kWidth) bar += '>';
    bar.resize(kWidth, ' ');
    std::fprintf(stderr, "%s%-9s [%s] %4d/%d %6.1f it/s  %s%s", tty_ ? "\r\033[K" : "",
                 label_.c_str(), bar.c_str(), done, total_, done / std::max(seconds, 1e-9),
                 detail.c_str(), tty_ && done < total_ ? "" : "\n");
    std::fflush(stderr);
  }

  // Ends an unfinished line on a terminal (a run that stopped early).
  void finish() const {
    if (!quiet_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  std::string label_;
  int total_;
  bool quiet_;
  bool tty_;
};

}  // namespace monet::tools
