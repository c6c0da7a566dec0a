// EngineMetrics: counters and latency histograms the engine records, read by /metrics and the
// benchmarks as a consistent snapshot.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

namespace pagellm {

// Cumulative histogram with fixed bucket bounds in seconds (Prometheus style).
struct Histogram {
  static const std::vector<double>& bounds_s();
  std::vector<uint64_t> bucket_counts = std::vector<uint64_t>(bounds_s().size(), 0);  // value <= bound
  uint64_t count = 0;
  double sum_s = 0.0;
  void observe(double seconds);
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
  uint64_t steps = 0;
  double step_time_total_s = 0.0;
  Histogram ttft, inter_token, e2e, queue_time, step_time;
};

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
