#include "report/charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace monet::report {
namespace {

constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// Panel geometry, in SVG user units.
constexpr double kPanelWidth = 460;
constexpr double kPanelHeight = 320;
constexpr double kLeft = 64;
constexpr double kRight = 16;
constexpr double kTop = 36;
constexpr double kBottom = 48;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick's label: as many decimals as the step has (2.5 one, 0.25 two, at most 6), so that every
// tick of a round step reads its own value.
std::string tick_label(double v, double step) {
  int digits = 0;
  for (double scaled = std::abs(step); digits < 6; scaled *= 10, ++digits) {
    if (std::abs(scaled - std::round(scaled)) <= 1e-6 * scaled) break;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    low = std::min(low, v);
    high = std::max(high, v);
  }
  bool empty() const { return low > high; }
};

// Maps data to the plot area of a panel whose top-left corner is (ox, oy).
struct Frame {
  double ox, oy;
  double x0, x1, y0, y1;
  bool x_reversed;
  double width = kPanelWidth;
  double px(double x) const {
    double f = (x - x0) / (x1 - x0);
    if (x_reversed) f = 1 - f;
    return ox + kLeft + f * (width - kLeft - kRight);
  }
  double py(double y) const {
    return oy + kTop + (1 - (y - y0) / (y1 - y0)) * (kPanelHeight - kTop - kBottom);
  }
};

void axes(std::string& svg, const Frame& f, const std::vector<double>& xt,
          const std::vector<double>& yt, const std::string& title, const std::string& x_label,
          const std::string& y_label) {
  const double left = f.ox + kLeft, right = f.ox + f.width - kRight;
  const double top = f.oy + kTop, bottom = f.oy + kPanelHeight - kBottom;
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double y : yt) {
    svg += "<line x1='" + num(left) + "' y1='" + num(f.py(y)) + "' x2='" + num(right) + "' y2='" +
           num(f.py(y)) + "' stroke='#e4e4e4'/>\n";
    svg += "<text x='" + num(left - 6) + "' y='" + num(f.py(y) + 4) +
           "' text-anchor='end' font-size='11'>" + tick_label(y, ystep) + "</text>\n";
  }
  for (double x : xt) {
    svg += "<line x1='" + num(f.px(x)) + "' y1='" + num(bottom) + "' x2='" + num(f.px(x)) +
           "' y2='" + num(bottom + 4) + "' stroke='#333'/>\n";
    svg += "<text x='" + num(f.px(x)) + "' y='" + num(bottom + 17) +
           "' text-anchor='middle' font-size='11'>" + tick_label(x, xstep) + "</text>\n";
  }
  svg += "<rect x='" + num(left) + "' y='" + num(top) + "' width='" + num(right - left) +
         "' height='" + num(bottom - top) + "' fill='none' stroke='#333'/>\n";
  svg += "<text x='" + num((left + right) / 2) + "' y='" + num(f.oy + 22) +
         "' text-anchor='middle' font-size='14' font-weight='bold'>" + escape_xml(title) +
         "</text>\n";
  svg += "<text x='" + num((left + right) / 2) + "' y='" + num(bottom + 36) +
         "' text-anchor='middle' font-size='12'>" + escape_xml(x_label) + "</text>\n";
  const double mid = (top + bottom) / 2;
  svg += "<text x='" + num(f.ox + 16) + "' y='" + num(mid) +
         "' text-anchor='middle' font-size='12' transform='rotate(-90 " + num(f.ox + 16) + " " +
         num(mid) + ")'>" + escape_xml(y_label) + "</text>\n";
}

// The y range from 0 (or the least value, if negative) up to the ticks above the largest (or 0,
// if every value is negative): 0 is always on the axis. Nothing, or only zeros, spans 0 to 1.
std::pair<double, double> fitted(const Range& r, std::vector<double>* ticks) {
  const double low = r.empty() ? 0 : std::min(0.0, r.low);
  double high = r.empty() ? 1 : std::max(r.high, 0.0);
  if (!(high > low)) high = low + 1;
  *ticks = nice_ticks(low, high, 5);
  return {std::min(low, ticks->front()), std::max(high, ticks->back())};
}

