// Speculative decoding through the paged engine on the transformers fixtures (CPU, f32): n-gram and
// draft-model drafts verified by the target in one varlen forward give exactly the greedy tokens,
// alone and batched, with chunked prefill, prefix caching and preemption, and seeded sampling gives
// the tokens and logprobs of the plain run; at temperature > 0 the next-token distribution stays the
// target's (chi-square). Every run ends leak-free (KV blocks of target and draft).
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "golden_util.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("qwen3");
const fs::path kModel = kFixtures / "tied_gqa2_hd32_f32";
const fs::path kOtherModel = kFixtures / "untied_gqa1_hd16_f32";  // same 512-token vocabulary

SpeculativeConfig speculative(const std::string& json) {
  Expected<SpeculativeConfig> parsed = parse_speculative_config(json);
  EXPECT_TRUE(parsed.has_value()) << parsed.status().message();
  return parsed.has_value() ? *parsed : SpeculativeConfig{};
}

const std::string kNgram = R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3})";

// Drafts were proposed, some accepted and some rejected: both verification paths ran.
void expect_both_verification_paths(const EngineMetrics& m) {
  EXPECT_GT(m.spec_decode_num_drafts, 0u);
  EXPECT_GT(m.spec_decode_num_accepted_tokens, 0u);
  EXPECT_LT(m.spec_decode_num_accepted_tokens, m.spec_decode_num_draft_tokens);
  EXPECT_EQ(std::accumulate(m.spec_decode_accepted_per_position.begin(), m.spec_decode_accepted_per_position.end(),
                            uint64_t{0}),
            m.spec_decode_num_accepted_tokens);
}

// The parameter is EngineConfig::async_scheduling: asked for or not, speculative steps run synchronously.
class SpeculativeModes : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(SyncAndAsync, SpeculativeModes, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) { return info.param ? "async" : "sync"; });

TEST_P(SpeculativeModes, NgramGreedyEqualsTheFixturesAloneAndBatchedWithTinyChunks) {
  for (const fs::path& root : {kFixtures, golden_fixture_root("families")}) {
    for (const std::string& name : golden_fixture_names(root)) {
      if (name.find("f32") == std::string::npos) continue;
      SCOPED_TRACE(name);
      const std::vector<GoldenCase> cases = read_golden_cases(root / name);
      for (const bool batched : {false, true}) {
        EngineConfig config;
        config.max_num_seqs = batched ? 256 : 1;
        config.max_num_batched_tokens = batched ? 8 : 2048;  // batched: chunked prefill beside speculative rows
        config.async_scheduling = GetParam();
        config.speculative = speculative(kNgram);
        auto llm = make_test_llm(root / name, config);
        ASSERT_TRUE(llm);
        std::vector<GenerateRequest> requests;
        for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
        std::vector<CompletedRequest> outs;
        if (batched) {
          outs = llm->generate(std::move(requests));
        } else {
          for (GenerateRequest& r : requests) outs.push_back(llm->generate({std::move(r)})[0]);
        }
        for (size_t i = 0; i < outs.size(); ++i) {
          ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
          EXPECT_EQ(cases[i].checked(outs[i].token_ids), cases[i].checked(cases[i].greedy))
              << "prompt " << i << (batched ? " batched" : " alone");
        }
        if (name == "tied_gqa2_hd32_f32") expect_both_verification_paths(llm->engine().metrics());
        EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
      }
    }
  }
}

std::vector<std::vector<TokenId>> repetitive_prompts(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<TokenId> motif(static_cast<size_t>(2 + rng() % 4));
    for (TokenId& t : motif) t = static_cast<TokenId>(rng() % 512);
    std::vector<TokenId> prompt;
    for (size_t j = 0; j < 3 + rng() % 6; ++j) prompt.insert(prompt.end(), motif.begin(), motif.end());
    prompt.push_back(static_cast<TokenId>(rng() % 512));
    prompts.push_back(prompt);
  }
  return prompts;
}

int64_t kv_bytes_for_blocks(int64_t num_blocks, int block_size) { return num_blocks * 2 * 2 * block_size * 2 * 32 * 4; }

