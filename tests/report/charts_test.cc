// monet-bench's SVG charts: well-formed documents with one line per strategy, gaps where a
// cell was infeasible, text escaped, and axes that cover the data.
#include "report/charts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

namespace monet::report {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(NiceTicks, RoundStepsCoveringTheRange) {
  EXPECT_THAT(nice_ticks(0, 10, 5), ::testing::ElementsAre(0, 2, 4, 6, 8, 10));
  using ::testing::DoubleNear;
  EXPECT_THAT(
      nice_ticks(0, 0.37, 4),
      ::testing::ElementsAre(DoubleNear(0, 1e-12), DoubleNear(0.1, 1e-12), DoubleNear(0.2, 1e-12),
                             DoubleNear(0.3, 1e-12), DoubleNear(0.4, 1e-12)));
  const std::vector<double> t = nice_ticks(-3, 47, 5);
  EXPECT_LE(t.front(), -3);
  EXPECT_GE(t.back(), 47);
  EXPECT_THAT(nice_ticks(5, 5, 5), ::testing::ElementsAre(5));
}

TEST(EscapeXml, EscapesMarkup) {
  EXPECT_EQ(escape_xml("a<b & 'c' \"d\">"), "a&lt;b &amp; &apos;c&apos; &quot;d&quot;&gt;");
}

TEST(LineChart, OneLinePerSeriesAndPanelAndOneLegendEntryPerName) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Panel a{"transformer",
          "budget, % of peak",
          "overhead, %",
          {{"monet", {{80, 1}, {60, 3}, {45, 6}, {33, 9}}},
           {"dp", {{80, 2}, {60, 5}, {45, 9}, {33, 14}}}},
          true};
  Panel b{"resnet",
          "budget, % of peak",
          "overhead, %",
          {{"monet", {{80, 2}, {60, 4}, {45, nan}, {33, nan}}}, {"dp", {{80, 3}, {60, 7}}}},
          true};
  const std::string svg = line_chart_svg({a, b});
  EXPECT_THAT(svg, HasSubstr("<svg xmlns='http://www.w3.org/2000/svg'"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_EQ(count(svg, "<polyline"), 4);
  // Infeasible cells are not drawn: 4 + 4 + 2 + 2 points.
  EXPECT_EQ(count(svg, "<circle"), 12);
  EXPECT_EQ(count(svg, ">monet</text>"), 1);
  EXPECT_EQ(count(svg, ">dp</text>"), 1);
  EXPECT_THAT(svg, HasSubstr(">transformer</text>"));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
  EXPECT_THAT(svg, Not(HasSubstr("inf")));
}

TEST(LineChart, AGapBreaksTheLine) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Panel p{"t", "x", "y", {{"s", {{1, 1}, {2, 2}, {3, nan}, {4, 4}, {5, 5}}}}, false};
  EXPECT_EQ(count(line_chart_svg({p}), "<polyline"), 2);
}

TEST(LineChart, AllInfeasibleStillDrawsAxes) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Panel p{"t", "x", "y", {{"s", {{1, nan}}}}, false};
  const std::string svg = line_chart_svg({p});
  EXPECT_EQ(count(svg, "<polyline"), 0);
  EXPECT_THAT(svg, HasSubstr("<rect x="));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
}

TEST(LineChart, ErrorBarsSpanTheirErrorAndFitTheFrame) {
  Panel p{"t", "x", "y", {{"s", {{33, 10, 4}, {60, 5, std::nan("")}, {80, 2, 0}}}}, true};
  const std::string svg = line_chart_svg({p});
  const std::regex bar(
      "<line class='error' x1='([-0-9.]+)' y1='([-0-9.]+)' x2='([-0-9.]+)' "
      "y2='([-0-9.]+)'");
  std::vector<std::smatch> bars;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), bar); it != std::sregex_iterator();
       ++it) {
    bars.push_back(*it);
  }
  ASSERT_EQ(bars.size(), 1u) << "a bar only where the error is finite and positive";
  const double y_low = std::stod(bars[0][2]), y_high = std::stod(bars[0][4]);
  EXPECT_EQ(bars[0][1], bars[0][3]) << "vertical";
  // y = 10 +- 4 spans 8 units; the frame's y axis runs from 0 to at least 14 and is drawn
  // downwards.
  EXPECT_GT(y_low, y_high);
  EXPECT_GE(y_high, 0);
  EXPECT_LE(y_low, 320);
  const std::regex circle("<circle cx='[-0-9.]+' cy='([-0-9.]+)'");
  std::smatch first;
  ASSERT_TRUE(std::regex_search(svg, first, circle));
  EXPECT_NEAR(std::stod(first[1]), (y_low + y_high) / 2, 0.05) << "centred on the point";
}

