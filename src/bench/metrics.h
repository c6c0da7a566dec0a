// Benchmark metrics with the definitions of `vllm bench serve` (spec/serving.md), so numbers
// compare across engines:
//   TTFT  = first chunk with non-empty choices − request start (after any concurrency wait)
//   ITL   = gaps between successive token-bearing chunks
//   E2EL  = last token-bearing chunk − request start
//   TPOT  = (E2EL − TTFT) / (output_tokens − 1), only for output_tokens > 1 (counted as 0 by goodput)
//   output tokens = usage.completion_tokens (fallback: number of token-bearing chunks)
//   throughputs = completed requests, output tokens, input + output tokens per wall-clock second
//   goodput = requests meeting every given SLO per second
// Percentiles interpolate linearly between order statistics, as numpy.percentile does by default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pagellm::bench {

// One request's client-side measurements.
struct RequestRecord {
  bool success = false;
  std::string error;  // why it failed
  int prompt_len = 0;
  int conversation = -1;  // multi-turn: which conversation, -1 otherwise
  int turn = 0;           // multi-turn: 1-based turn of its conversation, 0 otherwise
  int input_class = 0;    // mixed: its prompt-length class, 0 otherwise
  int64_t output_tokens = 0;
  bool output_tokens_from_usage = false;  // false: counted chunks instead
  double start_s = 0.0;                   // since the benchmark began
  double ttft_s = 0.0;
  double e2el_s = 0.0;
  std::vector<double> itl_s;
};

struct GoodputSlo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool is_set() const { return ttft_ms || tpot_ms || e2el_ms; }
};

// "ttft:200" "tpot:50" "e2el:5000" (any subset).
Expected<GoodputSlo> parse_goodput(const std::vector<std::string>& items);
// "50,90,99" -> {50, 90, 99}; each in (0, 100].
Expected<std::vector<double>> parse_percentiles(const std::string& text);
// The key part for a percentile: 99 -> "99", 99.9 -> "99.9" (vLLM's p99_ttft_ms naming).
std::string percentile_label(double p);

// numpy.percentile(values, p) with linear interpolation; 0 for no values.
double percentile(std::vector<double> values, double p);

struct LatencyStats {
  double mean_ms = 0.0, median_ms = 0.0, std_ms = 0.0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
};

// TTFT of the completed requests of one turn index (multi-turn): later turns resend the history,
// so turn 1 against later turns shows what prefix caching saves.
struct TurnTtft {
  int turn = 0;  // 1-based
  int completed = 0;
  double p50_ms = 0.0, p99_ms = 0.0;
};

// Latency of the completed requests of one prompt-length class (mixed): do long prompts starve
// short ones?
struct ClassLatency {
  int input_len = 0;
  int completed = 0;
  double ttft_p50_ms = 0.0, ttft_p99_ms = 0.0, tpot_p50_ms = 0.0, tpot_p99_ms = 0.0;
};

struct BenchMetrics {
  int completed = 0;
  int failed = 0;
  std::string first_error;
  double duration_s = 0.0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0.0;       // req/s
  std::optional<double> request_goodput; // req/s, when SLOs were given
  double output_throughput = 0.0;        // tok/s
  double total_token_throughput = 0.0;   // tok/s
  double max_output_tokens_per_s = 0.0;  // busiest one-second window (token-bearing chunks)
  int max_concurrent_requests = 0;
  int num_output_tokens_estimated = 0;   // completed requests whose server sent no usage
  LatencyStats ttft, tpot, itl, e2el;
  std::vector<TurnTtft> ttft_by_turn;    // multi-turn only, by turn index
  std::vector<ClassLatency> latency_by_input_class;  // mixed only, longest prompts first
};

BenchMetrics compute_metrics(const std::vector<RequestRecord>& records, double duration_s,
                             int peak_concurrency, const GoodputSlo& slo,
                             const std::vector<double>& percentiles);

}  // namespace pagellm::bench
