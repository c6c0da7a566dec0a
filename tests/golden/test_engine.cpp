// The paged continuous-batching engine against the transformers fixtures and against the contiguous
// reference path: one request at a time, all at once with tiny chunks, under block exhaustion
// (preemption), with prefix caching, and with seeded sampling.
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "golden_util.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("qwen3");
const fs::path kModel = kFixtures / "tied_gqa2_hd32_f32";

// Bytes one block costs for the fixture model (2 layers, 2 kv heads, head_dim 32, f32).
int64_t kv_bytes_for_blocks(int64_t num_blocks, int block_size) { return num_blocks * 2 * 2 * block_size * 2 * 32 * 4; }

// Async scheduling (plan step N+1 while step N runs, decode inputs taken from the running step's
// sampled ids) runs on the CPU as on a GPU, so the EngineModes tests run in both modes; the
// parameter is EngineConfig::async_scheduling.
class EngineModes : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(SyncAndAsync, EngineModes, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) { return info.param ? "async" : "sync"; });

// Every case submitted at once: each gets its fixture's greedy tokens, and the engine ends idle.
void expect_golden_all_together(LLM& llm, const std::vector<GoldenCase>& cases) {
  std::vector<GenerateRequest> requests;
  for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
  auto outs = llm.generate(std::move(requests));
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i].token_ids, cases[i].greedy) << "prompt " << i;
  EXPECT_TRUE(llm.engine().is_idle_and_leak_free());
}

TEST_P(EngineModes, GoldenOneAtATimeAndAllTogetherWithTinyChunks) {
  for (const std::string& name : golden_fixture_names(kFixtures)) {
    if (name.find("f32") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::vector<GoldenCase> cases = read_golden_cases(kFixtures / name);
    // max_num_seqs 1, no prefix caching: each prompt alone.
    {
      EngineConfig config;
      config.max_num_seqs = 1;
      config.enable_prefix_caching = false;
      config.async_scheduling = GetParam();
      auto llm = make_test_llm(kFixtures / name, config);
      ASSERT_TRUE(llm);
      for (size_t i = 0; i < cases.size(); ++i) {
        auto out = llm->generate({greedy_request(cases[i].prompt, static_cast<int>(cases[i].greedy.size()))});
        ASSERT_TRUE(out[0].error.is_ok()) << out[0].error.message();
        EXPECT_EQ(out[0].token_ids, cases[i].greedy) << "prompt " << i;
      }
      EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    }
    // All prompts at once, prefill forced into chunks of at most 8 tokens per step.
    {
      EngineConfig config;
      config.max_num_batched_tokens = 8;
      config.async_scheduling = GetParam();
      auto llm = make_test_llm(kFixtures / name, config);
      ASSERT_TRUE(llm);
      expect_golden_all_together(*llm, cases);
    }
  }
}

TEST(Engine, PagedEqualsContiguousReference) {
  auto backend = make_backend("cpu");
  auto model = load_model(kModel.string(), **backend);
  ASSERT_TRUE(model.has_value());
  EngineConfig config;
  config.block_size = 4;  // many blocks per sequence, scattered by the pool
  auto llm = make_test_llm(kModel, config);
  ASSERT_TRUE(llm);
  std::mt19937 rng(7);
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<TokenId>> reference;
  for (int i = 0; i < 6; ++i) {
    std::vector<TokenId> prompt(static_cast<size_t>(3 + 11 * i));
    for (TokenId& t : prompt) t = static_cast<TokenId>(rng() % 512);
    auto ref = generate_sequence(**model, **backend, prompt, greedy_options(24));
    ASSERT_TRUE(ref.has_value());
    reference.push_back(ref->token_ids);
    requests.push_back(greedy_request(prompt, 24));
  }
  auto outs = llm->generate(std::move(requests));
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i].token_ids, reference[i]) << "request " << i;
}

