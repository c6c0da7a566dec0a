// Speculative decoding of hybrid (Gated DeltaNet) targets on the CPU, over the transformers fixtures
// in f32: a speculative row of 1 + k tokens advances the GDN state over every draft, and the state
// after the kept ones is restored before the request's next row (runner/state_slot_binder.h). N-gram
// and draft-model speculation give the tokens and logprobs of the plain run bit for bit (a row of
// fewer than 16 tokens runs the recurrent form token by token, as decode does), alone and batched,
// chunked, preempted and with prefix caching, with dense and hybrid drafts; every run ends leak-free.
#include <numeric>
#include <tuple>
#include <random>

#include <gtest/gtest.h>

#include "golden_util.h"
#include "greedy_outcome.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("hybrid");
const fs::path kDenseDraft = golden_fixture_root("qwen3") / "untied_gqa1_hd16_f32";  // same 512-token vocabulary

const std::string kNgram = R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3})";

std::string draft_model_json(const fs::path& dir, int k) {
  return R"({"model": ")" + dir.string() + R"(", "num_speculative_tokens": )" + std::to_string(k) + "}";
}

std::vector<std::vector<TokenId>> repetitive_prompts(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<TokenId> motif(static_cast<size_t>(2 + rng() % 4));
    for (TokenId& t : motif) t = static_cast<TokenId>(rng() % 512);
    std::vector<TokenId> prompt;
    const size_t length = 70 + rng() % 100;  // past the first 64-token GDN checkpoint
    while (prompt.size() < length) prompt.insert(prompt.end(), motif.begin(), motif.end());
    prompt.push_back(static_cast<TokenId>(rng() % 512));
    prompts.push_back(prompt);
  }
  return prompts;
}

using Outcome = GreedyOutcome;

// run_greedy with the speculative config `json` (none when empty).
Outcome run(const fs::path& model, EngineConfig config, const std::string& json,
            const std::vector<std::vector<TokenId>>& prompts, int max_tokens, bool batched, int waves = 1,
            const std::string& device = "cpu") {
  if (!json.empty()) {
    Expected<SpeculativeConfig> parsed = parse_speculative_config(json);
    EXPECT_TRUE(parsed.has_value()) << parsed.status().message();
    if (parsed.has_value()) config.speculative = *parsed;
  }
  return run_greedy(model, config, prompts, max_tokens, batched, waves, device);
}

// Drafts were proposed, some kept and some rejected: the rollback ran, and so did the full keep.
void expect_both_verification_paths(const EngineMetrics& m, const std::string& what) {
  EXPECT_GT(m.spec_decode_num_accepted_tokens, 0u) << what;
  EXPECT_LT(m.spec_decode_num_accepted_tokens, m.spec_decode_num_draft_tokens) << what;
  EXPECT_EQ(std::accumulate(m.spec_decode_accepted_per_position.begin(), m.spec_decode_accepted_per_position.end(),
                            uint64_t{0}),
            m.spec_decode_num_accepted_tokens) << what;
}

class HybridSpeculative : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path model() const { return kFixtures / GetParam(); }
  fs::path other_hybrid() const {
    return kFixtures / (GetParam() == "qwen3_5_text_tiny_f32" ? "qwen3_next_tiny_moe_f32" : "qwen3_5_text_tiny_f32");
  }
};

