// Metric math: numpy-compatible percentiles, vLLM's TPOT/goodput rules, arrival statistics.
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "bench/arrivals.h"
#include "bench/metrics.h"

namespace pagellm::bench {
namespace {

TEST(Percentile, MatchesNumpyLinearInterpolation) {
  // Values from numpy.percentile(..., method="linear").
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 99), 3.97, 1e-12);
  EXPECT_NEAR(percentile({50, 10, 40, 20, 30}, 90), 46.0, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 50), 2.0);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 100), 3.0);
  EXPECT_DOUBLE_EQ(percentile({5}, 99), 5.0);
  EXPECT_DOUBLE_EQ(percentile({}, 99), 0.0);
  EXPECT_NEAR(percentile({0.1, 0.2, 0.4, 0.8}, 25), 0.175, 1e-12);
}

TEST(Percentile, ParsingAndLabels) {
  auto ps = parse_percentiles("50,90,99.9");
  ASSERT_TRUE(ps.has_value());
  EXPECT_EQ(*ps, (std::vector<double>{50, 90, 99.9}));
  EXPECT_EQ(percentile_label(99), "99");
  EXPECT_EQ(percentile_label(99.9), "99.9");
  EXPECT_FALSE(parse_percentiles("0").has_value());
  EXPECT_FALSE(parse_percentiles("101").has_value());
  EXPECT_FALSE(parse_percentiles("abc").has_value());
}

TEST(Goodput, ParsesSlos) {
  auto slo = parse_goodput({"ttft:200", "tpot:50.5"});
  ASSERT_TRUE(slo.has_value());
  EXPECT_EQ(slo->ttft_ms.value_or(-1), 200);
  EXPECT_EQ(slo->tpot_ms.value_or(-1), 50.5);
  EXPECT_FALSE(slo->e2el_ms.has_value());
  EXPECT_FALSE(parse_goodput({"latency:5"}).has_value());
  EXPECT_FALSE(parse_goodput({"ttft=5"}).has_value());
  EXPECT_FALSE(parse_goodput({}).value().is_set());
}

std::vector<RequestRecord> sample_records() {
  RequestRecord five_tokens;
  five_tokens.success = true;
  five_tokens.prompt_len = 10;
  five_tokens.output_tokens = 5;
  five_tokens.output_tokens_from_usage = true;
  five_tokens.start_s = 0.0;
  five_tokens.ttft_s = 0.1;
  five_tokens.e2el_s = 0.5;
  five_tokens.itl_s = {0.1, 0.1, 0.1, 0.1};
  RequestRecord one_token;
  one_token.success = true;
  one_token.prompt_len = 20;
  one_token.output_tokens = 1;
  one_token.output_tokens_from_usage = false;
  one_token.start_s = 1.5;
  one_token.ttft_s = 0.2;
  one_token.e2el_s = 0.2;
  RequestRecord failed;
  failed.prompt_len = 30;
  failed.error = "boom";
  RequestRecord failed_later = failed;
  failed_later.error = "second";
  return {five_tokens, one_token, failed, failed_later};
}

TEST(ComputeMetrics, FollowsVllmDefinitions) {
  BenchMetrics m = compute_metrics(sample_records(), /*duration_s=*/2.0, /*peak_concurrency=*/3, {}, {50, 99});
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 2);
  EXPECT_EQ(m.first_error, "boom");
  EXPECT_EQ(m.total_input_tokens, 30);  // failed requests' prompts do not count
  EXPECT_EQ(m.total_output_tokens, 6);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 18.0);
  EXPECT_FALSE(m.request_goodput.has_value());
  EXPECT_NEAR(m.ttft.mean_ms, 150.0, 1e-9);
  EXPECT_NEAR(m.ttft.median_ms, 150.0, 1e-9);
  EXPECT_NEAR(m.ttft.std_ms, 50.0, 1e-9);
  EXPECT_NEAR(m.tpot.mean_ms, 100.0, 1e-9);  // only requests with > 1 output token
  EXPECT_NEAR(m.itl.mean_ms, 100.0, 1e-9);
  EXPECT_NEAR(m.e2el.mean_ms, 350.0, 1e-9);
  ASSERT_EQ(m.e2el.percentiles_ms.size(), 2u);
  EXPECT_NEAR(m.e2el.percentiles_ms[1].second, 200.0 + 300.0 * 0.99, 1e-9);
  EXPECT_EQ(m.max_concurrent_requests, 3);
  EXPECT_EQ(m.num_output_tokens_estimated, 1);
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 5.0);  // five chunks inside second 0
}