TEST(Engine, BlockExhaustionPreemptsAndStillMatchesUnconstrainedRun) {
  constexpr int kRequests = 160, kOutputTokens = 400;
  std::mt19937 rng(11);
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < kRequests; ++i) {
    std::vector<TokenId> prompt(static_cast<size_t>(4 + rng() % 12));
    for (TokenId& t : prompt) t = static_cast<TokenId>(rng() % 512);
    prompts.push_back(prompt);
  }
  auto run = [&](int64_t num_blocks, EngineMetrics* metrics, int async, size_t num_requests) {
    EngineConfig config;
    config.block_size = 16;
    config.kv_cache_memory_bytes = kv_bytes_for_blocks(num_blocks, 16);
    config.max_model_len = 512;
    config.async_scheduling = async;
    auto llm = make_test_llm(kModel, config);
    std::vector<GenerateRequest> requests;
    for (size_t i = 0; i < num_requests; ++i) requests.push_back(greedy_request(prompts[i], kOutputTokens));
    auto outs = llm->generate(std::move(requests));
    *metrics = llm->engine().metrics();
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    return outs;
  };
  EngineMetrics small_metrics, large_metrics;
  auto constrained = run(40, &small_metrics, /*async=*/0, kRequests);   // 640 tokens: one or two requests fit at a time
  auto roomy = run(160 * 27, &large_metrics, /*async=*/0, kRequests);   // every request fits at once
  EXPECT_GT(small_metrics.preemptions, 0u);
  EXPECT_EQ(large_metrics.preemptions, 0u);
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(constrained[static_cast<size_t>(i)].error.is_ok());
    EXPECT_EQ(constrained[static_cast<size_t>(i)].token_ids.size(), static_cast<size_t>(kOutputTokens));
    EXPECT_EQ(constrained[static_cast<size_t>(i)].token_ids, roomy[static_cast<size_t>(i)].token_ids) << "request " << i;
  }
  // Planned a step ahead: requests are preempted while a step samples for them (a third of the
  // requests, to keep the test's time down).
  EngineMetrics async_metrics;
  auto planned_ahead = run(40, &async_metrics, /*async=*/1, kRequests / 3);
  EXPECT_GT(async_metrics.preemptions, 0u);
  for (size_t i = 0; i < planned_ahead.size(); ++i) {
    ASSERT_TRUE(planned_ahead[i].error.is_ok());
    EXPECT_EQ(planned_ahead[i].token_ids, roomy[i].token_ids) << "request " << i << " (async)";
  }
}

TEST_P(EngineModes, PrefixCacheHitsGiveIdenticalTokens) {
  EngineConfig config;
  config.block_size = 16;
  config.async_scheduling = GetParam();
  auto llm = make_test_llm(kModel, config);
  ASSERT_TRUE(llm);
  std::mt19937 rng(3);
  std::vector<TokenId> shared(100);
  for (TokenId& t : shared) t = static_cast<TokenId>(rng() % 512);
  auto make_batch = [&] {
    std::vector<GenerateRequest> batch;
    for (int i = 0; i < 4; ++i) {
      std::vector<TokenId> prompt = shared;
      prompt.push_back(static_cast<TokenId>(i));
      batch.push_back(greedy_request(prompt, 12));
    }
    return batch;
  };
  auto first = llm->generate(make_batch());
  auto second = llm->generate(make_batch());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].token_ids, second[i].token_ids);
    EXPECT_EQ(second[i].num_cached_tokens, 96) << "six full blocks of the shared prefix";
  }
  const EngineMetrics m = llm->engine().metrics();
  EXPECT_GT(m.prefix_cache_hit_tokens, 0u);
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
}

TEST_P(EngineModes, SeededSamplingIsBatchInvariant) {
  EngineConfig config;
  config.async_scheduling = GetParam();
  auto llm = make_test_llm(kModel, config);
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
  const std::vector<TokenId> prompt = {5, 6, 7, 8, 9};
  auto alone = llm->generate({seeded(prompt)});
  std::vector<GenerateRequest> crowd;
  for (int i = 0; i < 8; ++i) crowd.push_back(seeded({static_cast<TokenId>(10 + i), 11, 12}));
  crowd.insert(crowd.begin() + 3, seeded(prompt));
  auto together = llm->generate(std::move(crowd));
  EXPECT_EQ(alone[0].token_ids, together[3].token_ids);
  // A different seed gives a different continuation (20 draws at temperature 1).
  GenerateRequest other = seeded(prompt);
  other.sampling.seed = 99;
  EXPECT_NE(llm->generate({std::move(other)})[0].token_ids, alone[0].token_ids);
}