std::string open_svg(double width, double height) {
  return "<svg xmlns='http://www.w3.org/2000/svg' width='" + num(width) + "' height='" +
         num(height) + "' viewBox='0 0 " + num(width) + " " + num(height) +
         "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
}

bool has_error_bar(const Point& pt) { return std::isfinite(pt.error) && pt.error > 0; }

void polyline(std::string& svg, const std::vector<std::pair<double, double>>& pts,
              const char* colour, double width) {
  if (pts.size() < 2) return;
  svg += "<polyline fill='none' stroke='" + std::string(colour) + "' stroke-width='" + num(width) +
         "' points='";
  for (const auto& [x, y] : pts) svg += num(x) + "," + num(y) + " ";
  svg += "'/>\n";
}

}  // namespace

std::string escape_xml(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double low, double high, int count) {
  if (!(high > low) || count < 1) return {low};
  const double raw = (high - low) / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const double first = std::floor(low / step + 1e-9);
  for (double i = first;; ++i) {
    const double t = i * step;
    ticks.push_back(i == 0 ? 0.0 : t);
    if (t >= high - step * 1e-9) break;
  }
  return ticks;
}

std::string line_chart_svg(const std::vector<Panel>& panels) {
  std::vector<std::string> names;  // legend order, first appearance first
  for (const Panel& p : panels) {
    for (const Series& s : p.series) {
      if (std::find(names.begin(), names.end(), s.name) == names.end()) names.push_back(s.name);
    }
  }
  auto colour = [&](const std::string& name) {
    const auto i = std::find(names.begin(), names.end(), name) - names.begin();
    return kPalette[i % kPaletteSize];
  };
  const double legend_height = 28;
  const double width = kPanelWidth * static_cast<double>(std::max<std::size_t>(1, panels.size()));
  std::string svg = open_svg(width, kPanelHeight + legend_height);
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const Panel& p = panels[i];
    Range xr, yr;
    for (const Series& s : p.series) {
      for (const Point& pt : s.points) {
        if (!std::isfinite(pt.y)) continue;
        xr.add(pt.x);
        yr.add(pt.y);
        if (has_error_bar(pt)) {
          yr.add(pt.y - pt.error);
          yr.add(pt.y + pt.error);
        }
      }
    }
    if (xr.empty()) xr = Range{0, 1};
    if (xr.high == xr.low) xr = Range{xr.low - 1, xr.high + 1};
    std::vector<double> yt;
    const auto [y0, y1] = fitted(yr, &yt);
    std::vector<double> xt = nice_ticks(xr.low, xr.high, 5);
    xt.erase(std::remove_if(xt.begin(), xt.end(),
                            [&](double x) { return x < xr.low - 1e-9 || x > xr.high + 1e-9; }),
             xt.end());
    const Frame f{kPanelWidth * static_cast<double>(i), 0, xr.low, xr.high, y0, y1, p.x_reversed};
    axes(svg, f, xt, yt, p.title, p.x_label, p.y_label);
    for (const Series& s : p.series) {
      std::vector<std::pair<double, double>> run;
      for (const Point& pt : s.points) {
        if (!std::isfinite(pt.y)) {
          polyline(svg, run, colour(s.name), 2);
          run.clear();
          continue;
        }
        run.emplace_back(f.px(pt.x), f.py(pt.y));
        if (has_error_bar(pt)) {
          svg += "<line class='error' x1='" + num(f.px(pt.x)) + "' y1='" +
                 num(f.py(pt.y - pt.error)) + "' x2='" + num(f.px(pt.x)) + "' y2='" +
                 num(f.py(pt.y + pt.error)) + "' stroke='" + colour(s.name) +
                 "' stroke-width='1'/>\n";
        }
        svg += "<circle cx='" + num(f.px(pt.x)) + "' cy='" + num(f.py(pt.y)) + "' r='3' fill='" +
               colour(s.name) + "'><title>" + escape_xml(s.name) + ": " + tick_label(pt.x, 1) +
               ", " + tick_label(pt.y, 0.1) + "</title></circle>\n";
      }
      polyline(svg, run, colour(s.name), 2);
    }
  }
  double x = kLeft;
  const double y = kPanelHeight + legend_height / 2;
  for (const std::string& name : names) {
    svg += "<rect x='" + num(x) + "' y='" + num(y - 5) + "' width='14' height='10' fill='" +
           colour(name) + "'/>\n";
    svg += "<text x='" + num(x + 18) + "' y='" + num(y + 4) + "' font-size='12'>" +
           escape_xml(name) + "</text>\n";
    x += 30 + 7.0 * static_cast<double>(name.size());
  }
  svg += "</svg>\n";
  return svg;
}

