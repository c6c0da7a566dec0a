// The paged engine on the CUDA backend (ModelRunner's GPU path: one staged input copy, device argmax,
// decode graphs) against the transformers fixtures (f32: identical greedy tokens), with graphs on and
// off, alone and batched, and with host-sampled rows (seeded sampling, logprobs) mixed into batches
// of greedy rows. Skips where there is no GPU or no CUDA build.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "engine/llm.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(PAGELLM_SOURCE_DIR) / "tests/golden/qwen3";

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

struct Fixture {
  std::vector<std::vector<TokenId>> prompts;
  std::vector<std::vector<TokenId>> greedy;
};

Fixture read_fixture(const fs::path& dir) {
  std::ifstream in(dir / "expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  Fixture f;
  for (const auto& c : expected["cases"]) {
    f.prompts.push_back(c["prompt_ids"].get<std::vector<TokenId>>());
    f.greedy.push_back(c["greedy_token_ids"].get<std::vector<TokenId>>());
  }
  return f;
}

// graphs: PAGELLM_CUDA_GRAPHS is read when the engine's runner is made.
std::unique_ptr<LLM> make_cuda_llm(const fs::path& model_dir, EngineConfig config, bool graphs) {
  config.model_dir = model_dir.string();
  config.device = "cuda";
  config.kv_cache_memory_bytes = 64 << 20;
  if (!graphs) setenv("PAGELLM_CUDA_GRAPHS", "0", 1);
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

TEST(EngineCuda, GoldenGreedyAloneAndBatchedWithAndWithoutGraphs) {
  GPU_OR_SKIP();
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    if (entry.path().filename().string().find("f32") == std::string::npos) continue;
    const Fixture fixture = read_fixture(entry.path());
    for (bool graphs : {true, false}) {
      SCOPED_TRACE(entry.path().filename().string() + (graphs ? " graphs" : " no graphs"));
      {
        EngineConfig config;
        config.max_num_seqs = 1;
        config.enable_prefix_caching = false;
        auto llm = make_cuda_llm(entry.path(), config, graphs);
        ASSERT_TRUE(llm);
        for (size_t i = 0; i < fixture.prompts.size(); ++i) {
          auto out = llm->generate({greedy_request(fixture.prompts[i], static_cast<int>(fixture.greedy[i].size()))});
          ASSERT_TRUE(out[0].error.is_ok()) << out[0].error.message();
          EXPECT_EQ(out[0].token_ids, fixture.greedy[i]) << "prompt " << i;
        }
        EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
      }
      {
        // All prompts at once, three times over (batches of 3x the cases pad up to graph buckets),
        // prefill in chunks of at most 8 tokens so decode and prefill rows mix.
        EngineConfig config;
        config.max_num_batched_tokens = 8;
        auto llm = make_cuda_llm(entry.path(), config, graphs);
        ASSERT_TRUE(llm);
        std::vector<GenerateRequest> requests;
        for (int copy = 0; copy < 3; ++copy)
          for (size_t i = 0; i < fixture.prompts.size(); ++i)
            requests.push_back(greedy_request(fixture.prompts[i], static_cast<int>(fixture.greedy[i].size())));
        auto outs = llm->generate(std::move(requests));
        for (size_t i = 0; i < outs.size(); ++i)
          EXPECT_EQ(outs[i].token_ids, fixture.greedy[i % fixture.prompts.size()]) << "request " << i;
        EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
      }
    }
  }
}

// Host-sampled rows (seeded temperature sampling, greedy with logprobs) inside batches of device-
// sampled greedy rows: each request gives what it gives alone.
TEST(EngineCuda, HostSampledRowsMixWithDeviceGreedyRows) {
  GPU_OR_SKIP();
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
  const std::vector<TokenId> prompt = {5, 6, 7, 8, 9};
  auto alone = llm->generate({seeded(prompt)});
  auto alone_logprobs = llm->generate({with_logprobs});
  std::vector<GenerateRequest> crowd;
  for (int i = 0; i < 8; ++i) crowd.push_back(greedy_request({static_cast<TokenId>(10 + i), 11, 12}, 16));
  crowd.insert(crowd.begin() + 3, seeded(prompt));
  crowd.insert(crowd.begin() + 6, with_logprobs);
  auto together = llm->generate(std::move(crowd));
  EXPECT_EQ(alone[0].token_ids, together[3].token_ids);
  EXPECT_EQ(alone_logprobs[0].token_ids, together[6].token_ids);
  ASSERT_EQ(together[6].logprobs.size(), together[6].token_ids.size());
  for (const auto& lp : together[6].logprobs) EXPECT_EQ(lp.top.size(), 3u);
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
}

}  // namespace
}  // namespace pagellm
