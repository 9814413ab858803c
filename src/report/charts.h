// SVG charts for monet-bench's report: lines over shared axes (time overhead against budget, one
// line per strategy, one panel per workload) and a memory timeline against a budget line.
// Plain C++: the output is a self-contained SVG document (no scripts, no external fonts) that a
// browser or a Markdown renderer shows as it is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace monet::report {

// A point of a line. A point whose y is not finite (an infeasible cell) breaks the line there
// and is not drawn. A finite, positive `error` draws a bar from y - error to y + error (the
// standard error of a measured overhead); the axes make room for it.
struct Point {
  double x = 0.0;
  double y = 0.0;
  double error = 0.0;
};

struct Series {
  std::string name;  // the legend's entry
  std::vector<Point> points;
};

// One chart: its axes are fitted to the finite points of all its series (y from 0 up, or from
// the least value if negative: 0 is always on the y axis).
struct Panel {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  bool x_reversed = false;  // larger x on the left (budgets shrinking to the right)
};

// The panels side by side, one legend for all: series of the same name share a colour.
std::string line_chart_svg(const std::vector<Panel>& panels);

// Memory over time within a run, against the budget.
struct Timeline {
  std::string title;
  std::vector<double> seconds;         // sample times, increasing
  std::vector<double> in_use_bytes;    // bytes the tensors hold, per sample
  std::vector<double> reserved_bytes;  // bytes the allocator holds, per sample
  double budget_bytes = 0.0;           // drawn as a horizontal line when positive
};

// Throws std::invalid_argument when the three sample vectors differ in length.
std::string timeline_svg(const Timeline& timeline);

// `text` with &, <, >, " and ' escaped for SVG text and attributes.
std::string escape_xml(std::string_view text);

// Round axis steps: about `count` ticks covering [low, high].
std::vector<double> nice_ticks(double low, double high, int count);

}  // namespace monet::report
