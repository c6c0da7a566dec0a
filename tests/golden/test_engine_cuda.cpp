// The paged engine on the CUDA backend (ModelRunner's GPU path: one staged input copy, device argmax,
// decode graphs) against the transformers fixtures (f32: identical greedy tokens), with graphs on and
// off, alone and batched, and with host-sampled rows (seeded sampling, logprobs) mixed into batches
// of greedy rows. Skips where there is no GPU or no CUDA build.
#include <cstdlib>
#include <utility>

#include <gtest/gtest.h>

#include "golden_util.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("qwen3");

// graphs: false runs every step eagerly (--enforce-eager).
std::unique_ptr<LLM> make_cuda_llm(const fs::path& model_dir, const EngineConfig& config_in, bool graphs) {
  EngineConfig config = config_in;
  config.kernel_options.graphs = graphs;
  return make_test_llm(model_dir, config, "cuda");
}

TEST(EngineCuda, GoldenGreedyAloneAndBatchedWithAndWithoutGraphs) {
  SKIP_UNLESS_BACKEND("cuda");
  for (const std::string& name : golden_fixture_names(kFixtures)) {
    if (name.find("f32") == std::string::npos) continue;
    const std::vector<GoldenCase> cases = read_golden_cases(kFixtures / name);
    for (auto [graphs, async] : {std::pair{true, 1}, std::pair{true, 0}, std::pair{false, 1}}) {
      SCOPED_TRACE(name + (graphs ? " graphs" : " no graphs") + (async ? " async" : ""));
      {
        EngineConfig config;
        config.max_num_seqs = 1;
        config.enable_prefix_caching = false;
        config.async_scheduling = async;
        auto llm = make_cuda_llm(kFixtures / name, config, graphs);
        ASSERT_TRUE(llm);
        for (size_t i = 0; i < cases.size(); ++i) {
          auto out = llm->generate({greedy_request(cases[i].prompt, static_cast<int>(cases[i].greedy.size()))});
          ASSERT_TRUE(out[0].error.is_ok()) << out[0].error.message();
          EXPECT_EQ(out[0].token_ids, cases[i].greedy) << "prompt " << i;
        }
        EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
      }
      {
        // All prompts at once, three times over (batches of 3x the cases pad up to graph buckets),
        // prefill in chunks of at most 8 tokens so decode and prefill rows mix.
        EngineConfig config;
        config.max_num_batched_tokens = 8;
        config.async_scheduling = async;
        auto llm = make_cuda_llm(kFixtures / name, config, graphs);
        ASSERT_TRUE(llm);
        std::vector<GenerateRequest> requests;
        for (int copy = 0; copy < 3; ++copy)
          for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
        auto outs = llm->generate(std::move(requests));
        for (size_t i = 0; i < outs.size(); ++i)
          EXPECT_EQ(outs[i].token_ids, cases[i % cases.size()].greedy) << "request " << i;
        EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
      }
    }
  }
}

// Rows that once went to the host sampler and now sample on the device from their own ops (seeded
// temperature sampling, greedy with logprobs, penalties through apply_penalties' f32 copy) inside
// batches of greedy rows: each request gives what it gives alone.
TEST(EngineCuda, SeededLogprobAndPenaltyRowsMixWithGreedyRows) {
  SKIP_UNLESS_BACKEND("cuda");
  const fs::path model = kFixtures / "tied_gqa2_hd32_f32";
  auto llm = make_cuda_llm(model, EngineConfig{}, /*graphs=*/true);
  ASSERT_TRUE(llm);
  auto seeded = [](std::vector<TokenId> prompt) {
    GenerateRequest r;
    r.prompt_token_ids = std::move(prompt);
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 1234;
    r.sampling.max_tokens = 20;
    return r;
  };
  GenerateRequest with_logprobs = greedy_request({3, 1, 4, 1, 5}, 12);
  with_logprobs.sampling.num_logprobs = 3;
  GenerateRequest with_penalties = seeded({2, 7, 1, 8, 2, 8});
  with_penalties.sampling.repetition_penalty = 1.3f;
  with_penalties.sampling.presence_penalty = 0.5f;
  with_penalties.sampling.frequency_penalty = 0.2f;
  with_penalties.sampling.num_logprobs = 5;
  GenerateRequest greedy_penalised = greedy_request({9, 9, 8, 7}, 14);
  greedy_penalised.sampling.repetition_penalty = 1.5f;
  const std::vector<TokenId> prompt = {5, 6, 7, 8, 9};
  auto alone = llm->generate({seeded(prompt)});
  auto alone_logprobs = llm->generate({with_logprobs});
  auto alone_penalties = llm->generate({with_penalties});
  auto alone_greedy_penalised = llm->generate({greedy_penalised});
  std::vector<GenerateRequest> crowd;
  for (int i = 0; i < 8; ++i) crowd.push_back(greedy_request({static_cast<TokenId>(10 + i), 11, 12}, 16));
  crowd.insert(crowd.begin() + 3, seeded(prompt));
  crowd.insert(crowd.begin() + 6, with_logprobs);
  crowd.insert(crowd.begin() + 1, with_penalties);       // the others move one place down
  crowd.push_back(greedy_penalised);
  auto together = llm->generate(std::move(crowd));
  EXPECT_EQ(alone[0].token_ids, together[4].token_ids);
  EXPECT_EQ(alone_logprobs[0].token_ids, together[7].token_ids);
  EXPECT_EQ(alone_penalties[0].token_ids, together[1].token_ids);
  EXPECT_EQ(alone_greedy_penalised[0].token_ids, together.back().token_ids);
  ASSERT_EQ(together[7].logprobs.size(), together[7].token_ids.size());
  for (const auto& lp : together[7].logprobs) EXPECT_EQ(lp.top.size(), 3u);
  ASSERT_EQ(together[1].logprobs.size(), together[1].token_ids.size());
  for (const auto& lp : together[1].logprobs) EXPECT_EQ(lp.top.size(), 5u);
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
}

}  // namespace
}  // namespace pagellm