TEST_P(HybridSpeculative, GreedyFixturesAloneAndBatchedWithTinyChunks) {
  const std::vector<GoldenCase> cases = read_golden_cases(model());
  std::vector<std::vector<TokenId>> prompts;
  for (const GoldenCase& c : cases) prompts.push_back(c.prompt);
  const int max_tokens = static_cast<int>(cases.at(0).greedy.size());
  for (const bool batched : {false, true}) {
    EngineConfig config;
    config.max_num_batched_tokens = batched ? 8 : 2048;  // batched: chunked prefill beside speculative rows
    const Outcome plain = run(model(), config, "", prompts, max_tokens, batched);
    for (size_t i = 0; i < cases.size(); ++i)
      EXPECT_EQ(cases[i].checked(plain.outs[i].token_ids), cases[i].checked(cases[i].greedy)) << "prompt " << i;
    // Hybrid drafts: the target itself (most drafts kept) and the other hybrid fixture (most rejected),
    // whose recurrent state restarts from the state after the kept drafts.
    for (const std::string& json : {kNgram, draft_model_json(kDenseDraft, 3), draft_model_json(kDenseDraft, 5),
                                    draft_model_json(model(), 3), draft_model_json(other_hybrid(), 4)}) {
      const std::string what = json + (batched ? " batched" : " alone");
      const Outcome spec = run(model(), config, json, prompts, max_tokens, batched);
      expect_same_outputs(spec, plain, what);
      EXPECT_GT(spec.metrics.spec_decode_num_draft_tokens, 0u) << what;
    }
  }
}

// Prompts that hold the model's own greedy continuation (prompt, its output, the prompt again), so
// n-gram drafts are often kept in part: the state is rolled back to every draft position. Each
// prompt runs twice (the second time a prefix-cache hit restores a GDN checkpoint).
TEST_P(HybridSpeculative, SelfRepeatingPromptsWithPrefixHitsKeepTheBits) {
  EngineConfig roomy;
  roomy.block_size = 16;
  roomy.max_model_len = 512;
  std::vector<std::vector<TokenId>> prompts = repetitive_prompts(6, 7);
  const Outcome first = run(model(), roomy, "", prompts, 40, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<TokenId> prompt = prompts[i];
    prompts[i].insert(prompts[i].end(), first.outs[i].token_ids.begin(), first.outs[i].token_ids.end());
    prompts[i].insert(prompts[i].end(), prompt.begin(), prompt.end());
  }
  const Outcome plain = run(model(), roomy, "", prompts, 40, true, /*waves=*/2);
  for (const std::string& json : {kNgram, draft_model_json(kDenseDraft, 4), draft_model_json(model(), 4)}) {
    const Outcome spec = run(model(), roomy, json, prompts, 40, true, 2);
    expect_same_outputs(spec, plain, json);
    EXPECT_GT(spec.metrics.prefix_cache_hit_tokens, 0u) << json;
    EXPECT_GT(spec.metrics.spec_decode_num_draft_tokens, 0u) << json;
    if (json == kNgram) expect_both_verification_paths(spec.metrics, json);
  }
}

// A hybrid draft whose states fit for fewer requests than run at once (a quarter of a small budget:
// one request, the start-up log says): the others decode without drafts until a chain is free; the
// outputs stay the plain run's.
TEST_P(HybridSpeculative, AHybridDraftWithStatesForFewerRequestsLeavesTheOthersWithoutDrafts) {
  const std::vector<GoldenCase> cases = read_golden_cases(model());
  std::vector<std::vector<TokenId>> prompts;
  for (const GoldenCase& c : cases) prompts.push_back(c.prompt);
  ASSERT_GT(prompts.size(), 2u);
  EngineConfig small;
  small.max_num_seqs = static_cast<int>(prompts.size());
  const int64_t draft_slot_bytes = 3 * (1536 + 4096), k = 3;  // this fixture as its own draft
  // The target's states (1 + k slots per request), about two draft chains in a quarter of what is
  // left (the target's prefix-cache checkpoints take part of it first), and some KV.
  small.kv_cache_memory_bytes = (small.max_num_seqs * (1 + k) + 1) * draft_slot_bytes +
                                4 * (2 * (1 + k) + 1) * draft_slot_bytes + 64 * 8192;
  const int max_tokens = static_cast<int>(cases.at(0).greedy.size());
  const Outcome plain = run(model(), small, "", prompts, max_tokens, true);
  const Outcome spec = run(model(), small, draft_model_json(model(), static_cast<int>(k)), prompts, max_tokens, true);
  expect_same_outputs(spec, plain, "few draft chains");
  EXPECT_GT(spec.metrics.spec_decode_num_draft_tokens, 0u);
}

