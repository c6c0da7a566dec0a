// Hybrid Gated DeltaNet models (Qwen3.5 text, Qwen3-Next MoE) on the CUDA backend against the
// transformers fixtures of test_hybrid_golden.cpp (tests/golden/hybrid), with the CPU test's bars:
// f32 exact greedy tokens (the first token only where the oracle disagrees with itself) and
// next-token logits within 1e-4 relative, through the contiguous path and the paged engine (alone,
// and all together in 8-token steps so chunked prefills mix with decodes and graph-bucket padding
// rows); prefill in one piece == prefill in chunks of 1, 7 and 64 tokens. Skips without a GPU.
//
// Qwen3-Next's MoE routes on the host (MoeFfn::forward synchronises and copies the router logits),
// which a CUDA graph cannot capture: its engine runs here with PAGELLM_CUDA_GRAPHS=0.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "engine/llm.h"
#include "model/model.h"
#include "runner/sequence_generator.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(PAGELLM_SOURCE_DIR) / "tests/golden/hybrid";

struct Case {
  std::vector<TokenId> prompt, greedy;
  std::vector<float> margins, logits;
  // As test_hybrid_golden.cpp: where transformers' generate() disagrees with its own full forward,
  // only the first token is checked.
  bool oracle_consistent() const {
    std::vector<float> sorted = logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    return std::fabs((sorted[0] - sorted[1]) - margins[0]) < 1e-3;
  }
  std::vector<TokenId> checked(const std::vector<TokenId>& tokens) const {
    return oracle_consistent() ? tokens : std::vector<TokenId>(tokens.begin(), tokens.begin() + 1);
  }
};

std::vector<Case> read_cases(const fs::path& dir) {
  std::ifstream in(dir / "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& c : expected["cases"])
    cases.push_back({c["prompt_ids"], c["greedy_token_ids"], c["top1_margins"], c["prompt_next_token_logits"]});
  return cases;
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  if (!fs::exists(kFixtures)) return names;
  for (const auto& entry : fs::directory_iterator(kFixtures))
    if (fs::exists(entry.path() / "expected.json")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool have_gpu(std::string* why) {
  const std::vector<std::string> names = available_backends();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) {
    *why = "built without the CUDA backend";
    return false;
  }
  auto backend = make_backend("cuda");
  if (!backend.has_value()) *why = backend.status().message();
  return backend.has_value();
}

#define GPU_OR_SKIP()                                                   \
  do {                                                                  \
    std::string why;                                                    \
    if (!have_gpu(&why)) GTEST_SKIP() << "no GPU to test on: " << why;  \
  } while (0)

bool is_moe(const std::string& fixture) { return fixture.find("moe") != std::string::npos; }

std::unique_ptr<LLM> make_cuda_llm(const std::string& fixture, EngineConfig config) {
  config.model_dir = (kFixtures / fixture).string();
  config.device = "cuda";
  if (config.kv_cache_memory_bytes == 0) config.kv_cache_memory_bytes = 64 << 20;
  if (is_moe(fixture)) setenv("PAGELLM_CUDA_GRAPHS", "0", 1);
  auto llm = LLM::load(config);
  unsetenv("PAGELLM_CUDA_GRAPHS");
  EXPECT_TRUE(llm.has_value()) << llm.status().message();
  return llm.has_value() ? std::move(llm).value() : nullptr;
}

GenerateRequest greedy_request(std::vector<TokenId> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  return r;
}

class HybridGoldenCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridGoldenCuda, ContiguousPathMatchesTransformers) {
  GPU_OR_SKIP();
  const fs::path dir = kFixtures / GetParam();
  auto backend = make_backend("cuda");
  ASSERT_TRUE(backend.has_value());
  auto model = load_model(dir.string(), **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  for (const Case& c : read_cases(dir)) {
    SCOPED_TRACE("prompt of " + std::to_string(c.prompt.size()) + " tokens");
    SequenceOptions options;
    options.sampling.temperature = 0.0f;
    options.sampling.max_tokens = static_cast<int>(c.greedy.size());
    auto got = generate_sequence(**model, **backend, c.prompt, options);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    ASSERT_EQ(got->prompt_logits.size(), c.logits.size());
    double max_abs_logit = 0.0, max_err = 0.0;
    for (size_t i = 0; i < c.logits.size(); ++i) {
      max_abs_logit = std::max(max_abs_logit, std::fabs(static_cast<double>(c.logits[i])));
      max_err = std::max(max_err, std::fabs(static_cast<double>(got->prompt_logits[i]) - c.logits[i]));
    }
    EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_abs_logit)) << "max |logit| " << max_abs_logit;
    EXPECT_EQ(c.checked(got->token_ids), c.checked(c.greedy));
    std::fprintf(stderr, "  %s (cuda) prompt %zu: max |logit err| %.3g of max |logit| %.3g\n", GetParam().c_str(),
                 c.prompt.size(), max_err, max_abs_logit);
  }
}

TEST_P(HybridGoldenCuda, PagedEngineOneAtATimeAndAllTogetherWithTinyChunks) {
  GPU_OR_SKIP();
  const std::vector<Case> cases = read_cases(kFixtures / GetParam());
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
      for (const Case& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
    auto outs = llm->generate(std::move(requests));
    for (size_t i = 0; i < outs.size(); ++i) {
      const Case& c = cases[i % cases.size()];
      ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
      EXPECT_EQ(c.checked(outs[i].token_ids), c.checked(c.greedy)) << "request " << i;
    }
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  }
}

TEST_P(HybridGoldenCuda, PrefillInOnePieceEqualsPrefillInChunks) {
  GPU_OR_SKIP();
  std::mt19937 rng(5);
  std::vector<std::vector<TokenId>> prompts;
  for (int length : {150, 65, 9, 64}) {
    std::vector<TokenId> prompt(static_cast<size_t>(length));
    for (TokenId& t : prompt) t = static_cast<TokenId>(rng() % 512);
    prompts.push_back(prompt);
  }
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

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridGoldenCuda, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HybridGoldenCuda);

}  // namespace
}  // namespace pagellm
