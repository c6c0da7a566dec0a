// prompt_logprobs through the paged engine: every prompt token's logprob, rank and top-k equal what
// a contiguous forward of the prompt's prefix gives (log_softmax of its next-token logits), in one
// step or in chunks of 4 tokens, with the prefix cache warm (it must be skipped), and for several
// copies of one prompt in a batch.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "golden_util.h"

namespace pagellm {
namespace {

const fs::path kModel = golden_fixture_root("qwen3") / "tied_gqa2_hd32_f32";
constexpr int kTopK = 5;

// log_softmax of the contiguous path's next-token logits after prompt[0, j), for each j >= 1.
std::vector<PromptTokenLogprobs> reference_prompt_logprobs(const std::vector<TokenId>& prompt) {
  auto backend = make_backend("cpu");
  auto model = load_model(kModel.string(), **backend);
  EXPECT_TRUE(model.has_value());
  std::vector<PromptTokenLogprobs> want;
  for (size_t j = 1; j < prompt.size(); ++j) {
    auto out = generate_sequence(**model, **backend, std::vector<TokenId>(prompt.begin(), prompt.begin() + static_cast<long>(j)),
                                 greedy_options(1));
    EXPECT_TRUE(out.has_value());
    const std::vector<float>& x = out->prompt_logits;
    const double max_value = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (float v : x) sum += std::exp(v - max_value);
    const double log_sum = std::log(sum) + max_value;
    PromptTokenLogprobs entry;
    entry.token_id = prompt[j];
    entry.logprob = static_cast<float>(x[static_cast<size_t>(prompt[j])] - log_sum);
    entry.rank = std::count_if(x.begin(), x.end(), [&](float v) { return v >= x[static_cast<size_t>(prompt[j])]; });
    std::vector<TokenId> order(x.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<TokenId>(i);
    std::partial_sort(order.begin(), order.begin() + kTopK, order.end(),
                      [&](TokenId a, TokenId b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    for (int k = 0; k < kTopK; ++k) entry.top.push_back({order[k], static_cast<float>(x[order[k]] - log_sum)});
    want.push_back(entry);
  }
  return want;
}

void expect_near(const std::vector<PromptTokenLogprobs>& got, const std::vector<PromptTokenLogprobs>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("prompt token " + std::to_string(i + 1));
    EXPECT_EQ(got[i].token_id, want[i].token_id);
    EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-4);
    EXPECT_EQ(got[i].rank, want[i].rank);
    ASSERT_EQ(got[i].top.size(), want[i].top.size());
    for (size_t k = 0; k < got[i].top.size(); ++k) {
      EXPECT_EQ(got[i].top[k].token_id, want[i].top[k].token_id);
      EXPECT_NEAR(got[i].top[k].logprob, want[i].top[k].logprob, 1e-4);
    }
  }
}

GenerateRequest prompt_logprobs_request(const std::vector<TokenId>& prompt) {
  GenerateRequest r = greedy_request(prompt, 3);
  r.sampling.num_prompt_logprobs = kTopK;
  return r;
}

std::vector<TokenId> random_prompt(size_t length, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<TokenId> prompt(length);
  for (TokenId& t : prompt) t = static_cast<TokenId>(rng() % 512);
  return prompt;
}

TEST(EnginePromptLogprobs, EqualTheContiguousForwardWholeAndChunked) {
  const std::vector<TokenId> prompt = random_prompt(23, 5);
  const std::vector<PromptTokenLogprobs> want = reference_prompt_logprobs(prompt);
  for (int chunk : {2048, 4}) {
    SCOPED_TRACE("max_num_batched_tokens " + std::to_string(chunk));
    EngineConfig config;
    config.max_num_batched_tokens = chunk;
    config.block_size = 4;
    auto llm = make_test_llm(kModel, config);
    ASSERT_TRUE(llm);
    // The prompt alone first: its blocks are cached, and a prompt_logprobs request must not use them.
    const CompletedRequest warm = llm->generate({greedy_request(prompt, 3)})[0];
    EXPECT_TRUE(warm.prompt_logprobs.empty());
    // Two copies (as n = 2 sends them) and an unrelated prompt, batched.
    const std::vector<CompletedRequest> outs = llm->generate(
        {prompt_logprobs_request(prompt), prompt_logprobs_request(prompt), greedy_request(random_prompt(9, 6), 3)});
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE("copy " + std::to_string(i));
      ASSERT_TRUE(outs[static_cast<size_t>(i)].error.is_ok()) << outs[static_cast<size_t>(i)].error.message();
      EXPECT_EQ(outs[static_cast<size_t>(i)].num_cached_tokens, 0);
      EXPECT_EQ(outs[static_cast<size_t>(i)].token_ids, warm.token_ids);
      expect_near(outs[static_cast<size_t>(i)].prompt_logprobs, want);
    }
    EXPECT_TRUE(outs[2].prompt_logprobs.empty());
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  }
}

TEST(EnginePromptLogprobs, OneTokenPromptHasNoneAndBadCountsAreRefused) {
  auto llm = make_test_llm(kModel, EngineConfig{});
  ASSERT_TRUE(llm);
  const CompletedRequest one = llm->generate({prompt_logprobs_request({42})})[0];
  EXPECT_TRUE(one.error.is_ok());
  EXPECT_TRUE(one.prompt_logprobs.empty());
  GenerateRequest bad = prompt_logprobs_request({1, 2});
  bad.sampling.num_prompt_logprobs = 21;
  const CompletedRequest refused = llm->generate({bad})[0];
  EXPECT_NE(refused.error.message().find("prompt_logprobs must be in [0, 20], got 21"), std::string::npos)
      << refused.error.message();
}

}  // namespace
}  // namespace pagellm
