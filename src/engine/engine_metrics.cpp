#include "engine/engine_metrics.h"

namespace pagellm {

const std::vector<double>& Histogram::bounds_s() {
  static const std::vector<double> bounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,   0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
  return bounds;
}

void Histogram::observe(double seconds) {
  const auto& bounds = bounds_s();
  for (size_t i = 0; i < bounds.size(); ++i)
    if (seconds <= bounds[i]) ++bucket_counts[i];
  ++count;
  sum_s += seconds;
}

}  // namespace pagellm
