// A hybrid Gated DeltaNet model (the qwen3_5_text transformers fixture) served through the OpenAI
// API: token-id prompts, several at once, give transformers' greedy tokens, and every state slot
// and KV block is free again afterwards; with prefix caching (the default) a repeated and a partly
// shared prompt hit, the /metrics counters say so, and the answers equal a server without caching.
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "http_test_client.h"
#include "serve_process.h"

namespace pagellm::e2e {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kHybrid = fs::path(PAGELLM_SOURCE_DIR) / "tests/golden/hybrid/qwen3_5_text_tiny_f32";

TEST(ServeHybridTest, ConcurrentCompletionsGiveTransformersGreedyTokens) {
  ServeProcess server({"--model", kHybrid.string(), "--max-num-seqs", "4"});
  ASSERT_TRUE(server.ready()) << server.log();
  std::ifstream in(kHybrid / "expected.json");
  const json expected = json::parse(in);
  const auto& cases = expected["cases"];
  std::vector<HttpResult> results(cases.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cases.size(); ++i) {
    threads.emplace_back([&, i] {
      const json body = {{"model", kModelName}, {"prompt", cases[i]["prompt_ids"]}, {"max_tokens", 16},
                         {"temperature", 0}, {"logprobs", 1}};
      results[i] = http_post_json(server.port(), "/v1/completions", body);
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_EQ(results[i].status, 200) << results[i].body;
    const json response = json::parse(results[i].body);
    EXPECT_EQ(response["usage"]["completion_tokens"].get<int>(), 16);
    // No tokenizer in the fixture: the logprobs' tokens name the ids ("token_id:N"), which is how
    // the sampled ids are read back here.
    const json& tokens = response["choices"][0]["logprobs"]["tokens"];
    ASSERT_EQ(tokens.size(), 16u) << results[i].body;
    std::vector<int> got;
    for (const auto& t : tokens) {
      const std::string s = t.get<std::string>();
      got.push_back(std::stoi(s.substr(s.find(':') + 1)));
    }
    // As in tests/golden: the full-forward greedy tokens where the fixture has them; otherwise
    // generate()'s, of which only the first is the oracle's where generate() disagreed with its own
    // full forward (the 33-token prompt).
    const bool full_forward = cases[i].contains("full_forward_greedy_token_ids");
    const std::vector<int> want =
        cases[i][full_forward ? "full_forward_greedy_token_ids" : "greedy_token_ids"].get<std::vector<int>>();
    const size_t checked = !full_forward && cases[i]["prompt_ids"].size() == 33 ? 1 : want.size();
    EXPECT_EQ(std::vector<int>(got.begin(), got.begin() + checked), std::vector<int>(want.begin(), want.begin() + checked))
        << "prompt " << i;
  }
  const std::string metrics = http_get(server.port(), "/metrics").body;
  EXPECT_EQ(metric_value(metrics, "pagellm:num_requests_running"), 0.0) << metrics.substr(0, 600);
}

// The completion tokens of one request ("token_id:N" logprob tokens).
std::vector<std::string> complete(int port, const std::vector<int>& prompt) {
  const json body = {{"model", kModelName}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 1}};
  const HttpResult result = http_post_json(port, "/v1/completions", body);
  EXPECT_EQ(result.status, 200) << result.body;
  if (result.status != 200) return {};
  return json::parse(result.body)["choices"][0]["logprobs"]["tokens"].get<std::vector<std::string>>();
}

TEST(ServeHybridTest, PrefixCachingIsOnByDefaultAndHitsCountInMetrics) {
  std::vector<int> base(200);
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<int>((i * 37 + 11) % 512);
  std::vector<int> partial(base.begin(), base.begin() + 150);
  for (int i = 0; i < 30; ++i) partial.push_back(300 + i);
  const std::vector<std::vector<int>> prompts = {base, base, partial};

  ServeProcess cold_server({"--model", kHybrid.string(), "--no-enable-prefix-caching"});
  ASSERT_TRUE(cold_server.ready()) << cold_server.log();
  std::vector<std::vector<std::string>> cold;
  for (const auto& prompt : prompts) cold.push_back(complete(cold_server.port(), prompt));
  EXPECT_EQ(metric_value(http_get(cold_server.port(), "/metrics").body, "vllm:prefix_cache_hits_total"), 0.0);

  ServeProcess server({"--model", kHybrid.string()});
  ASSERT_TRUE(server.ready()) << server.log();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(complete(server.port(), prompts[i]), cold[i]) << "prompt " << i;
  // Hits end on checkpoints (every 64 tokens) and leave >= 16 tokens to compute: 128 of the repeat,
  // 128 of the 150 shared tokens.
  const std::string metrics = http_get(server.port(), "/metrics").body;
  EXPECT_EQ(metric_value(metrics, "vllm:prefix_cache_hits_total"), 256.0) << metrics.substr(0, 1200);
  EXPECT_EQ(metric_value(metrics, "pagellm:prefix_cache_hits_total"), 256.0);
  EXPECT_EQ(metric_value(metrics, "vllm:prefix_cache_queries_total"), 200.0 + 200.0 + 180.0);
}

}  // namespace
}  // namespace pagellm::e2e
