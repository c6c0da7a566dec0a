#include "bench/sweep_chart.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

namespace pagellm::bench {

namespace {

constexpr double kPanelWidth = 440.0;
constexpr double kPanelHeight = 340.0;
constexpr double kTitleHeight = 40.0;
// Plot area inside a panel (room for tick labels on the left and the axis label below).
constexpr double kPlotLeft = 70.0, kPlotRight = 20.0, kPlotTop = 40.0, kPlotBottom = 60.0;
constexpr int kTargetTicks = 5;

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A 1/2/5×10^k step that splits [0, max] into about kTargetTicks intervals.
double nice_step(double max_value) {
  double raw = max_value / kTargetTicks;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double normalized = raw / magnitude;
  double nice = normalized <= 1 ? 1 : normalized <= 2 ? 2 : normalized <= 5 ? 5 : 10;
  return nice * magnitude;
}

std::string format_tick(double value) {
  if (std::fabs(value) >= 1000 || value == std::floor(value)) return fmt::format("{:.0f}", value);
  return fmt::format("{:.3g}", value);
}

struct Panel {
  std::string title;
  std::string y_label;
  std::string color;
  std::function<double(const SweepPoint&)> value;
};

std::string render_panel(const Panel& panel, const std::vector<SweepPoint>& points, double x0, double y0) {
  double plot_w = kPanelWidth - kPlotLeft - kPlotRight;
  double plot_h = kPanelHeight - kPlotTop - kPlotBottom;
  double left = x0 + kPlotLeft, top = y0 + kPlotTop, bottom = top + plot_h;
  double max_value = 0.0;
  for (const SweepPoint& p : points) max_value = std::max(max_value, panel.value(p));
  if (!(max_value > 0.0)) max_value = 1.0;
  // 10% headroom so the top point's value label stays clear of the panel title.
  double step = nice_step(max_value * 1.1);
  double y_max = std::ceil(max_value * 1.1 / step) * step;
  auto y_of = [&](double v) { return bottom - v / y_max * plot_h; };
  auto x_of = [&](size_t i) { return left + (static_cast<double>(i) + 0.5) * plot_w / points.size(); };

  std::string svg = fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\n",
      left + plot_w / 2, y0 + 18, escape_xml(panel.title));
  for (double v = 0.0; v <= y_max + step / 2; v += step) {  // grid lines and y tick labels
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"11\">{}</text>\n",
        left, y_of(v), left + plot_w, y_of(v), left - 6, y_of(v) + 4, format_tick(v));
  }
  svg += fmt::format(
      "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n"
      "<line x1=\"{0:.1f}\" y1=\"{2:.1f}\" x2=\"{3:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n",
      left, top, bottom, left + plot_w);
  std::string polyline;
  for (size_t i = 0; i < points.size(); ++i) {
    double x = x_of(i), y = y_of(panel.value(points[i]));
    polyline += fmt::format("{:.1f},{:.1f} ", x, y);
    svg += fmt::format(
        "<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"middle\" font-size=\"11\">{2}</text>\n"
        "<circle cx=\"{0:.1f}\" cy=\"{3:.1f}\" r=\"4\" fill=\"{4}\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{5:.1f}\" text-anchor=\"middle\" font-size=\"10\" fill=\"{4}\">{6}</text>\n",
        x, bottom + 16, points[i].concurrency, y, panel.color, y - 8, format_tick(panel.value(points[i])));
  }
  svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     polyline, panel.color);
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"12\">concurrency (requests in flight)</text>\n",
      left + plot_w / 2, bottom + 40);
  double y_label_x = x0 + 16, y_label_y = top + plot_h / 2;
  svg += fmt::format(
      "<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"middle\" font-size=\"12\" "
      "transform=\"rotate(-90 {0:.1f} {1:.1f})\">{2}</text>\n",
      y_label_x, y_label_y, escape_xml(panel.y_label));
  return svg;
}

}  // namespace

std::string render_sweep_chart_svg(const std::vector<SweepPoint>& points, const std::string& title) {
  double width = 2 * kPanelWidth, height = kPanelHeight + kTitleHeight;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2:.1f}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">{3}</text>\n",
      width, height, width / 2, escape_xml(title));
  if (!points.empty()) {
    svg += render_panel({"Output throughput", "output tokens / s", "#1f77b4",
                         [](const SweepPoint& p) { return p.output_throughput; }},
                        points, 0.0, kTitleHeight);
    svg += render_panel({"TPOT, median", "TPOT p50 (ms)", "#d62728",
                         [](const SweepPoint& p) { return p.median_tpot_ms; }},
                        points, kPanelWidth, kTitleHeight);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace pagellm::bench
