// The client's own capacity: 1,024 concurrent streams from the fake server, all parsed by the one
// client thread pinned to one core (sustained: a token every 10 ms per stream; burst: every token
// at once). Prints the measured figures (docs/PERFORMANCE.md, "bench client capacity"); asserts
// only a loose floor, CI machines are slow.
//
//   build-bench/tests/test_unit_bench --gtest_filter='ClientCapacity.*'
#include <pthread.h>
#include <sched.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "bench/fake_openai_server.h"
#include "bench/serve_runner.h"

namespace pagellm::bench {
namespace {

constexpr int kStreams = 1024;
constexpr int kTokensPerStream = 200;

// Keeps the client on the core it runs on now (the fake server's thread was started before and
// may use the other cores).
void pin_to_current_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(sched_getcpu(), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

struct CapacityRun {
  RunResult result;
  BenchMetrics metrics;
  int server_peak_in_flight = 0;
};

// Runs kStreams requests at once against `script` with the client thread pinned to one core.
CapacityRun run_pinned(const FakeServerScript& script) {
  auto server = FakeOpenAiServer::start(script).value();
  cpu_set_t before;
  pthread_getaffinity_np(pthread_self(), sizeof(before), &before);
  pin_to_current_cpu();
  ServeConfig config;
  config.base_url = parse_base_url(server->base_url()).value();
  config.request = {"fake-model", Endpoint::kCompletions, true};
  config.show_progress = false;
  std::vector<BenchRequest> requests(kStreams);
  for (BenchRequest& r : requests) {
    r.prompt_token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
    r.prompt_len = 8;
    r.output_len = script.num_tokens;
  }
  CapacityRun run;
  run.result = run_serve_benchmark(config, requests).value();
  pthread_setaffinity_np(pthread_self(), sizeof(before), &before);
  run.metrics = compute_metrics(run.result.records, run.result.duration_s, run.result.peak_concurrency, {}, {99});
  run.server_peak_in_flight = server->peak_requests_in_flight();
  return run;
}

void report(const char* name, const CapacityRun& run) {
  const RunResult& r = run.result;
  double events_per_s = r.num_sse_events / r.duration_s;
  double events_per_cpu_s = r.num_sse_events / r.client_cpu_s;
  std::printf("[capacity] %s: %d streams (server peak %d in flight), %lld SSE events in %.3f s wall = %.0f events/s; "
              "client thread CPU %.3f s (%.0f%% of one core) = %.0f events per client CPU-second; TPOT mean %.2f ms\n",
              name, kStreams, run.server_peak_in_flight, static_cast<long long>(r.num_sse_events), r.duration_s,
              events_per_s, r.client_cpu_s, 100.0 * r.client_cpu_s / r.duration_s, events_per_cpu_s,
              run.metrics.tpot.mean_ms);
  ::testing::Test::RecordProperty("events_per_s", static_cast<int>(events_per_s));
  ::testing::Test::RecordProperty("events_per_client_cpu_s", static_cast<int>(events_per_cpu_s));
}

// 1,024 streams open at once, each a token every 10 ms for 1 s: the load asks for ~100k events/s.
TEST(ClientCapacity, ThousandConcurrentStreamsSustained) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 100;  // every stream is connected before the first token
  script.token_interval_ms = 10;
  script.num_tokens = 100;
  CapacityRun run = run_pinned(script);
  report("sustained", run);
  ASSERT_EQ(run.metrics.completed, kStreams) << run.metrics.first_error;
  EXPECT_EQ(run.result.peak_concurrency, kStreams);
  EXPECT_EQ(run.server_peak_in_flight, kStreams);  // truly concurrent on the wire
  EXPECT_EQ(run.result.num_sse_events, int64_t{kStreams} * (script.num_tokens + 2));
  EXPECT_GT(run.result.num_sse_events / run.result.duration_s, 5000.0);  // sanity only
}

// Every token of every stream at once: how many events the client parses per CPU-second.
TEST(ClientCapacity, ThousandStreamsBurst) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 0;
  script.token_interval_ms = 0;
  script.num_tokens = kTokensPerStream;
  CapacityRun run = run_pinned(script);
  report("burst", run);
  ASSERT_EQ(run.metrics.completed, kStreams) << run.metrics.first_error;
  EXPECT_EQ(run.metrics.total_output_tokens, int64_t{kStreams} * kTokensPerStream);
  EXPECT_EQ(run.result.num_sse_events, int64_t{kStreams} * (kTokensPerStream + 2));
  EXPECT_GT(run.result.num_sse_events / run.result.duration_s, 5000.0);  // sanity only
}

}  // namespace
}  // namespace pagellm::bench