std::string timeline_svg(const Timeline& t) {
  if (t.in_use_bytes.size() != t.seconds.size() || t.reserved_bytes.size() != t.seconds.size()) {
    throw std::invalid_argument(
        "timeline_svg: seconds, in_use_bytes and reserved_bytes differ in "
        "length");
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  Range xr, yr;
  for (std::size_t i = 0; i < t.seconds.size(); ++i) {
    xr.add(t.seconds[i]);
    yr.add(t.in_use_bytes[i] / kMiB);
    yr.add(t.reserved_bytes[i] / kMiB);
  }
  if (t.budget_bytes > 0) yr.add(t.budget_bytes / kMiB * 1.05);
  if (xr.empty() || xr.high == xr.low) xr = Range{0, 1};
  std::vector<double> yt;
  const auto [y0, y1] = fitted(yr, &yt);
  const std::vector<double> xt = nice_ticks(xr.low, xr.high, 6);
  const double legend_height = 28;
  const double width = kPanelWidth * 2;
  std::string svg = open_svg(width, kPanelHeight + legend_height);
  // The x axis spans its ticks, the round ones below the first sample and above the last too.
  const double x0 = std::min(xr.low, xt.front()), x1 = std::max(xr.high, xt.back());
  const Frame f{0, 0, x0, x1, y0, y1, false, width};
  axes(svg, f, xt, yt, t.title, "seconds", "MiB");
  std::vector<std::pair<double, double>> in_use, reserved;
  for (std::size_t i = 0; i < t.seconds.size(); ++i) {
    in_use.emplace_back(f.px(t.seconds[i]), f.py(t.in_use_bytes[i] / kMiB));
    reserved.emplace_back(f.px(t.seconds[i]), f.py(t.reserved_bytes[i] / kMiB));
  }
  polyline(svg, reserved, kPalette[1], 1.5);
  polyline(svg, in_use, kPalette[0], 1.5);
  if (t.budget_bytes > 0) {
    const double y = f.py(t.budget_bytes / kMiB);
    svg += "<line x1='" + num(kLeft) + "' y1='" + num(y) + "' x2='" + num(width - kRight) +
           "' y2='" + num(y) + "' stroke='" + kPalette[2] +
           "' stroke-width='2' stroke-dasharray='6 4'/>\n";
  }
  double x = kLeft;
  const double y = kPanelHeight + legend_height / 2;
  const std::pair<const char*, const char*> legend[] = {
      {"in use", kPalette[0]}, {"reserved", kPalette[1]}, {"budget", kPalette[2]}};
  for (const auto& [name, c] : legend) {
    svg += "<rect x='" + num(x) + "' y='" + num(y - 5) + "' width='14' height='10' fill='" + c +
           "'/>\n";
    svg +=
        "<text x='" + num(x + 18) + "' y='" + num(y + 4) + "' font-size='12'>" + name + "</text>\n";
    x += 100;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace monet::report