TEST(LineChart, PointsLieInsideTheFrame) {
  Panel p{"t", "x", "y", {{"s", {{33, -2}, {80, 40}}}}, true};
  const std::string svg = line_chart_svg({p});
  const std::regex circle("<circle cx='([-0-9.]+)' cy='([-0-9.]+)'");
  std::vector<double> xs;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), circle); it != std::sregex_iterator();
       ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    EXPECT_GE(x, 0);
    EXPECT_LE(x, 460);
    EXPECT_GE(y, 0);
    EXPECT_LE(y, 320);
    xs.push_back(x);
  }
  ASSERT_EQ(xs.size(), 2u);
  // Reversed x: the budget of 80% is left of the budget of 33%.
  EXPECT_GT(xs[0], xs[1]);
}

// The labels of the y axis's ticks, lowest first.
std::vector<std::string> y_tick_labels(const std::string& svg) {
  const std::regex label("text-anchor='end' font-size='11'>([^<]*)</text>");
  std::vector<std::string> labels;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator();
       ++it) {
    labels.push_back((*it)[1]);
  }
  return labels;
}

TEST(LineChart, TicksOfAFractionalStepReadTheirValues) {
  // 0 to 12 takes ticks 2.5 apart: 7.5 is not "8", nor 2.5 "2".
  Panel p{"t", "x", "y", {{"s", {{80, 3}, {33, 12}}}}, true};
  EXPECT_THAT(y_tick_labels(line_chart_svg({p})),
              ::testing::ElementsAre("0.0", "2.5", "5.0", "7.5", "10.0", "12.5"));
  Panel q{"t", "x", "y", {{"s", {{80, 0.3}, {33, 1.2}}}}, true};
  EXPECT_THAT(y_tick_labels(line_chart_svg({q})),
              ::testing::ElementsAre("0.00", "0.25", "0.50", "0.75", "1.00", "1.25"));
}

TEST(LineChart, ZeroIsOnTheAxisAndAFlatLineHasARange) {
  // Every cell planned nothing: a range of 0 to 1, not six ticks that all read 0.
  Panel zeros{"t", "x", "y", {{"s", {{80, 0}, {60, 0}}}}, true};
  EXPECT_THAT(y_tick_labels(line_chart_svg({zeros})),
              ::testing::ElementsAre("0.0", "0.2", "0.4", "0.6", "0.8", "1.0"));
  // Every overhead below 0 (a cell faster than the baseline): the axis reaches 0.
  Panel negative{"t", "x", "y", {{"s", {{45, -1.5}}}}, true};
  const std::vector<std::string> labels = y_tick_labels(line_chart_svg({negative}));
  EXPECT_THAT(labels, ::testing::ElementsAre("-1.5", "-1.0", "-0.5", "0.0"));
}

TEST(Timeline, DrawsBothSeriesAndTheBudget) {
  Timeline t;
  t.title = "monet at 33%";
  for (int i = 0; i < 50; ++i) {
    t.seconds.push_back(0.01 * i);
    t.in_use_bytes.push_back((i % 10) * 1e6);
    t.reserved_bytes.push_back(12e6);
  }
  t.budget_bytes = 14e6;
  const std::string svg = timeline_svg(t);
  EXPECT_EQ(count(svg, "<polyline"), 2);
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray"));
  EXPECT_THAT(svg, HasSubstr(">monet at 33%</text>"));
}

TEST(Timeline, EveryTickLiesOnTheAxis) {
  // Samples from 0.3 s: the round tick at 0.2 is drawn on the axis, not left of the frame.
  Timeline t;
  for (int i = 0; i <= 70; ++i) {
    t.seconds.push_back(0.3 + 0.01 * i);
    t.in_use_bytes.push_back(1e6);
    t.reserved_bytes.push_back(2e6);
  }
  const std::string svg = timeline_svg(t);
  const std::regex tick(
      "<line x1='([-0-9.]+)' y1='[-0-9.]+' x2='[-0-9.]+' y2='[-0-9.]+' "
      "stroke='#333'/>");
  int ticks = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tick); it != std::sregex_iterator();
       ++it, ++ticks) {
    EXPECT_GE(std::stod((*it)[1]), 64.0) << "left of the frame";
    EXPECT_LE(std::stod((*it)[1]), 920.0 - 16.0) << "right of the frame";
  }
  EXPECT_GE(ticks, 4);
}

TEST(Timeline, RefusesSeriesOfDifferentLengths) {
  Timeline t;
  t.seconds = {0, 1};
  t.in_use_bytes = {1};
  t.reserved_bytes = {1, 2};
  EXPECT_THROW(timeline_svg(t), std::invalid_argument);
}

}  // namespace
}  // namespace monet::report
