// A hand-written SVG of a concurrency sweep: two panels side by side, output throughput (tok/s)
// and median TPOT (ms), each against concurrency (one evenly spaced tick per level run).
#pragma once

#include <string>
#include <vector>

namespace pagellm::bench {

struct SweepPoint {
  int concurrency = 0;
  double output_throughput = 0.0;  // tok/s
  double median_tpot_ms = 0.0;
};

std::string render_sweep_chart_svg(const std::vector<SweepPoint>& points, const std::string& title);

}  // namespace pagellm::bench