// Every row samples through the Backend ops (penalties, the draw, logprobs) in the paged engine; the
// contiguous reference path samples with sample_token on the host. Penalised, seeded and logprob rows
// mixed into a batch with greedy rows give the reference's tokens and logprobs.
TEST_P(EngineModes, PenaltiesSeedsAndLogprobsMatchTheHostSampler) {
  EngineConfig config;
  config.async_scheduling = GetParam();
  auto llm = make_test_llm(kModel, config);
  ASSERT_TRUE(llm);
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  auto model = load_model(kModel.string(), **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();

  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r;
    r.prompt_token_ids = {static_cast<TokenId>(3 + i), 9, 9, static_cast<TokenId>(40 + 5 * i), 9};
    r.sampling.max_tokens = 24;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = i % 3 == 0 ? 0.0f : 0.8f;
    r.sampling.top_k = i % 2 == 0 ? 0 : 20;
    r.sampling.top_p = i == 4 ? 0.85f : 1.0f;
    r.sampling.repetition_penalty = i < 4 ? 1.3f : 1.0f;
    r.sampling.presence_penalty = i == 1 || i == 3 ? 0.5f : 0.0f;
    r.sampling.frequency_penalty = i == 2 || i == 3 ? 0.4f : 0.0f;
    if (i != 5) r.sampling.num_logprobs = 1 + i;
    r.sampling.seed = 700 + i;
    requests.push_back(r);
  }
  const std::vector<CompletedRequest> batched = llm->generate(requests);
  int changed_by_penalties = 0;  // the penalties must matter here, or this test could not see them
  for (size_t i = 0; i < 4; ++i) {
    SequenceOptions plain;
    plain.sampling = requests[i].sampling;
    plain.sampling.repetition_penalty = 1.0f;
    plain.sampling.presence_penalty = plain.sampling.frequency_penalty = 0.0f;
    auto unpenalised = generate_sequence(**model, **backend, requests[i].prompt_token_ids, plain);
    ASSERT_TRUE(unpenalised.has_value());
    changed_by_penalties += unpenalised->token_ids != batched[i].token_ids;
  }
  EXPECT_GE(changed_by_penalties, 2);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(batched[i].error.is_ok()) << batched[i].error.message();
    SequenceOptions options;
    options.sampling = requests[i].sampling;
    auto reference = generate_sequence(**model, **backend, requests[i].prompt_token_ids, options);
    ASSERT_TRUE(reference.has_value()) << reference.status().message();
    EXPECT_EQ(batched[i].token_ids, reference->token_ids);
    ASSERT_EQ(batched[i].logprobs.size(), reference->logprobs.size());
    for (size_t t = 0; t < reference->logprobs.size(); ++t) {
      const SampledLogprobs& got = batched[i].logprobs[t];
      const SampledLogprobs& want = reference->logprobs[t];
      EXPECT_NEAR(got.sampled_logprob, want.sampled_logprob, 1e-5) << "token " << t;
      ASSERT_EQ(got.top.size(), want.top.size()) << "token " << t;
      for (size_t k = 0; k < want.top.size(); ++k) {
        EXPECT_EQ(got.top[k].token_id, want.top[k].token_id) << "token " << t << " rank " << k;
        EXPECT_NEAR(got.top[k].logprob, want.top[k].logprob, 1e-5) << "token " << t << " rank " << k;
      }
    }
  }
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
}

