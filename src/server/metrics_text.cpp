#include "server/metrics_text.h"

#include <fmt/format.h>

namespace pagellm::server {

namespace {

// Writes one metric family at a time: HELP and TYPE once, then its samples.
class PrometheusWriter {
 public:
  explicit PrometheusWriter(std::string_view model_name) : labels_(fmt::format("model_name=\"{}\"", escape(model_name))) {}

  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP pagellm:{} {}\n# TYPE pagellm:{} {}\n", name, help, name, type);
  }
  void sample(std::string_view name, double value, std::string_view extra_labels = {}) {
    out_ += fmt::format("pagellm:{}{{{}{}{}}} {}\n", name, labels_, extra_labels.empty() ? "" : ",", extra_labels,
                        value);
  }
  void gauge(std::string_view name, std::string_view help, double value) {
    family(name, "gauge", help);
    sample(name, value);
  }
  // Counters: the family is named without, the sample with "_total" (Prometheus client convention).
  void counter(std::string_view name, std::string_view help, double value) {
    family(name, "counter", help);
    sample(fmt::format("{}_total", name), value);
  }
  void histogram(std::string_view name, std::string_view help, const Histogram& histogram) {
    family(name, "histogram", help);
    const auto& bounds = Histogram::bounds_s();
    const std::string bucket = fmt::format("{}_bucket", name);
    for (size_t i = 0; i < bounds.size(); ++i)  // bucket_counts are cumulative already (value <= bound)
      sample(bucket, static_cast<double>(histogram.bucket_counts[i]), fmt::format("le=\"{}\"", bounds[i]));
    sample(bucket, static_cast<double>(histogram.count), "le=\"+Inf\"");
    sample(fmt::format("{}_sum", name), histogram.sum_s);
    sample(fmt::format("{}_count", name), static_cast<double>(histogram.count));
  }
  std::string take() { return std::move(out_); }

 private:
  static std::string escape(std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out;
  }
  std::string labels_;
  std::string out_;
};

}  // namespace

std::string prometheus_text(const EngineMetrics& m, std::string_view model_name) {
  PrometheusWriter w(model_name);
  w.gauge("num_requests_running", "Requests in the running batch.", m.num_running);
  w.gauge("num_requests_waiting", "Requests waiting to be scheduled (preempted ones included).", m.num_waiting);
  w.family("request_success", "counter", "Finished requests by finish reason.");
  w.sample("request_success_total", static_cast<double>(m.finished_stop), "finished_reason=\"stop\"");
  w.sample("request_success_total", static_cast<double>(m.finished_length), "finished_reason=\"length\"");
  w.sample("request_success_total", static_cast<double>(m.finished_abort), "finished_reason=\"abort\"");
  w.counter("prompt_tokens", "Prompt tokens of requests that produced a token.", static_cast<double>(m.prompt_tokens));
  w.counter("generation_tokens", "Generated tokens.", static_cast<double>(m.generation_tokens));
  w.gauge("kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).",
          m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_used) / m.kv_blocks_total : 0.0);
  w.gauge("kv_cache_blocks_used", "KV cache blocks in use.", m.kv_blocks_used);
  w.gauge("kv_cache_blocks_total", "KV cache blocks in all.", m.kv_blocks_total);
  w.gauge("kv_cache_block_size", "Tokens per KV cache block.", m.block_size);
  w.counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
            static_cast<double>(m.prefix_cache_query_tokens));
  w.counter("prefix_cache_hits", "Prompt tokens found in the prefix cache.", static_cast<double>(m.prefix_cache_hit_tokens));
  w.counter("num_preemptions", "Preemptions (requests recomputed after losing their KV blocks).",
            static_cast<double>(m.preemptions));
  w.counter("engine_steps", "Engine steps that ran the model.", static_cast<double>(m.steps));
  w.histogram("time_to_first_token_seconds", "Time from submission to the first generated token.", m.ttft);
  w.histogram("inter_token_latency_seconds", "Time between successive tokens of a request.", m.inter_token);
  w.histogram("e2e_request_latency_seconds", "Time from submission to the end of a request.", m.e2e);
  w.histogram("request_queue_time_seconds", "Time requests spent waiting before their first schedule.", m.queue_time);
  w.histogram("engine_step_seconds", "Duration of one engine step.", m.step_time);
  return w.take();
}

}  // namespace pagellm::server