TEST(Speculative, PreemptionAndPrefixCachingKeepTheGreedyTokens) {
  const std::vector<std::vector<TokenId>> prompts = repetitive_prompts(24, 5);
  auto run = [&](const std::string& json, int64_t num_blocks, bool prefix_caching, EngineMetrics* metrics) {
    EngineConfig config;
    config.block_size = 16;
    config.kv_cache_memory_bytes = kv_bytes_for_blocks(num_blocks, 16);
    config.max_model_len = 256;
    config.enable_prefix_caching = prefix_caching;
    if (!json.empty()) config.speculative = speculative(json);
    auto llm = make_test_llm(kModel, config);
    std::vector<GenerateRequest> requests;
    for (int repeat = 0; repeat < 2; ++repeat)  // each prompt twice: prefix hits
      for (const auto& prompt : prompts) requests.push_back(greedy_request(prompt, 120));
    auto outs = llm->generate(std::move(requests));
    *metrics = llm->engine().metrics();
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    return outs;
  };
  EngineMetrics plain_metrics, small_metrics, roomy_metrics;
  const auto plain = run("", 48 * 12, true, &plain_metrics);
  const auto small = run(kNgram, 24, true, &small_metrics);  // 384 tokens: a few requests at a time
  const auto roomy = run(kNgram, 48 * 12, false, &roomy_metrics);
  EXPECT_GT(small_metrics.preemptions, 0u);
  EXPECT_GT(small_metrics.prefix_cache_hit_tokens, 0u);
  expect_both_verification_paths(small_metrics);
  expect_both_verification_paths(roomy_metrics);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(small[i].error.is_ok()) << small[i].error.message();
    EXPECT_EQ(small[i].token_ids, plain[i].token_ids) << "request " << i << " (preempted, prefix cache)";
    EXPECT_EQ(roomy[i].token_ids, plain[i].token_ids) << "request " << i;
  }
  // Fewer steps than tokens: accepted drafts skip decode steps.
  EXPECT_LT(roomy_metrics.steps, plain_metrics.steps);
}

// Seeded sampling draws uniform j for output j whether it is sampled alone or at a speculative
// position, so speculation gives the plain run's tokens exactly; penalties see the drafts before
// their position, logprobs are the target's at each kept position.
TEST(Speculative, SeededSamplingPenaltiesLogprobsAndStopsGiveThePlainRun) {
  const std::vector<std::vector<TokenId>> prompts = repetitive_prompts(8, 9);
  std::vector<GenerateRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.prompt_token_ids = prompts[i];
    r.sampling.max_tokens = 40 + static_cast<int>(i);
    r.sampling.ignore_eos = true;
    r.sampling.temperature = i % 4 == 0 ? 0.0f : 0.3f + 0.2f * static_cast<float>(i % 3);
    r.sampling.top_k = i % 2 == 0 ? 0 : 20;
    r.sampling.top_p = i == 5 ? 0.9f : 1.0f;
    r.sampling.repetition_penalty = i == 2 || i == 3 ? 1.2f : 1.0f;
    r.sampling.frequency_penalty = i == 3 ? 0.3f : 0.0f;
    if (i % 3 != 2) r.sampling.num_logprobs = 2;
    if (i == 7) r.sampling.min_tokens = 5;
    r.sampling.seed = 300 + i;
    requests.push_back(r);
  }
  EngineConfig config;
  auto plain_llm = make_test_llm(kModel, config);
  config.speculative = speculative(R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1})");
  auto spec_llm = make_test_llm(kModel, config);
  ASSERT_TRUE(plain_llm && spec_llm);
  // Request 6 stops at its 12th output's token (first seen there or earlier: where the plain run stops).
  requests[6].sampling.stop_token_ids = {plain_llm->generate({requests[6]})[0].token_ids.at(11)};
  const auto plain = plain_llm->generate(requests);
  const auto spec = spec_llm->generate(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(spec[i].error.is_ok()) << spec[i].error.message();
    EXPECT_EQ(spec[i].token_ids, plain[i].token_ids);
    EXPECT_EQ(spec[i].finish_reason, plain[i].finish_reason);
    ASSERT_EQ(spec[i].logprobs.size(), plain[i].logprobs.size());
    for (size_t t = 0; t < plain[i].logprobs.size(); ++t) {
      EXPECT_NEAR(spec[i].logprobs[t].sampled_logprob, plain[i].logprobs[t].sampled_logprob, 1e-5) << "token " << t;
      ASSERT_EQ(spec[i].logprobs[t].top.size(), plain[i].logprobs[t].top.size());
      for (size_t k = 0; k < plain[i].logprobs[t].top.size(); ++k)
        EXPECT_EQ(spec[i].logprobs[t].top[k].token_id, plain[i].logprobs[t].top[k].token_id);
    }
  }
  EXPECT_EQ(plain[6].finish_reason, FinishReason::kStop);
  expect_both_verification_paths(spec_llm->engine().metrics());
  EXPECT_TRUE(spec_llm->engine().is_idle_and_leak_free());
}

