#include "engine/engine_metrics.h"

namespace pagellm {

const std::vector<double>& Histogram::bounds_s() {
  static const std::vector<double> bounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
                                             1.0,    2.5,   5.0,    10.0,  30.0, 60.0,  120.0, 300.0, 600.0, 1800.0};
  return bounds;
}

const std::vector<double>& Histogram::vllm_ttft_bounds_s() {
  static const std::vector<double> bounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return bounds;
}

const std::vector<double>& Histogram::vllm_tpot_bounds_s() {
  static const std::vector<double> bounds = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                             0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
  return bounds;
}

const std::vector<double>& Histogram::vllm_request_latency_bounds_s() {
  static const std::vector<double> bounds = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                             30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return bounds;
}

const std::vector<double>& Histogram::token_count_bounds() {
  static const std::vector<double> bounds = [] {
    std::vector<double> b;
    for (double decade = 1; decade <= 1e6; decade *= 10)
      for (double step : {1.0, 2.0, 5.0}) b.push_back(step * decade);
    return b;
  }();
  return bounds;
}

void Histogram::observe(double value) {
  for (size_t i = 0; i < bounds->size(); ++i)
    if (value <= (*bounds)[i]) ++bucket_counts[i];
  ++count;
  sum += value;
}

SpecDecodeSummary spec_decode_summary(const EngineMetrics& m) {
  SpecDecodeSummary summary;
  summary.enabled = !m.spec_decode_accepted_per_position.empty();
  if (m.spec_decode_num_draft_tokens > 0)
    summary.acceptance_rate =
        static_cast<double>(m.spec_decode_num_accepted_tokens) / static_cast<double>(m.spec_decode_num_draft_tokens);
  if (m.spec_decode_num_drafts > 0)
    summary.mean_acceptance_length =
        1.0 + static_cast<double>(m.spec_decode_num_accepted_tokens) / static_cast<double>(m.spec_decode_num_drafts);
  return summary;
}

}  // namespace pagellm