TEST(ComputeMetrics, MixedPromptLengthsGetTheirOwnLatencies) {
  std::vector<RequestRecord> records;
  auto add = [&](int input_class, double ttft_s, double e2el_s, int64_t output_tokens, bool success = true) {
    RequestRecord r;
    r.success = success;
    r.prompt_len = input_class;
    r.input_class = input_class;
    r.ttft_s = ttft_s;
    r.e2el_s = e2el_s;
    r.output_tokens = output_tokens;
    r.output_tokens_from_usage = true;
    records.push_back(r);
  };
  add(64, 0.010, 0.110, 11);  // TPOT 10 ms
  add(64, 0.030, 0.230, 11);  // TPOT 20 ms
  add(8000, 2.0, 3.0, 101);   // TPOT 10 ms
  add(8000, 9.0, 9.0, 1, false);  // failed: not counted
  const BenchMetrics m = compute_metrics(records, 10.0, 3, {}, {99});
  ASSERT_EQ(m.latency_by_input_class.size(), 2u);
  const ClassLatency& long_prompts = m.latency_by_input_class[0];  // longest first
  EXPECT_EQ(long_prompts.input_len, 8000);
  EXPECT_EQ(long_prompts.completed, 1);
  EXPECT_NEAR(long_prompts.ttft_p99_ms, 2000.0, 1e-9);
  EXPECT_NEAR(long_prompts.tpot_p50_ms, 10.0, 1e-9);
  const ClassLatency& short_prompts = m.latency_by_input_class[1];
  EXPECT_EQ(short_prompts.input_len, 64);
  EXPECT_EQ(short_prompts.completed, 2);
  EXPECT_NEAR(short_prompts.ttft_p50_ms, 20.0, 1e-9);
  EXPECT_NEAR(short_prompts.ttft_p99_ms, 10.0 + 20.0 * 0.99, 1e-9);
  EXPECT_NEAR(short_prompts.tpot_p50_ms, 15.0, 1e-9);
  // Without classes (any other dataset) there is no such section.
  EXPECT_TRUE(compute_metrics(sample_records(), 2.0, 3, {}, {99}).latency_by_input_class.empty());
}

TEST(ComputeMetrics, GoodputCountsRequestsMeetingEverySlo) {
  GoodputSlo ttft_slo;
  ttft_slo.ttft_ms = 150;
  EXPECT_DOUBLE_EQ(compute_metrics(sample_records(), 2.0, 1, ttft_slo, {99}).request_goodput.value(), 0.5);
  GoodputSlo tpot_slo;  // a one-token request has TPOT 0 for goodput
  tpot_slo.tpot_ms = 50;
  EXPECT_DOUBLE_EQ(compute_metrics(sample_records(), 2.0, 1, tpot_slo, {99}).request_goodput.value(), 0.5);
  GoodputSlo both = ttft_slo;
  both.tpot_ms = 50;
  EXPECT_DOUBLE_EQ(compute_metrics(sample_records(), 2.0, 1, both, {99}).request_goodput.value(), 0.0);
  GoodputSlo loose;
  loose.e2el_ms = 1000;
  EXPECT_DOUBLE_EQ(compute_metrics(sample_records(), 2.0, 1, loose, {99}).request_goodput.value(), 1.0);
}

TEST(Arrivals, InfiniteRateSendsAllAtOnce) {
  auto offsets = make_arrival_offsets(5, INFINITY, 1.0, 0);
  ASSERT_TRUE(offsets.has_value());
  EXPECT_EQ(*offsets, std::vector<double>(5, 0.0));
  EXPECT_FALSE(make_arrival_offsets(5, 0.0, 1.0, 0).has_value());
  EXPECT_FALSE(make_arrival_offsets(5, 1.0, 0.0, 0).has_value());
}

TEST(Arrivals, GammaGapsHaveTheRequestedRateAndBurstiness) {
  const int n = 20001;
  for (double burstiness : {1.0, 4.0, 0.5}) {
    std::vector<double> offsets = make_arrival_offsets(n, 10.0, burstiness, 42).value();
    EXPECT_EQ(offsets[0], 0.0);
    std::vector<double> gaps;
    for (int i = 1; i < n; ++i) gaps.push_back(offsets[i] - offsets[i - 1]);
    double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
    double var = 0;
    for (double g : gaps) var += (g - mean) * (g - mean);
    var /= gaps.size();
    EXPECT_NEAR(mean, 0.1, 0.005) << burstiness;
    // Gamma with shape k: squared coefficient of variation = 1/k.
    EXPECT_NEAR(var / (mean * mean), 1.0 / burstiness, 0.1 / burstiness) << burstiness;
  }
  EXPECT_EQ(make_arrival_offsets(10, 5.0, 1.0, 7).value(), make_arrival_offsets(10, 5.0, 1.0, 7).value());
  EXPECT_NE(make_arrival_offsets(10, 5.0, 1.0, 7).value(), make_arrival_offsets(10, 5.0, 1.0, 8).value());
}

}  // namespace
}  // namespace pagellm::bench
