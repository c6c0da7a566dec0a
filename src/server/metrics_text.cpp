#include "server/metrics_text.h"

#include <fmt/format.h>

namespace pagellm::server {

namespace {

// Writes one metric family at a time: HELP and TYPE once, then its samples. `prefix` is "pagellm"
// or "vllm".
class PrometheusWriter {
 public:
  PrometheusWriter(std::string_view prefix, std::string_view labels) : prefix_(prefix), labels_(labels) {}

  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {}:{} {}\n# TYPE {}:{} {}\n", prefix_, name, help, prefix_, name, type);
  }
  void sample(std::string_view name, double value, std::string_view extra_labels = {}) {
    out_ += fmt::format("{}:{}{{{}{}{}}} {}\n", prefix_, name, labels_, extra_labels.empty() ? "" : ",", extra_labels,
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
    const auto& bounds = *histogram.bounds;
    const std::string bucket = fmt::format("{}_bucket", name);
    for (size_t i = 0; i < bounds.size(); ++i)  // bucket_counts are cumulative already (value <= bound)
      sample(bucket, static_cast<double>(histogram.bucket_counts[i]), fmt::format("le=\"{}\"", bounds[i]));
    sample(bucket, static_cast<double>(histogram.count), "le=\"+Inf\"");
    sample(fmt::format("{}_sum", name), histogram.sum);
    sample(fmt::format("{}_count", name), static_cast<double>(histogram.count));
  }
  std::string take() { return std::move(out_); }

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

 private:
  std::string_view prefix_;
  std::string labels_;
  std::string out_;
};

}  // namespace

namespace {

// vLLM's names, label set (model_name, engine) and buckets, for dashboards and alerts written
// against vLLM (its Grafana dashboard among them).
std::string vllm_families(const EngineMetrics& m, std::string_view model_name) {
  PrometheusWriter w("vllm", fmt::format("model_name=\"{}\",engine=\"0\"", PrometheusWriter::escape(model_name)));
  w.gauge("num_requests_running", "Number of requests in model execution batches.", m.num_running);
  w.gauge("num_requests_waiting", "Number of requests waiting to be processed.", m.num_waiting);
  const double kv_usage = m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_used) / m.kv_blocks_total : 0.0;
  w.gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage);
  w.gauge("gpu_cache_usage_perc", "KV-cache usage (the older name). 1 means 100 percent usage.", kv_usage);
  w.counter("num_preemptions", "Cumulative number of preemption from the engine.", static_cast<double>(m.preemptions));
  w.counter("prompt_tokens", "Number of prefill tokens processed.", static_cast<double>(m.prompt_tokens));
  w.counter("generation_tokens", "Number of generation tokens processed.", static_cast<double>(m.generation_tokens));
  w.counter("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<double>(m.prefix_cache_query_tokens));
  w.counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<double>(m.prefix_cache_hit_tokens));
  w.family("request_success", "counter", "Count of successfully processed requests.");
  w.sample("request_success_total", static_cast<double>(m.finished_stop), "finished_reason=\"stop\"");
  w.sample("request_success_total", static_cast<double>(m.finished_length), "finished_reason=\"length\"");
  w.sample("request_success_total", static_cast<double>(m.finished_abort), "finished_reason=\"abort\"");
  w.histogram("request_prompt_tokens", "Number of prefill tokens processed.", m.request_prompt_tokens);
  w.histogram("request_generation_tokens", "Number of generation tokens processed.", m.request_generation_tokens);
  w.histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft.vllm);
  w.histogram("time_per_output_token_seconds", "Histogram of time per output token in seconds.", m.inter_token.vllm);
  w.histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.inter_token.vllm);
  w.histogram("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m.e2e.vllm);
  w.histogram("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", m.queue_time.vllm);
  // Speculative decoding: present (as in vLLM) only when it is configured.
  if (!m.spec_decode_accepted_per_position.empty()) {
    w.counter("spec_decode_num_drafts", "Number of spec decoding drafts.", static_cast<double>(m.spec_decode_num_drafts));
    w.counter("spec_decode_num_draft_tokens", "Number of draft tokens.",
              static_cast<double>(m.spec_decode_num_draft_tokens));
    w.counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.",
              static_cast<double>(m.spec_decode_num_accepted_tokens));
    w.family("spec_decode_num_accepted_tokens_per_pos", "counter", "Accepted tokens per draft position.");
    for (size_t i = 0; i < m.spec_decode_accepted_per_position.size(); ++i)
      w.sample("spec_decode_num_accepted_tokens_per_pos_total",
               static_cast<double>(m.spec_decode_accepted_per_position[i]), fmt::format("position=\"{}\"", i));
  }
  return w.take();
}

}  // namespace

std::string prometheus_text(const EngineMetrics& m, std::string_view model_name) {
  PrometheusWriter w("pagellm", fmt::format("model_name=\"{}\"", PrometheusWriter::escape(model_name)));
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
  w.histogram("time_to_first_token_seconds", "Time from submission to the first generated token.", m.ttft.pagellm);
  w.histogram("inter_token_latency_seconds", "Time between successive tokens of a request.", m.inter_token.pagellm);
  w.histogram("e2e_request_latency_seconds", "Time from submission to the end of a request.", m.e2e.pagellm);
  w.histogram("request_queue_time_seconds", "Time requests spent waiting before their first schedule.", m.queue_time.pagellm);
  w.histogram("engine_step_seconds", "Duration of one engine step.", m.step_time);
  return w.take() + vllm_families(m, model_name);
}

}  // namespace pagellm::server
