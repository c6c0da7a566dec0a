// Greedy runs of prompts through the engine and their comparison, for tests that hold one engine
// configuration (speculation, MTP) to another's outputs: the same tokens, logprobs bit for bit or
// within a tolerance, and the engine leak-free afterwards.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "golden_util.h"

namespace pagellm {

struct GreedyOutcome {
  std::vector<CompletedRequest> outs;
  EngineMetrics metrics;
};

// The prompts `waves` times over (greedy, one logprob), each wave batched (a later wave may hit what
// an earlier one cached) or one prompt at a time.
inline GreedyOutcome run_greedy(const fs::path& model, const EngineConfig& config,
                                const std::vector<std::vector<TokenId>>& prompts, int max_tokens, bool batched,
                                int waves = 1, const std::string& device = "cpu") {
  auto llm = make_test_llm(model, config, device);
  if (!llm) {
    ADD_FAILURE() << "engine did not load";
    return {};
  }
  GreedyOutcome result;
  for (int wave = 0; wave < waves; ++wave) {
    std::vector<GenerateRequest> requests;
    for (const auto& prompt : prompts) {
      GenerateRequest r = greedy_request(prompt, max_tokens);
      r.sampling.num_logprobs = 1;
      requests.push_back(std::move(r));
    }
    if (batched) {
      for (CompletedRequest& out : llm->generate(std::move(requests))) result.outs.push_back(std::move(out));
    } else {
      for (GenerateRequest& r : requests) result.outs.push_back(llm->generate({std::move(r)})[0]);
    }
  }
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  result.metrics = llm->engine().metrics();
  return result;
}

// The same tokens, and logprobs bit for bit (or within `tolerance`).
inline void expect_same_outputs(const GreedyOutcome& got, const GreedyOutcome& want, const std::string& what,
                                double tolerance = 0.0) {
  ASSERT_EQ(got.outs.size(), want.outs.size()) << what;
  for (size_t i = 0; i < want.outs.size(); ++i) {
    ASSERT_TRUE(got.outs[i].error.is_ok()) << what << ": " << got.outs[i].error.message();
    EXPECT_EQ(got.outs[i].token_ids, want.outs[i].token_ids) << what << ", request " << i;
    ASSERT_EQ(got.outs[i].logprobs.size(), want.outs[i].logprobs.size()) << what << ", request " << i;
    for (size_t t = 0; t < want.outs[i].logprobs.size(); ++t)
      EXPECT_NEAR(got.outs[i].logprobs[t].sampled_logprob, want.outs[i].logprobs[t].sampled_logprob, tolerance)
          << what << ", request " << i << ", token " << t;
  }
}

}  // namespace pagellm