TEST(Engine, RejectsBadRequestsUpFront) {
  EngineConfig config;
  config.max_model_len = 64;
  auto llm = make_test_llm(kModel, config);
  ASSERT_TRUE(llm);
  auto too_long = llm->engine().submit(greedy_request(std::vector<TokenId>(60, 1), 10));
  ASSERT_FALSE(too_long.has_value());
  EXPECT_NE(too_long.status().message().find("exceeds max_model_len 64"), std::string::npos);
  auto bad_id = llm->engine().submit(greedy_request({1, 2, 999}, 4));
  ASSERT_FALSE(bad_id.has_value());
  EXPECT_NE(bad_id.status().message().find("outside the vocabulary"), std::string::npos);
  GenerateRequest bad_p = greedy_request({1, 2}, 4);
  bad_p.sampling.top_p = 1.5f;
  EXPECT_FALSE(llm->engine().submit(std::move(bad_p)).has_value());
}

// vLLM's concurrent partial prefills: with at most one long prompt unfinished at a time and 8 tokens
// a step, every prompt (long ones behind shorter ones included) still gives transformers' tokens.
TEST_P(EngineModes, PartialPrefillLimitsKeepTheGoldenTokens) {
  const std::vector<GoldenCase> cases = read_golden_cases(kModel);
  EngineConfig config;
  config.max_num_batched_tokens = 8;
  config.long_prefill_token_threshold = 4;
  config.max_num_partial_prefills = 2;
  config.max_long_partial_prefills = 1;
  config.async_scheduling = GetParam();
  auto llm = make_test_llm(kModel, config);
  ASSERT_TRUE(llm);
  expect_golden_all_together(*llm, cases);
}

TEST(Engine, PartialPrefillFlagsOutOfRangeAreOneLineErrors) {
  EngineConfig config;
  config.model_dir = kModel.string();
  config.device = "cpu";
  config.kv_cache_memory_bytes = 64 << 20;
  config.max_num_partial_prefills = 1;
  config.max_long_partial_prefills = 2;
  auto too_many = LLM::load(config);
  ASSERT_FALSE(too_many.has_value());
  EXPECT_EQ(too_many.status().message(), "[engine] --max-long-partial-prefills 2 must not exceed --max-num-partial-prefills 1");
  config.max_long_partial_prefills = 0;
  config.max_num_partial_prefills = -1;
  auto negative = LLM::load(config);
  ASSERT_FALSE(negative.has_value());
  EXPECT_NE(negative.status().message().find("must be >= 0, got 0, -1 and 0"), std::string::npos)
      << negative.status().message();
  // Above 1 with no threshold, long prompts are those past 4% of max_model_len (vLLM's default).
  config.max_num_partial_prefills = 4;
  config.max_model_len = 200;
  auto defaulted = LLM::load(config);
  ASSERT_TRUE(defaulted.has_value()) << defaulted.status().message();
  EXPECT_EQ((*defaulted)->engine().config().long_prefill_token_threshold, 8);
  config.max_num_partial_prefills = 0;  // the long limit alone gets the same default
  config.max_long_partial_prefills = 1;
  auto long_only = LLM::load(config);
  ASSERT_TRUE(long_only.has_value()) << long_only.status().message();
  EXPECT_EQ((*long_only)->engine().config().long_prefill_token_threshold, 8);
  config.max_long_partial_prefills = 0;  // neither: no threshold
  auto neither = LLM::load(config);
  ASSERT_TRUE(neither.has_value()) << neither.status().message();
  EXPECT_EQ((*neither)->engine().config().long_prefill_token_threshold, 0);
}

TEST_P(EngineModes, AbortFreesBlocks) {
  EngineConfig config;
  config.async_scheduling = GetParam();
  auto llm = make_test_llm(kModel, config);
  ASSERT_TRUE(llm);
  auto channel = llm->engine().submit(greedy_request({1, 2, 3}, 200));
  ASSERT_TRUE(channel.has_value());
  auto first = (*channel)->next();
  ASSERT_TRUE(first.has_value());
  llm->engine().abort((*channel)->id());
  std::optional<FinishReason> reason;
  while (auto out = (*channel)->next()) reason = out->finish_reason;
  EXPECT_EQ(reason, FinishReason::kAbort);
  for (int i = 0; i < 100 && !llm->engine().is_idle_and_leak_free(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
}

}  // namespace
}  // namespace pagellm
