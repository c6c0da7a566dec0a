// The report (vLLM's table and JSON keys) and the concurrency sweep's JSON + SVG outputs.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/concurrency_sweep.h"
#include "bench/fake_openai_server.h"
#include "bench/report.h"
#include "bench/sweep_chart.h"

namespace pagellm::bench {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

RunDescription description() {
  RunDescription run;
  run.base_url = "http://127.0.0.1:1";
  run.endpoint = "/v1/completions";
  run.model = "fake-model";
  run.dataset_name = "random";
  run.num_prompts = 4;
  run.request_rate = INFINITY;
  run.percentiles = {50, 99};
  return run;
}

TEST(Report, TableAndJsonUseVllmNames) {
  RequestRecord r;
  r.success = true;
  r.prompt_len = 3;
  r.output_tokens = 3;
  r.output_tokens_from_usage = true;
  r.ttft_s = 0.05;
  r.e2el_s = 0.07;
  r.itl_s = {0.01, 0.01};
  RequestRecord failed;
  failed.error = "[bench] HTTP 503: busy";
  RunResult run_result;
  run_result.records = {r, failed};
  run_result.duration_s = 1.0;
  GoodputSlo slo;
  slo.ttft_ms = 100;
  BenchMetrics m = compute_metrics(run_result.records, 1.0, 2, slo, {50, 99});
  std::string table = format_result_table(m, description());
  for (const char* line : {"============ Serving Benchmark Result ============", "Successful requests:",
                           "Failed requests:", "Request goodput (req/s):", "Mean TTFT (ms):",
                           "P99 ITL (ms):", "Median TPOT (ms):", "P50 E2EL (ms):", "Peak concurrent requests:",
                           "First error: [bench] HTTP 503: busy"}) {
    EXPECT_NE(table.find(line), std::string::npos) << line << "\n" << table;
  }
  nlohmann::json j = make_result_json(m, description(), run_result, true);
  for (const char* key : {"completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
                          "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                          "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
                          "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms",
                          "median_e2el_ms", "p99_e2el_ms", "p50_e2el_ms", "max_concurrency", "num_prompts",
                          "input_lens", "output_lens", "ttfts", "itls", "errors"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["completed"], 1);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_NEAR(j["mean_tpot_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_EQ(j["request_goodput"], 1.0);
}

TEST(SweepChart, LabelledSvgWithBothPanels) {
  std::string svg = render_sweep_chart_svg({{1, 40.0, 20.0}, {16, 500.0, 25.0}, {64, 1200.5, 40.0}}, "m <x>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("output tokens / s"), std::string::npos);
  EXPECT_NE(svg.find("TPOT p50 (ms)"), std::string::npos);
  EXPECT_NE(svg.find("concurrency (requests in flight)"), std::string::npos);
  EXPECT_NE(svg.find("m &lt;x&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 20, true);
}

TEST(ConcurrencySweep, RunsEachLevelAndWritesJsonAndSvg) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 5;
  script.token_interval_ms = 2;
  auto server = FakeOpenAiServer::start(script).value();
  ServeConfig config;
  config.base_url = parse_base_url(server->base_url()).value();
  config.request = {"fake-model", Endpoint::kCompletions, true};
  config.show_progress = false;
  auto make_dataset = [](int count) {
    RandomDatasetOptions options;
    options.num_prompts = count;
    options.input_len = 8;
    options.output_len = 4;
    return make_random_dataset(options, nullptr);
  };
  std::vector<int> levels = parse_concurrency_levels("1,2,4").value();
  int levels_seen = 0;
  auto results = run_concurrency_sweep(config, levels, std::nullopt, make_dataset, description(), {},
                                       [&](const SweepLevelResult&, const RunDescription&) { ++levels_seen; });
  ASSERT_TRUE(results.has_value()) << results.status().message();
  EXPECT_EQ(levels_seen, 3);
  ASSERT_EQ(results->size(), 3u);
  for (const SweepLevelResult& level : *results) {
    EXPECT_EQ(level.metrics.completed, kSweepPromptsPerLevel * level.concurrency);  // default rule
    EXPECT_EQ(level.metrics.max_concurrent_requests, level.concurrency);
    EXPECT_EQ(level.result_json["max_concurrency"], level.concurrency);
  }
  EXPECT_EQ(server->num_requests(), 4 * (1 + 2 + 4));

  std::string dir = ::testing::TempDir() + "bench_sweep_test";
  std::filesystem::create_directories(dir);
  std::string json_path = dir + "/sweep.json";
  ASSERT_TRUE(write_sweep_outputs(json_path, *results, description()).is_ok());
  nlohmann::json doc = nlohmann::json::parse(read_file(json_path));
  ASSERT_EQ(doc["levels"].size(), 3u);
  EXPECT_EQ(doc["levels"][2]["max_concurrency"], 4);
  EXPECT_TRUE(doc["levels"][0].contains("output_throughput"));
  EXPECT_EQ(sweep_chart_path(json_path), dir + "/sweep.svg");
  std::string svg = read_file(dir + "/sweep.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("TPOT p50 (ms)"), std::string::npos);

  EXPECT_FALSE(parse_concurrency_levels("1,0").has_value());
  EXPECT_FALSE(parse_concurrency_levels("a").has_value());
  EXPECT_EQ(sweep_num_prompts(16, std::nullopt), 64);
  EXPECT_EQ(sweep_num_prompts(16, 10), 10);
}

}  // namespace
}  // namespace pagellm::bench