// Draws at temperature 1 (top-5), one seed per request: the token sampled at a speculative
// position follows the target's distribution. Given the likeliest first output v, the n-gram
// proposer drafts the token that followed v in the prompt, one likely enough to be kept often and
// rejected often. Were a rejected draft's replacement drawn from the full p again (rather than p
// without the draft), P(draft) would grow from p(d) to p(d)(2 - p(d)); keeping the draft on a third
// of the rejections gives a chi-square above 200.
TEST(Speculative, SampledTokensFollowTheTargetDistribution) {
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  auto model = load_model(kModel.string(), **backend);
  ASSERT_TRUE(model.has_value());
  constexpr int kTopK = 5;
  auto top_k_probs = [&](const std::vector<TokenId>& prompt) {
    SequenceOptions options = greedy_options(1);
    auto out = generate_sequence(**model, **backend, prompt, options);
    EXPECT_TRUE(out.has_value());
    std::vector<float> logits = out->prompt_logits;
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + kTopK, order.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
    std::map<TokenId, double> probs;
    double total = 0.0;
    for (int i = 0; i < kTopK; ++i) total += std::exp(logits[order[i]] - logits[order[0]]);
    for (int i = 0; i < kTopK; ++i) probs[order[i]] = std::exp(logits[order[i]] - logits[order[0]]) / total;
    return probs;
  };
  // A prompt in which the likeliest first token v last occurs followed by the target's likeliest
  // token after v, given 15-85% there: the draft is then kept and rejected often.
  auto likeliest = [](const std::map<TokenId, double>& probs) {
    return std::max_element(probs.begin(), probs.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  };
  std::mt19937 rng(3);
  std::vector<TokenId> prompt;
  TokenId first = -1;
  std::map<TokenId, double> second_probs;
  bool found = false;
  for (int attempt = 0; attempt < 200 && !found; ++attempt) {
    prompt.assign(40, 0);
    for (TokenId& t : prompt) t = static_cast<TokenId>(rng() % 512);
    first = likeliest(top_k_probs(prompt));
    const size_t at = 30 + rng() % 8;  // v's last occurrence, then the draft
    prompt[at] = first;
    std::vector<TokenId> extended = prompt;
    extended.push_back(first);
    prompt[at + 1] = likeliest(top_k_probs(extended));
    if (likeliest(top_k_probs(prompt)) != first) continue;
    if (std::find(prompt.begin() + static_cast<std::ptrdiff_t>(at) + 1, prompt.end(), first) != prompt.end()) continue;
    extended = prompt;
    extended.push_back(first);
    second_probs = top_k_probs(extended);
    const TokenId draft = prompt[at + 1];
    found = second_probs.contains(draft) && second_probs[draft] > 0.15 && second_probs[draft] < 0.85;
  }
  ASSERT_TRUE(found) << "no prompt gives a draft of moderate probability";

  EngineConfig config;
  config.speculative = speculative(R"({"method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_min": 1, "prompt_lookup_max": 1})");
  auto llm = make_test_llm(kModel, config);
  ASSERT_TRUE(llm);
  constexpr int kSamples = 2000;
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < kSamples; ++i) {
    GenerateRequest r;
    r.prompt_token_ids = prompt;
    r.sampling.max_tokens = 3;  // the step sampling output 1 carries a draft only when output 2 may follow
    r.sampling.ignore_eos = true;
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = kTopK;
    r.sampling.seed = i;  // independent draws, the same from run to run
    requests.push_back(r);
  }
  (void)llm->generate({requests[0]});  // the prompt's blocks enter the prefix cache: the rest compute its tail only
  const auto outs = llm->generate(std::move(requests));
  std::map<TokenId, int> counts;
  int conditioned = 0;
  for (const CompletedRequest& out : outs) {
    ASSERT_EQ(out.token_ids.size(), 3u);
    if (out.token_ids[0] != first) continue;
    ++conditioned;
    ++counts[out.token_ids[1]];
  }
  ASSERT_GT(conditioned, 300);
  double chi_square = 0.0;
  for (const auto& [token, p] : second_probs) {
    const double expected = p * conditioned;
    const double observed = counts.contains(token) ? counts[token] : 0;
    chi_square += (observed - expected) * (observed - expected) / expected;
    counts.erase(token);
  }
  EXPECT_TRUE(counts.empty()) << "a token outside the top-5 was sampled";
  EXPECT_LT(chi_square, 18.47) << "chi-square with 4 degrees of freedom, p = 0.001";
  const EngineMetrics m = llm->engine().metrics();
  EXPECT_GE(m.spec_decode_num_drafts, static_cast<uint64_t>(conditioned));  // every output 1 after v had a draft
  EXPECT_GT(m.spec_decode_num_accepted_tokens, 30u);
  EXPECT_LT(m.spec_decode_num_accepted_tokens + 30, m.spec_decode_num_draft_tokens);
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
}

