// bench serve against the scripted fake server: metrics match the scripted timings, failures are
// counted with their first error, the concurrency cap holds.
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "bench/fake_openai_server.h"
#include "bench/serve_runner.h"

namespace pagellm::bench {
namespace {

std::unique_ptr<FakeOpenAiServer> start_fake(const FakeServerScript& script) {
  auto server = FakeOpenAiServer::start(script);
  EXPECT_TRUE(server.has_value()) << server.status().message();
  return std::move(server).value();
}

ServeConfig config_for(const std::string& base_url, Endpoint endpoint = Endpoint::kCompletions) {
  ServeConfig config;
  config.base_url = parse_base_url(base_url).value();
  config.request = {"fake-model", endpoint, true};
  config.show_progress = false;
  return config;
}

std::vector<BenchRequest> id_requests(int count, int output_len) {
  std::vector<BenchRequest> requests(count);
  for (BenchRequest& r : requests) {
    r.prompt_token_ids = {1, 2, 3, 4};
    r.prompt_len = 4;
    r.output_len = output_len;
  }
  return requests;
}

BenchMetrics metrics_of(const RunResult& result) {
  return compute_metrics(result.records, result.duration_s, result.peak_concurrency, {}, {50, 99});
}

// First chunk 50 ms after the request, then a token every 10 ms: 10 tokens end at 140 ms.
TEST(ServeRunner, MetricsMatchKnownTimings) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 50;
  script.token_interval_ms = 10;
  auto server = start_fake(script);
  RunResult result = run_serve_benchmark(config_for(server->base_url()), id_requests(8, 10)).value();
  BenchMetrics m = metrics_of(result);
  ASSERT_EQ(m.failed, 0) << m.first_error;
  EXPECT_EQ(m.completed, 8);
  EXPECT_EQ(m.total_input_tokens, 32);
  EXPECT_EQ(m.total_output_tokens, 80);
  EXPECT_EQ(m.num_output_tokens_estimated, 0);
  // Lower bounds are hard (the server cannot be early); upper bounds leave room for slow machines.
  EXPECT_GE(m.ttft.mean_ms, 50.0);
  EXPECT_LT(m.ttft.mean_ms, 50.0 + 40.0);
  EXPECT_NEAR(m.tpot.mean_ms, 10.0, 3.0);
  EXPECT_NEAR(m.itl.median_ms, 10.0, 3.0);
  EXPECT_GE(m.e2el.mean_ms, 140.0);
  EXPECT_LT(m.e2el.mean_ms, 140.0 + 60.0);
  for (const RequestRecord& r : result.records) {
    EXPECT_EQ(r.itl_s.size(), 9u);
    EXPECT_TRUE(r.output_tokens_from_usage);
  }
  EXPECT_GE(result.duration_s, 0.140);
  EXPECT_LT(result.duration_s, 0.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 80.0 / result.duration_s);
  EXPECT_DOUBLE_EQ(m.request_throughput, 8.0 / result.duration_s);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 112.0 / result.duration_s);
  EXPECT_EQ(result.peak_concurrency, 8);
  EXPECT_EQ(server->peak_requests_in_flight(), 8);
  EXPECT_EQ(result.num_sse_events, 8 * 12);  // 10 tokens + usage + [DONE]
}

TEST(ServeRunner, ChatEndpointAndKeepAliveReuse) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 5;
  script.token_interval_ms = 2;
  auto server = start_fake(script);
  ServeConfig config = config_for(server->base_url(), Endpoint::kChatCompletions);
  config.max_concurrency = 2;
  std::vector<BenchRequest> requests(6);
  for (BenchRequest& r : requests) {
    r.prompt_text = "hello there general";
    r.prompt_len = 3;
    r.output_len = 4;
  }
  BenchMetrics m = metrics_of(run_serve_benchmark(config, requests).value());
  EXPECT_EQ(m.completed, 6) << m.first_error;
  EXPECT_EQ(m.total_output_tokens, 24);
  EXPECT_EQ(server->num_requests(), 6);
}

