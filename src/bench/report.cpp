#include "bench/report.h"

#include <chrono>
#include <cmath>
#include <ctime>

namespace pagellm::bench {

namespace {

constexpr int kTableWidth = 50;

std::string banner(const std::string& title, char fill) {
  std::string text = title.empty() ? "" : " " + title + " ";
  if (static_cast<int>(text.size()) >= kTableWidth) return text + "\n";
  size_t left = (kTableWidth - text.size()) / 2;
  size_t right = kTableWidth - text.size() - left;
  return std::string(left, fill) + text + std::string(right, fill) + "\n";
}

std::string row(const std::string& label, const std::string& value) {
  return fmt::format("{:<40} {:<10}\n", label, value);
}
std::string row(const std::string& label, double value) { return row(label, fmt::format("{:.2f}", value)); }

// One latency section: "Mean TTFT (ms):", "Median TTFT (ms):", "P99 TTFT (ms):", ...
std::string latency_section(const std::string& title, const std::string& name, const LatencyStats& s) {
  std::string out = banner(title, '-');
  out += row("Mean " + name + " (ms):", s.mean_ms);
  out += row("Median " + name + " (ms):", s.median_ms);
  for (const auto& [p, value] : s.percentiles_ms) out += row("P" + percentile_label(p) + " " + name + " (ms):", value);
  return out;
}

void add_latency_keys(nlohmann::json& j, const std::string& name, const LatencyStats& s) {
  j["mean_" + name + "_ms"] = s.mean_ms;
  j["median_" + name + "_ms"] = s.median_ms;
  j["std_" + name + "_ms"] = s.std_ms;
  for (const auto& [p, value] : s.percentiles_ms) j["p" + percentile_label(p) + "_" + name + "_ms"] = value;
}

// "TTFT turn 1 (ms) p50 / p99:   812.40 / 950.10", one line per turn index (multi-turn).
std::string turn_ttft_section(const std::vector<TurnTtft>& turns) {
  if (turns.empty()) return "";
  std::string out = banner("Time to First Token by Turn", '-');
  for (const TurnTtft& t : turns) {
    out += row(fmt::format("TTFT turn {} (ms) p50 / p99:", t.turn), fmt::format("{:.2f} / {:.2f}", t.p50_ms, t.p99_ms));
  }
  return out;
}

// "prompts of 8000 tokens (40): TTFT p50 / p99 (ms)  ... ; TPOT p50 / p99 (ms) ...", one per class (mixed).
std::string class_latency_section(const std::vector<ClassLatency>& classes) {
  if (classes.empty()) return "";
  std::string out = banner("Latency by Prompt Length", '-');
  for (const ClassLatency& c : classes) {
    out += row(fmt::format("{} tokens ({}) TTFT p50 / p99 (ms):", c.input_len, c.completed),
               fmt::format("{:.2f} / {:.2f}", c.ttft_p50_ms, c.ttft_p99_ms));
    out += row(fmt::format("{} tokens TPOT p50 / p99 (ms):", c.input_len),
               fmt::format("{:.2f} / {:.2f}", c.tpot_p50_ms, c.tpot_p99_ms));
  }
  return out;
}

std::string local_date() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

std::vector<std::string> result_notes(const BenchMetrics& metrics, const RunDescription& run) {
  std::vector<std::string> notes = run.notes;
  if (metrics.num_output_tokens_estimated > 0) {
    notes.push_back(fmt::format(
        "{} of {} completed requests had no usage.completion_tokens: their output tokens are the "
        "number of chunks with choices",
        metrics.num_output_tokens_estimated, metrics.completed));
  }
  return notes;
}

std::string format_result_table(const BenchMetrics& m, const RunDescription& run) {
  std::string out = banner("Serving Benchmark Result", '=');
  out += row("Successful requests:", std::to_string(m.completed));
  out += row("Failed requests:", std::to_string(m.failed));
  if (run.max_concurrency > 0) out += row("Maximum request concurrency:", std::to_string(run.max_concurrency));
  out += row("Benchmark duration (s):", m.duration_s);
  out += row("Total input tokens:", std::to_string(m.total_input_tokens));
  out += row("Total generated tokens:", std::to_string(m.total_output_tokens));
  out += row("Request throughput (req/s):", m.request_throughput);
  if (m.request_goodput) out += row("Request goodput (req/s):", *m.request_goodput);
  out += row("Output token throughput (tok/s):", m.output_throughput);
  out += row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  out += row("Peak concurrent requests:", std::to_string(m.max_concurrent_requests));
  out += row("Total Token throughput (tok/s):", m.total_token_throughput);
  out += latency_section("Time to First Token", "TTFT", m.ttft);
  out += latency_section("Time per Output Token (excl. 1st token)", "TPOT", m.tpot);
  out += latency_section("Inter-token Latency", "ITL", m.itl);
  out += latency_section("End-to-end Latency", "E2EL", m.e2el);
  out += turn_ttft_section(m.ttft_by_turn);
  out += class_latency_section(m.latency_by_input_class);
  out += std::string(kTableWidth, '=') + "\n";
  if (m.failed > 0) out += "First error: " + m.first_error + "\n";
  for (const std::string& note : result_notes(m, run)) out += "Note: " + note + "\n";
  return out;
}

nlohmann::json make_result_json(const BenchMetrics& m, const RunDescription& run,
                                const RunResult& result, bool with_details) {
  nlohmann::json j;
  j["date"] = local_date();
  j["backend"] = "openai";
  j["base_url"] = run.base_url;
  j["endpoint"] = run.endpoint;
  j["model_id"] = run.model;
  j["dataset_name"] = run.dataset_name;
  j["num_prompts"] = run.num_prompts;
  // JSON has no infinity; vLLM writes the string "inf".
  j["request_rate"] = std::isinf(run.request_rate) ? nlohmann::json("inf") : nlohmann::json(run.request_rate);
  j["burstiness"] = run.burstiness;
  j["max_concurrency"] = run.max_concurrency > 0 ? nlohmann::json(run.max_concurrency) : nlohmann::json();
  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["first_error"] = m.first_error;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = m.request_goodput ? nlohmann::json(*m.request_goodput) : nlohmann::json();
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  j["peak_concurrency"] = m.max_concurrent_requests;
  add_latency_keys(j, "ttft", m.ttft);
  add_latency_keys(j, "tpot", m.tpot);
  add_latency_keys(j, "itl", m.itl);
  add_latency_keys(j, "e2el", m.e2el);
  if (!m.ttft_by_turn.empty()) {
    auto& turns = j["ttft_by_turn"] = nlohmann::json::array();
    for (const TurnTtft& t : m.ttft_by_turn) {
      turns.push_back({{"turn", t.turn}, {"completed", t.completed}, {"p50_ttft_ms", t.p50_ms},
                       {"p99_ttft_ms", t.p99_ms}});
    }
  }
  if (!m.latency_by_input_class.empty()) {
    auto& classes = j["latency_by_input_len"] = nlohmann::json::array();
    for (const ClassLatency& c : m.latency_by_input_class) {
      classes.push_back({{"input_len", c.input_len}, {"completed", c.completed}, {"p50_ttft_ms", c.ttft_p50_ms},
                         {"p99_ttft_ms", c.ttft_p99_ms}, {"p50_tpot_ms", c.tpot_p50_ms}, {"p99_tpot_ms", c.tpot_p99_ms}});
    }
  }
  j["notes"] = result_notes(m, run);
  if (with_details) {
    auto& input_lens = j["input_lens"] = nlohmann::json::array();
    auto& output_lens = j["output_lens"] = nlohmann::json::array();
    auto& ttfts = j["ttfts"] = nlohmann::json::array();
    auto& itls = j["itls"] = nlohmann::json::array();
    auto& errors = j["errors"] = nlohmann::json::array();
    for (const RequestRecord& r : result.records) {
      input_lens.push_back(r.prompt_len);
      output_lens.push_back(r.success ? r.output_tokens : 0);
      ttfts.push_back(r.ttft_s);  // seconds, as vLLM writes them
      itls.push_back(r.itl_s);
      errors.push_back(r.error);
    }
  }
  return j;
}

}  // namespace pagellm::bench