// Short prompts that grow long: three requests at a time with KV for about two (28 blocks besides
// the GDN state of 1 + k slots of 16.9 KB per request, which takes at most half the budget; a draft
// model's block also pays for its 3 layers). A preempted request computes its outputs again as a
// prompt (the chunked form, whose last bits differ from decode's), so the tokens stay and the
// logprobs agree to 1e-4.
TEST_P(HybridSpeculative, PreemptionKeepsTheTokens) {
  std::vector<std::vector<TokenId>> prompts = repetitive_prompts(6, 11);
  for (auto& prompt : prompts) prompt.resize(20);
  EngineConfig roomy;
  roomy.block_size = 16;
  roomy.max_model_len = 256;
  const Outcome plain = run(model(), roomy, "", prompts, 200, true);
  EngineConfig small = roomy;
  small.max_num_seqs = 3;
  small.max_num_batched_tokens = 64;
  small.enable_prefix_caching = false;
  const int64_t state_slot_bytes = 3 * (1536 + 4096);
  for (const auto& [json, k, block_bytes] :
       {std::tuple{kNgram, 3, 8192}, std::tuple{draft_model_json(kDenseDraft, 4), 4, 8192 + 24576}}) {
    small.kv_cache_memory_bytes = (3 * (1 + k) + 1) * state_slot_bytes + 28 * block_bytes + 4096;
    const Outcome spec = run(model(), small, json, prompts, 200, true);
    expect_same_outputs(spec, plain, json + " small budget", 1e-4);
    EXPECT_GT(spec.metrics.preemptions, 0u) << json;
    EXPECT_GT(spec.metrics.spec_decode_num_draft_tokens, 0u) << json;
  }
}

// The CUDA runner: speculative rows run the recurrent GDN kernel (draft slots after any token) beside
// decode rows that replay graphs; the tokens are the plain CUDA run's.
TEST_P(HybridSpeculative, CudaGreedyTokensEqualThePlainRun) {
  SKIP_UNLESS_BACKEND("cuda");
  const std::vector<GoldenCase> cases = read_golden_cases(model());
  std::vector<std::vector<TokenId>> prompts;
  for (const GoldenCase& c : cases) prompts.push_back(c.prompt);
  EngineConfig config;
  config.async_scheduling = 1;
  config.max_num_batched_tokens = 16;
  const Outcome plain = run(model(), config, "", prompts, 16, true, 1, "cuda");
  for (const std::string& json : {kNgram, draft_model_json(kDenseDraft, 3)}) {
    const Outcome spec = run(model(), config, json, prompts, 16, true, 1, "cuda");
    ASSERT_EQ(spec.outs.size(), plain.outs.size());
    for (size_t i = 0; i < plain.outs.size(); ++i) {
      EXPECT_EQ(spec.outs[i].token_ids, plain.outs[i].token_ids) << json << ", prompt " << i;
      EXPECT_EQ(cases[i].checked(spec.outs[i].token_ids), cases[i].checked(cases[i].greedy)) << json << ", prompt " << i;
    }
    EXPECT_GT(spec.metrics.spec_decode_num_draft_tokens, 0u) << json;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridSpeculative,
                         ::testing::Values("qwen3_5_text_tiny_f32", "qwen3_next_tiny_moe_f32"),
                         [](const auto& info) { return info.param; });

TEST(HybridSpeculativeConfig, TooManyDraftsForTheRecurrentFormAreRefused) {
  EngineConfig config;
  config.model_dir = (kFixtures / "qwen3_5_text_tiny_f32").string();
  config.device = "cpu";
  config.kv_cache_memory_bytes = 64 << 20;
  Expected<SpeculativeConfig> parsed =
      parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 15})");
  ASSERT_TRUE(parsed.has_value());
  config.speculative = *parsed;
  auto refused = LLM::load(config);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("at most 14"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace pagellm
