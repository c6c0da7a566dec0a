#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "runner/sampler.h"

namespace pagellm {
namespace {

SampleOutput sample(const std::vector<float>& logits, const SamplingParams& p, int counter = 0,
                    std::vector<TokenId> history = {}, int num_prompt = 0) {
  SampleInputs in;
  in.logits = logits;
  in.params = &p;
  in.history = history;
  in.num_prompt_tokens = num_prompt;
  in.num_output_tokens = counter;
  in.seed = 42;
  return sample_token(in);
}

std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

TEST(Sampler, GreedyAndDegenerateFiltersPickTheArgmax) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -3.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(sample(logits, p).token_id, 1);
  p.temperature = 5.0f;
  p.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample(logits, p, i).token_id, 1);
  p.top_k = 0;
  p.top_p = 1e-6f;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample(logits, p, i).token_id, 1);
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample(logits, p, i).token_id, 1);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  const std::vector<double> probs = {0.5, 0.25, 0.15, 0.1};
  SamplingParams p;
  p.temperature = 1.0f;
  std::map<TokenId, int> counts;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[sample(log_probs(probs), p, i).token_id];
  for (size_t t = 0; t < probs.size(); ++t)
    EXPECT_NEAR(counts[static_cast<TokenId>(t)] / static_cast<double>(draws), probs[t], 0.015) << "token " << t;
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  const std::vector<double> probs = {0.4, 0.3, 0.2, 0.1};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;  // 0.4 < 0.5 <= 0.7: tokens 0 and 1
  std::map<TokenId, int> counts;
  for (int i = 0; i < 4000; ++i) ++counts[sample(log_probs(probs), p, i).token_id];
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[0] / 4000.0, 0.4 / 0.7, 0.03);
}

TEST(Sampler, TopPOverAFlatHugeVocabularyStaysInsideTheNucleus) {
  // A flat distribution over 151,936 tokens: the nucleus is larger than the sorted head, so the
  // sampler has to fall back to sorting further.
  std::vector<float> logits(151936, 0.0f);
  for (size_t i = 0; i < 1000; ++i) logits[i] = 1.0f;  // the 1000 likeliest
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  for (int i = 0; i < 10; ++i) {
    const TokenId t = sample(logits, p, i).token_id;
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 151936);
  }
  p.top_p = 0.01f;  // e^1 / (1000 e + 150936) ≈ 0.0147% each: 0.01 needs ~68 of the first 1000
  for (int i = 0; i < 50; ++i) EXPECT_LT(sample(logits, p, i).token_id, 1000);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  const std::vector<double> probs = {0.6, 0.3, 0.05, 0.05};
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;  // floor 0.12: tokens 0 and 1
  for (int i = 0; i < 500; ++i) EXPECT_LT(sample(log_probs(probs), p, i).token_id, 2);
}

TEST(Sampler, PenaltiesChangeTheChoice) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;  // 2.0 -> 1.0 for a token seen in the prompt
  EXPECT_EQ(sample({2.0f, 1.9f}, p, 0, {0}, 1).token_id, 1);
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.5f;  // only output tokens count: the prompt's token 0 is not penalised
  EXPECT_EQ(sample({2.0f, 1.9f}, p, 0, {0}, 1).token_id, 0);
  EXPECT_EQ(sample({2.0f, 1.9f}, p, 1, {5, 0}, 1).token_id, 1);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.06f;  // token 0 twice in the outputs: 2.0 - 0.12 < 1.9
  EXPECT_EQ(sample({2.0f, 1.9f}, p, 2, {5, 0, 0}, 1).token_id, 1);
}

TEST(Sampler, SeedAndCounterDecideTheDraw) {
  const std::vector<float> logits(64, 0.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  std::set<TokenId> seen;
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(sample(logits, p, i).token_id, sample(logits, p, i).token_id);
    seen.insert(sample(logits, p, i).token_id);
  }
  EXPECT_GT(seen.size(), 10u);
}

TEST(Sampler, LogprobsComeFromTheRawLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.num_logprobs = 2;
  p.repetition_penalty = 3.0f;
  const auto out = sample(log_probs({0.5, 0.3, 0.2}), p, 0, {0}, 1);
  ASSERT_TRUE(out.logprobs.has_value());
  ASSERT_EQ(out.logprobs->top.size(), 2u);
  EXPECT_EQ(out.logprobs->top[0].token_id, 0);
  EXPECT_NEAR(out.logprobs->top[0].logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(out.token_id, 1);  // the penalty moved the choice, not the reported probabilities
  EXPECT_NEAR(out.logprobs->sampled_logprob, std::log(0.3), 1e-6);
}

}  // namespace
}  // namespace pagellm
