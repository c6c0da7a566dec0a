// EngineMetrics: counters and latency histograms the engine records, read by /metrics and the
// benchmarks as a consistent snapshot.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

namespace pagellm {

// Cumulative histogram with fixed bucket bounds (Prometheus style): seconds or token counts.
struct Histogram {
  // pagellm's own latency buckets: 0.5 ms to 30 min, fine below a second (a decode step is ~1 ms).
  static const std::vector<double>& bounds_s();
  // vLLM's buckets, so vLLM's Grafana dashboard reads the vllm:* families as it reads vLLM's.
  static const std::vector<double>& vllm_ttft_bounds_s();
  static const std::vector<double>& vllm_tpot_bounds_s();
  static const std::vector<double>& vllm_request_latency_bounds_s();
  static const std::vector<double>& token_count_bounds();  // 1, 2, 5, 10, 20, 50, ... up to 5e6

  Histogram() : Histogram(bounds_s()) {}
  explicit Histogram(const std::vector<double>& bucket_bounds)
      : bounds(&bucket_bounds), bucket_counts(bucket_bounds.size(), 0) {}
  const std::vector<double>* bounds;    // upper bounds, ascending (static storage)
  std::vector<uint64_t> bucket_counts;  // value <= bound, cumulative
  uint64_t count = 0;
  double sum = 0.0;
  void observe(double value);
};

// One latency observed into pagellm's fine buckets and into vLLM's buckets for the same quantity
// (/metrics exports both families).
struct LatencyHistogram {
  explicit LatencyHistogram(const std::vector<double>& vllm_bounds) : vllm(vllm_bounds) {}
  Histogram pagellm;
  Histogram vllm;
  void observe(double seconds) {
    pagellm.observe(seconds);
    vllm.observe(seconds);
  }
};

struct EngineMetrics {
  int num_running = 0;
  int num_waiting = 0;
  uint64_t finished_stop = 0, finished_length = 0, finished_abort = 0;
  uint64_t prompt_tokens = 0;       // prompt tokens of finished and running requests, at admission
  uint64_t generation_tokens = 0;   // tokens sampled
  int kv_blocks_used = 0, kv_blocks_total = 0;
  int block_size = 0;
  uint64_t prefix_cache_query_tokens = 0, prefix_cache_hit_tokens = 0;
  uint64_t preemptions = 0;
  // Speculative decoding (vLLM's vllm:spec_decode_*): steps' rows that carried drafts, drafts,
  // accepted drafts, and accepted drafts by position ([num_speculative_tokens]; empty when off).
  uint64_t spec_decode_num_drafts = 0, spec_decode_num_draft_tokens = 0, spec_decode_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_decode_accepted_per_position;
  uint64_t steps = 0;
  double step_time_total_s = 0.0;
  LatencyHistogram ttft{Histogram::vllm_ttft_bounds_s()}, inter_token{Histogram::vllm_tpot_bounds_s()};
  LatencyHistogram e2e{Histogram::vllm_request_latency_bounds_s()};
  LatencyHistogram queue_time{Histogram::vllm_request_latency_bounds_s()};
  Histogram step_time;
  // Per-request token counts, at finish (vLLM's request_prompt_tokens / request_generation_tokens).
  Histogram request_prompt_tokens{Histogram::token_count_bounds()};
  Histogram request_generation_tokens{Histogram::token_count_bounds()};
};

// Speculative decoding's efficiency, as vLLM's logs and bench report it: accepted / draft tokens,
// and tokens per verified row (1 + accepted drafts per row that carried drafts). Zero when off.
struct SpecDecodeSummary {
  double acceptance_rate = 0.0;
  double mean_acceptance_length = 0.0;
  bool enabled = false;
};
SpecDecodeSummary spec_decode_summary(const EngineMetrics& m);

// Written by the engine thread, read by any thread.
class EngineMetricsRecorder {
 public:
  template <typename Fn>
  void update(Fn fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    fn(metrics_);
  }
  EngineMetrics snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return metrics_;
  }
  // Durations of the most recent steps (benchmarks compute percentiles from them).
  void record_step_time(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (step_times_s_.size() < kMaxStepTimes) step_times_s_.push_back(static_cast<float>(seconds));
  }
  std::vector<float> step_times_s() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return step_times_s_;
  }
  void clear_step_times() {
    std::lock_guard<std::mutex> lock(mutex_);
    step_times_s_.clear();
  }

 private:
  static constexpr size_t kMaxStepTimes = 1 << 20;
  mutable std::mutex mutex_;
  EngineMetrics metrics_;
  std::vector<float> step_times_s_;
};

}  // namespace pagellm