TEST(ServeRunner, MaxConcurrencyIsRespected) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 20;
  script.token_interval_ms = 5;
  auto server = start_fake(script);
  ServeConfig config = config_for(server->base_url());
  config.max_concurrency = 4;
  RunResult result = run_serve_benchmark(config, id_requests(20, 5)).value();
  BenchMetrics m = metrics_of(result);
  EXPECT_EQ(m.completed, 20) << m.first_error;
  EXPECT_EQ(result.peak_concurrency, 4);
  EXPECT_EQ(server->peak_requests_in_flight(), 4);
  // The clock starts after the concurrency wait: queued requests do not see inflated TTFT.
  EXPECT_LT(m.ttft.percentiles_ms.back().second, 20.0 + 40.0);
  EXPECT_GE(result.duration_s, 5 * 0.040);  // 5 waves of 20 + 4·5 ms
}

TEST(ServeRunner, PoissonArrivalsSpreadRequestsOut) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 1;
  script.token_interval_ms = 1;
  auto server = start_fake(script);
  ServeConfig config = config_for(server->base_url());
  config.request_rate = 100.0;
  config.seed = 5;
  RunResult result = run_serve_benchmark(config, id_requests(30, 2)).value();
  EXPECT_EQ(metrics_of(result).completed, 30);
  double last_start_s = 0;
  for (const RequestRecord& r : result.records) {
    EXPECT_GE(r.start_s, last_start_s);  // issued in order
    last_start_s = r.start_s;
  }
  EXPECT_GT(last_start_s, 0.1);  // 29 gaps of 10 ms on average
  EXPECT_LT(result.peak_concurrency, 30);
}

TEST(ServeRunner, HttpErrorsAreCountedWithTheFirstError) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 1;
  script.token_interval_ms = 1;
  script.error_status = 500;
  script.error_every_nth = 2;  // requests 1, 3, 5 fail
  auto server = start_fake(script);
  ServeConfig config = config_for(server->base_url());
  config.max_concurrency = 1;  // one connection, reused after error responses too
  BenchMetrics m = metrics_of(run_serve_benchmark(config, id_requests(6, 3)).value());
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 3);
  EXPECT_NE(m.first_error.find("HTTP 500"), std::string::npos) << m.first_error;
  EXPECT_NE(m.first_error.find("scripted failure"), std::string::npos) << m.first_error;
}

TEST(ServeRunner, ConnectionRefused) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);  // nothing listens on this port now
  ServeConfig config = config_for("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  BenchMetrics m = metrics_of(run_serve_benchmark(config, id_requests(3, 3)).value());
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 3);
  EXPECT_NE(m.first_error.find("refused"), std::string::npos) << m.first_error;
}

TEST(ServeRunner, MalformedSseFailsTheRequest) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 1;
  script.token_interval_ms = 1;
  script.malformed_first_event = true;
  auto server = start_fake(script);
  BenchMetrics m = metrics_of(run_serve_benchmark(config_for(server->base_url()), id_requests(2, 3)).value());
  EXPECT_EQ(m.failed, 2);
  EXPECT_NE(m.first_error.find("malformed SSE event"), std::string::npos) << m.first_error;
}

TEST(ServeRunner, StreamCutMidwayFails) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 1;
  script.token_interval_ms = 1;
  script.cut_stream_after_first_token = true;
  auto server = start_fake(script);
  BenchMetrics m = metrics_of(run_serve_benchmark(config_for(server->base_url()), id_requests(2, 5)).value());
  EXPECT_EQ(m.failed, 2);
  EXPECT_NE(m.first_error.find("mid-response"), std::string::npos) << m.first_error;
}

TEST(ServeRunner, WithoutUsageCountsChunksAndSaysSo) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 1;
  script.token_interval_ms = 1;
  script.send_usage = false;
  script.chunked = false;  // HTTP/1.1 body that ends when the server closes
  auto server = start_fake(script);
  BenchMetrics m = metrics_of(run_serve_benchmark(config_for(server->base_url()), id_requests(3, 7)).value());
  EXPECT_EQ(m.completed, 3) << m.first_error;
  EXPECT_EQ(m.total_output_tokens, 21);
  EXPECT_EQ(m.num_output_tokens_estimated, 3);
}

}  // namespace
}  // namespace pagellm::bench