TEST(Speculative, DraftModelGivesTheGreedyTokens) {
  const std::vector<GoldenCase> cases = read_golden_cases(kModel);
  for (const fs::path& draft : {kModel, kOtherModel}) {
    SCOPED_TRACE(draft.filename().string());
    EngineConfig config;
    config.max_num_batched_tokens = 16;
    config.speculative = speculative(R"({"model": ")" + draft.string() + R"(", "num_speculative_tokens": 3})");
    auto llm = make_test_llm(kModel, config);
    ASSERT_TRUE(llm);
    std::vector<GenerateRequest> requests;
    for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
    const auto outs = llm->generate(std::move(requests));
    for (size_t i = 0; i < outs.size(); ++i) {
      ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
      EXPECT_EQ(outs[i].token_ids, cases[i].greedy) << "prompt " << i;
    }
    const EngineMetrics m = llm->engine().metrics();
    EXPECT_GT(m.spec_decode_num_draft_tokens, 0u);
    if (draft == kModel) {
      EXPECT_EQ(m.spec_decode_num_accepted_tokens, m.spec_decode_num_draft_tokens) << "the target as its own draft";
    } else {
      EXPECT_LT(m.spec_decode_num_accepted_tokens, m.spec_decode_num_draft_tokens);
    }
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  }
}

TEST(Speculative, DraftModelUnderPreemptionKeepsTheGreedyTokens) {
  const std::vector<std::vector<TokenId>> prompts = repetitive_prompts(12, 33);
  auto run = [&](const std::string& json, int64_t num_blocks) {
    EngineConfig config;
    config.block_size = 16;
    // Each block pays for the target's and the draft's KV (the draft: 3 layers, 4 kv heads, head_dim 16).
    config.kv_cache_memory_bytes = kv_bytes_for_blocks(num_blocks, 16) + num_blocks * 3 * 4 * 16 * 2 * 16 * 4;
    config.max_model_len = 256;
    if (!json.empty()) config.speculative = speculative(json);
    auto llm = make_test_llm(kModel, config);
    std::vector<GenerateRequest> requests;
    for (const auto& prompt : prompts) requests.push_back(greedy_request(prompt, 100));
    auto outs = llm->generate(std::move(requests));
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    return std::make_pair(outs, llm->engine().metrics());
  };
  const auto [plain, plain_metrics] = run("", 400);
  const auto [small, small_metrics] =
      run(R"({"model": ")" + kOtherModel.string() + R"(", "num_speculative_tokens": 2})", 20);
  EXPECT_GT(small_metrics.preemptions, 0u);
  EXPECT_GT(small_metrics.spec_decode_num_accepted_tokens, 0u);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(small[i].token_ids, plain[i].token_ids) << "request " << i;
}

// Constrained requests decode without drafts (a draft's mask would need the grammar advanced over
// the drafts before it) beside free requests that speculate; both give the plain run's tokens.
TEST(Speculative, ConstrainedRequestsBesideSpeculatingOnesKeepTheirTokens) {
  const fs::path dir = qwen3_fixture_with_tokenizer("speculative_structured");
  if (dir.empty()) GTEST_SKIP() << "assets/tokenizers/qwen3 missing (scripts/setup.sh)";
  auto run = [&](const std::string& json) {
    EngineConfig config;
    if (!json.empty()) config.speculative = speculative(json);
    auto llm = make_test_llm(dir, config);
    EXPECT_TRUE(llm);
    auto compiler = llm->engine().grammar_compiler();
    EXPECT_TRUE(compiler.has_value());
    std::vector<GenerateRequest> requests;
    for (const auto& prompt : repetitive_prompts(6, 41)) {
      GenerateRequest r = greedy_request(prompt, 24);
      if (requests.size() % 2 == 0)
        r.grammar = *(*compiler)->compile({structured::ConstraintKind::kRegex, "[a-z]{3,8}(-[0-9]{2,4})+", {}});
      requests.push_back(std::move(r));
    }
    auto outs = llm->generate(std::move(requests));
    const EngineMetrics m = llm->engine().metrics();
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    return std::make_pair(outs, m);
  };
  const auto [plain, plain_metrics] = run("");
  const auto [spec, spec_metrics] = run(kNgram);
  fs::remove_all(dir);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(spec[i].error.is_ok()) << spec[i].error.message();
    EXPECT_EQ(spec[i].token_ids, plain[i].token_ids) << "request " << i;
    EXPECT_EQ(spec[i].text, plain[i].text) << "request " << i;
  }
  EXPECT_GT(spec_metrics.spec_decode_num_drafts, 0u);
}

