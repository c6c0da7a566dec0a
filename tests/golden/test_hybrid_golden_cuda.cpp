// Hybrid Gated DeltaNet models (Qwen3.5 text, Qwen3-Next MoE) on the CUDA backend against the
// transformers fixtures of test_hybrid_golden.cpp (tests/golden/hybrid), with the CPU test's bars:
// f32 exact greedy tokens (the first token only where the oracle disagrees with itself) and
// next-token logits within 1e-4 relative, through the contiguous path and the paged engine (alone,
// and all together in 8-token steps so chunked prefills mix with decodes and graph-bucket padding
// rows); prefill in one piece == prefill in chunks of 1, 7 and 64 tokens. Skips without a GPU.
//
// Qwen3-Next's MoE routes on the device (backend.h moe_route), so its decode steps run in CUDA
// graphs like Qwen3.5's.
#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

#include "golden_util.h"
#include "model/model.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("hybrid");

std::unique_ptr<LLM> make_cuda_llm(const std::string& fixture, const EngineConfig& config) {
  return make_test_llm(kFixtures / fixture, config, "cuda");
}

class HybridGoldenCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridGoldenCuda, ContiguousPathMatchesTransformers) {
  SKIP_UNLESS_BACKEND("cuda");
  const fs::path dir = kFixtures / GetParam();
  auto backend = make_backend("cuda");
  ASSERT_TRUE(backend.has_value());
  auto model = load_model(dir.string(), **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  for (const GoldenCase& c : read_golden_cases(dir)) {
    SCOPED_TRACE("prompt of " + std::to_string(c.prompt.size()) + " tokens");
    auto got = generate_sequence(**model, **backend, c.prompt, greedy_options(static_cast<int>(c.greedy.size())));
    ASSERT_TRUE(got.has_value()) << got.status().message();
    ASSERT_EQ(got->prompt_logits.size(), c.logits.size());
    const auto [max_abs_logit, max_err] = logit_error(got->prompt_logits, c.logits);
    EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_abs_logit)) << "max |logit| " << max_abs_logit;
    EXPECT_EQ(c.checked(got->token_ids), c.checked(c.greedy));
    std::fprintf(stderr, "  %s (cuda) prompt %zu: max |logit err| %.3g of max |logit| %.3g\n", GetParam().c_str(),
                 c.prompt.size(), max_err, max_abs_logit);
  }
}

TEST_P(HybridGoldenCuda, PagedEngineOneAtATimeAndAllTogetherWithTinyChunks) {
  SKIP_UNLESS_BACKEND("cuda");
  const std::vector<GoldenCase> cases = read_golden_cases(kFixtures / GetParam());
  {
    EngineConfig config;
    config.max_num_seqs = 1;
    auto llm = make_cuda_llm(GetParam(), config);
    ASSERT_TRUE(llm);
    for (size_t i = 0; i < cases.size(); ++i) {
      auto out = llm->generate({greedy_request(cases[i].prompt, static_cast<int>(cases[i].greedy.size()))});
      ASSERT_TRUE(out[0].error.is_ok()) << out[0].error.message();
      EXPECT_EQ(cases[i].checked(out[0].token_ids), cases[i].checked(cases[i].greedy)) << "prompt " << i;
    }
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  }
  {
    // All prompts at once, three times over (decode batches pad up to graph buckets, the padding
    // rows on the scratch state slot), at most 8 tokens per step.
    EngineConfig config;
    config.max_num_batched_tokens = 8;
    auto llm = make_cuda_llm(GetParam(), config);
    ASSERT_TRUE(llm);
    std::vector<GenerateRequest> requests;
    for (int round = 0; round < 3; ++round)
      for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
    auto outs = llm->generate(std::move(requests));
    for (size_t i = 0; i < outs.size(); ++i) {
      const GoldenCase& c = cases[i % cases.size()];
      ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
      EXPECT_EQ(c.checked(outs[i].token_ids), c.checked(c.greedy)) << "request " << i;
    }
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  }
}

TEST_P(HybridGoldenCuda, PrefillInOnePieceEqualsPrefillInChunks) {
  SKIP_UNLESS_BACKEND("cuda");
  const auto prompts = long_gdn_prompts();
  auto run = [&](int chunk) {
    EngineConfig config;
    config.long_prefill_token_threshold = chunk;  // 0: the whole prompt in one step
    auto llm = make_cuda_llm(GetParam(), config);
    std::vector<GenerateRequest> requests;
    for (const auto& p : prompts) requests.push_back(greedy_request(p, 12));
    auto outs = llm->generate(std::move(requests));
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    std::vector<std::vector<TokenId>> tokens;
    for (const auto& out : outs) tokens.push_back(out.token_ids);
    return tokens;
  };
  const auto whole = run(0);
  for (int chunk : {1, 7, 64}) {
    SCOPED_TRACE("chunks of " + std::to_string(chunk));
    EXPECT_EQ(run(chunk), whole);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridGoldenCuda, ::testing::ValuesIn(golden_fixture_names(kFixtures)),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HybridGoldenCuda);

}  // namespace
}  // namespace pagellm
