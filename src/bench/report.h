// How a `bench serve` result is shown: vLLM's text table on stdout, and a JSON object whose keys
// are those of vLLM's --result-json file (completed, duration, mean_ttft_ms, p99_itl_ms, ...) so
// existing plotting scripts read it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"
#include "bench/serve_runner.h"

namespace pagellm::bench {

// What was run, echoed into the report.
struct RunDescription {
  std::string base_url;
  std::string endpoint;
  std::string model;
  std::string dataset_name;
  int num_prompts = 0;
  double request_rate = 0.0;  // inf for "all at once"
  double burstiness = 1.0;
  int max_concurrency = 0;    // 0: none
  std::vector<double> percentiles;
  std::vector<std::string> notes;  // dataset caveats and the like
};

std::string format_result_table(const BenchMetrics& metrics, const RunDescription& run);

// vLLM's result keys plus max_concurrency, peak_concurrency, first_error and notes. Per-request
// arrays (input_lens, output_lens, ttfts, itls, errors) are included when with_details is true.
nlohmann::json make_result_json(const BenchMetrics& metrics, const RunDescription& run,
                                const RunResult& result, bool with_details);

// The notes worth printing for a run (dataset caveats, output-token fallback).
std::vector<std::string> result_notes(const BenchMetrics& metrics, const RunDescription& run);

}  // namespace pagellm::bench