// The CUDA runner: speculative rows run the general attention kernels (no decode graph) beside
// decode rows that replay graphs; greedy tokens are the fixtures', seeded ones the plain run's.
TEST(SpeculativeCuda, NgramAndDraftModelGiveTheGreedyTokensWithGraphsAndAsyncAsked) {
  SKIP_UNLESS_BACKEND("cuda");
  for (const std::string& name : golden_fixture_names(kFixtures)) {
    if (name.find("f32") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::vector<GoldenCase> cases = read_golden_cases(kFixtures / name);
    const std::string draft = R"({"model": ")" + (kFixtures / name).string() + R"(", "num_speculative_tokens": 3})";
    for (const std::string& json : {kNgram, draft}) {
      EngineConfig config;
      config.async_scheduling = 1;
      config.max_num_batched_tokens = 16;
      config.speculative = speculative(json);
      auto llm = make_test_llm(kFixtures / name, config, "cuda");
      ASSERT_TRUE(llm);
      std::vector<GenerateRequest> requests;
      for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
      const auto outs = llm->generate(std::move(requests));
      for (size_t i = 0; i < outs.size(); ++i) {
        ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
        EXPECT_EQ(cases[i].checked(outs[i].token_ids), cases[i].checked(cases[i].greedy)) << "prompt " << i << " " << json;
      }
      EXPECT_GT(llm->engine().metrics().spec_decode_num_accepted_tokens, 0u) << json;
      EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    }
  }
}

// Steps whose rows all carry k drafts (a draft model that is the target itself proposes k every
// time) replay a graph of (bucket, 1 + k) rows: alone and three at once (a padded bucket of four),
// the greedy tokens stay the fixtures' and graph steps were taken.
TEST(SpeculativeCuda, UniformVerificationStepsReplayGraphs) {
  SKIP_UNLESS_BACKEND("cuda");
  for (const std::string& name : golden_fixture_names(kFixtures)) {
    if (name.find("f32") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::vector<GoldenCase> cases = read_golden_cases(kFixtures / name);
    const std::string draft = R"({"model": ")" + (kFixtures / name).string() + R"(", "num_speculative_tokens": 3})";
    for (const size_t batch : {size_t{1}, size_t{3}}) {
      EngineConfig config;
      config.enable_prefix_caching = false;
      config.speculative = speculative(draft);
      auto llm = make_test_llm(kFixtures / name, config, "cuda");
      ASSERT_TRUE(llm);
      for (size_t first = 0; first + batch <= cases.size(); first += batch) {
        std::vector<GenerateRequest> requests;
        for (size_t i = first; i < first + batch; ++i) {
          GenerateRequest r = greedy_request(cases[i].prompt, static_cast<int>(cases[i].greedy.size()));
          r.sampling.ignore_eos = true;  // every step keeps all rows, so they stay uniform
          requests.push_back(r);
        }
        const auto outs = llm->generate(std::move(requests));
        for (size_t i = 0; i < outs.size(); ++i) {
          ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
          EXPECT_EQ(cases[first + i].checked(outs[i].token_ids), cases[first + i].checked(cases[first + i].greedy))
              << "prompt " << first + i << " batch " << batch;
        }
      }
      EXPECT_GT(llm->engine().runner().num_multi_token_graph_steps(), 0) << "batch " << batch;
      EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    }
  }
}

// bf16 at batch 1: a verification row's positions go through the same GEMV (batch invariant for
// <= 8 rows) and the split-keys attention path whose rows equal the decode kernel's bit for bit, so
// speculation gives the plain run's tokens and logprobs exactly, not only on the f32 fixtures.
TEST(SpeculativeCuda, Bf16VerificationRowsGiveThePlainDecodeBitForBit) {
  SKIP_UNLESS_BACKEND("cuda");
  for (const char* name : {"tied_gqa2_hd32_bf16", "untied_gqa8_hd16_bf16"}) {
    SCOPED_TRACE(name);
    const fs::path dir = kFixtures / name;
    const std::string draft = R"({"model": ")" + dir.string() + R"(", "num_speculative_tokens": 3})";
    EngineConfig config;
    config.max_num_seqs = 1;
    auto plain_llm = make_test_llm(dir, config, "cuda");
    config.speculative = speculative(draft);
    auto spec_llm = make_test_llm(dir, config, "cuda");
    ASSERT_TRUE(plain_llm && spec_llm);
    for (const GoldenCase& c : read_golden_cases(dir)) {
      GenerateRequest r = greedy_request(c.prompt, 48);
      r.sampling.ignore_eos = true;
      r.sampling.num_logprobs = 1;
      const auto plain = plain_llm->generate({r});
      const auto spec = spec_llm->generate({r});
      ASSERT_TRUE(plain[0].error.is_ok() && spec[0].error.is_ok());
      EXPECT_EQ(spec[0].token_ids, plain[0].token_ids);
      ASSERT_EQ(spec[0].logprobs.size(), plain[0].logprobs.size());
      for (size_t i = 0; i < plain[0].logprobs.size(); ++i)
        EXPECT_EQ(spec[0].logprobs[i].sampled_logprob, plain[0].logprobs[i].sampled_logprob) << "token " << i;
    }
    EXPECT_GT(spec_llm->engine().runner().num_multi_token_graph_steps(), 0);
    EXPECT_GT(spec_llm->engine().metrics().spec_decode_num_accepted_tokens, 0u);
  }
}

TEST(SpeculativeCuda, SeededSamplingGivesThePlainRun) {
  SKIP_UNLESS_BACKEND("cuda");
  std::vector<GenerateRequest> requests;
  const std::vector<std::vector<TokenId>> prompts = repetitive_prompts(8, 9);
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.prompt_token_ids = prompts[i];
    r.sampling.max_tokens = 40;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = i % 4 == 0 ? 0.0f : 0.5f;
    r.sampling.repetition_penalty = i == 2 ? 1.2f : 1.0f;
    r.sampling.num_logprobs = 2;
    r.sampling.seed = 300 + i;
    requests.push_back(r);
  }
  EngineConfig config;
  auto plain_llm = make_test_llm(kModel, config, "cuda");
  config.speculative = speculative(kNgram);
  auto spec_llm = make_test_llm(kModel, config, "cuda");
  ASSERT_TRUE(plain_llm && spec_llm);
  const auto plain = plain_llm->generate(requests);
  const auto spec = spec_llm->generate(requests);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(spec[i].token_ids, plain[i].token_ids) << "request " << i;
  expect_both_verification_paths(spec_llm->engine().metrics());
  EXPECT_TRUE(spec_llm->engine().is_idle_and_leak_free());
}

// A hybrid (Gated DeltaNet) draft for a dense target: its recurrent state restarts from the state
// after the kept drafts (draft_model_proposer.h); the target's tokens are transformers'.
TEST(Speculative, AHybridDraftGivesADenseTargetTheFixtureTokens) {
  const fs::path hybrid = golden_fixture_root("hybrid");
  const std::vector<std::string> names = golden_fixture_names(hybrid);
  ASSERT_FALSE(names.empty());
  const std::vector<GoldenCase> cases = read_golden_cases(kModel);
  EngineConfig config;
  config.max_num_batched_tokens = 8;  // chunked prompts beside speculative rows
  config.speculative = speculative(R"({"model": ")" + (hybrid / names[0]).string() + R"(", "num_speculative_tokens": 2})");
  auto llm = make_test_llm(kModel, config);
  ASSERT_TRUE(llm);
  std::vector<GenerateRequest> requests;
  for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
  const std::vector<CompletedRequest> outs = llm->generate(std::move(requests));
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
    EXPECT_EQ(cases[i].checked(outs[i].token_ids), cases[i].checked(cases[i].greedy)) << "prompt " << i;
  }
  EXPECT_GT(llm->engine().metrics().spec_decode_num_draft_tokens, 0u);
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
}

}  // namespace
}  // namespace pagellm
