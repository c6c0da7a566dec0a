// The dense families beyond Qwen3 (Llama 3, Mistral, Qwen2, Gemma 2, Gemma 3) against transformers
// fixtures (tools/hf_golden_families.py, tests/golden/families/README.md), through the contiguous
// path on every backend of this build and through the paged engine on the CPU: alone, all at once
// with tiny chunks and blocks (prefill chunks and block edges fall inside and across the 8-token
// windows), with prefix-cache hits, and under block exhaustion (preemption by recompute).
#include <set>

#include <gtest/gtest.h>

#include "golden_util.h"
#include "io/hf_config.h"
#include "model/model.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("families");

class FamilyGolden : public ::testing::TestWithParam<BackendFixture> {};

TEST_P(FamilyGolden, MatchesTransformers) {
  SKIP_UNLESS_BACKEND(GetParam().device);
  expect_matches_transformers(GetParam().device, kFixtures / GetParam().fixture);
}

INSTANTIATE_TEST_SUITE_P(Cpu, FamilyGolden, ::testing::ValuesIn(backend_fixtures("cpu", kFixtures)),
                         [](const auto& info) { return info.param.fixture; });
INSTANTIATE_TEST_SUITE_P(Cuda, FamilyGolden, ::testing::ValuesIn(backend_fixtures("cuda", kFixtures)),
                         [](const auto& info) { return info.param.fixture; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FamilyGolden);

TEST(FamilyGolden, EveryFamilyHasAFixture) {
  // Fails (rather than skips) when the fixtures are missing: CI must run them.
  std::set<std::string> architectures;
  for (const std::string& name : golden_fixture_names(kFixtures)) {
    auto config = load_model_config((kFixtures / name / "config.json").string());
    ASSERT_TRUE(config.has_value()) << config.status().message();
    architectures.insert(config->architecture);
  }
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Gemma2ForCausalLM",
                           "Gemma3ForCausalLM"})
    EXPECT_TRUE(architectures.contains(arch)) << arch;
}

std::vector<std::string> f32_fixtures() {
  std::vector<std::string> names;
  for (const std::string& name : golden_fixture_names(kFixtures))
    if (name.ends_with("_f32")) names.push_back(name);
  return names;
}

class FamilyEngine : public ::testing::TestWithParam<std::string> {};

void expect_engine_matches(const fs::path& dir, EngineConfig config, const std::vector<GoldenCase>& cases,
                           int repeats = 1) {
  auto llm = make_test_llm(dir, config);
  ASSERT_TRUE(llm);
  for (int round = 0; round < repeats; ++round) {
    std::vector<GenerateRequest> requests;
    for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
    auto outs = llm->generate(std::move(requests));
    for (size_t i = 0; i < outs.size(); ++i) {
      ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
      EXPECT_EQ(outs[i].token_ids, cases[i].greedy) << "round " << round << " prompt " << i;
    }
  }
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
}

TEST_P(FamilyEngine, AloneBatchedChunkedCachedAndPreempted) {
  const fs::path dir = kFixtures / GetParam();
  const std::vector<GoldenCase> cases = read_golden_cases(dir);
  {
    SCOPED_TRACE("one at a time");
    EngineConfig config;
    config.max_num_seqs = 1;
    config.enable_prefix_caching = false;
    expect_engine_matches(dir, config, cases);
  }
  {
    SCOPED_TRACE("all at once, chunks of 5 tokens, blocks of 4");
    EngineConfig config;
    config.max_num_batched_tokens = 5;
    config.block_size = 4;
    expect_engine_matches(dir, config, cases);
  }
  {
    SCOPED_TRACE("twice: the second round hits the prefix cache");
    EngineConfig config;
    config.block_size = 4;
    config.enable_prefix_caching = true;
    expect_engine_matches(dir, config, cases, 2);
  }
  {
    SCOPED_TRACE("a KV budget of 40 blocks of 4 tokens: requests preempt each other");
    auto model_config = load_model_config((dir / "config.json").string());
    ASSERT_TRUE(model_config.has_value());
    EngineConfig config;
    config.block_size = 4;
    config.max_num_batched_tokens = 16;
    const int64_t bytes_per_block = 2 * model_config->num_hidden_layers * 4 * model_config->num_key_value_heads *
                                    model_config->head_dim * 4;
    config.kv_cache_memory_bytes = 40 * bytes_per_block;
    expect_engine_matches(dir, config, cases);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, FamilyEngine, ::testing::ValuesIn(f32_fixtures()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FamilyEngine);

}  // namespace
}  // namespace pagellm
