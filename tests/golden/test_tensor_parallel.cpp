// Tensor parallelism on the CPU twin (ranks as threads, model/tensor_parallel_model.h), and on CUDA
// with the ranks sharing one GPU: the dense, Qwen3-MoE, gpt-oss (dense and MXFP4 experts, TP 2) and
// hybrid (Qwen3.5, Qwen3-Next: Gated DeltaNet heads split, key heads replicated over 4 ranks)
// transformers fixtures split over 2 and 4 ranks (heads, MLP and expert columns, vocabulary; 4 ranks over 2
// or 1 KV heads replicate them) give transformers' greedy tokens through the paged engine, alone and
// batched with chunked prefill, prefix-cache hits and tiny blocks, with top-5 logprobs equal to the
// unsplit engine's within 1e-4 (CPU; 1e-3 on CUDA), and leave no request or block behind. Models a split does not fit
// are refused with a one-line reason.
#include <random>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "golden_util.h"
#include "io/hf_config.h"

namespace pagellm {
namespace {

struct TpCase {
  std::string fixture;  // under tests/golden
  int tensor_parallel_size = 2;
  std::string device = "cpu";
  bool own_gpus = false;  // CUDA: one GPU per rank (peer-memory collectives, decode graphs), else all on one
};

std::vector<TpCase> tp_cases(const std::string& device = "cpu", bool own_gpus = false) {
  std::vector<TpCase> cases;
  for (const char* root : {"families", "qwen3", "hybrid"}) {
    for (const std::string& name : golden_fixture_names(golden_fixture_root(root))) {
      if (!name.ends_with("_f32")) continue;
      const fs::path dir = golden_fixture_root(root) / name;
      auto config = load_model_config((dir / "config.json").string());
      if (!config.has_value()) continue;
      // gpt-oss's experts (width 96) split in whole MXFP4 groups of 32: over 2 ranks, not 4.
      const bool gpt_oss = config->architecture == "GptOssForCausalLM";
      for (int size : {2, 4})
        if (config->num_attention_heads % size == 0 && !(gpt_oss && size == 4))
          cases.push_back({std::string(root) + "/" + name, size, device, own_gpus});
    }
  }
  return cases;
}

void PrintTo(const TpCase& c, std::ostream* os) {
  *os << c.device << (c.own_gpus ? " (a GPU per rank)" : "") << "/" << c.fixture << " tp " << c.tensor_parallel_size;
}

// Why a group of `size` ranks on GPUs of their own cannot be made here (fewer GPUs), if it cannot.
std::optional<std::string> gpus_unavailable(int size) {
  auto rank0 = make_backend("cuda");
  if (!rank0.has_value()) return rank0.status().message();
  auto others = make_tensor_parallel_group(**rank0, size, /*share_device=*/false);
  if (!others.has_value()) return others.status().message();
  return std::nullopt;
}

class TensorParallelGolden : public ::testing::TestWithParam<TpCase> {};

std::vector<CompletedRequest> run_greedy(const fs::path& dir, EngineConfig config, const std::vector<GoldenCase>& cases,
                                         const std::string& device, int rounds = 1) {
  auto llm = make_test_llm(dir, config, device);
  EXPECT_TRUE(llm);
  if (!llm) return {};
  std::vector<CompletedRequest> outs;
  for (int round = 0; round < rounds; ++round) {
    std::vector<GenerateRequest> requests;
    for (const GoldenCase& c : cases) {
      requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
      requests.back().sampling.num_logprobs = 5;
    }
    outs = llm->generate(std::move(requests));
  }
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  return outs;
}

TEST_P(TensorParallelGolden, MatchesTransformersAndTheUnsplitEngine) {
  const std::string& device = GetParam().device;
  SKIP_UNLESS_BACKEND(device);
  if (GetParam().own_gpus)
    if (const std::optional<std::string> why = gpus_unavailable(GetParam().tensor_parallel_size))
      GTEST_SKIP() << "can't put " << GetParam().tensor_parallel_size << " ranks on GPUs of their own: " << *why;
  // The CPU twin sums in rank order, as does the one-GPU group; the split changes f32 rounding only.
  const double tolerance = device == "cpu" ? 1e-4 : 1e-3;
  const fs::path dir = golden_fixture_root("") / GetParam().fixture;
  const std::vector<GoldenCase> cases = read_golden_cases(dir);
  ASSERT_FALSE(cases.empty());
  EngineConfig alone;
  alone.max_num_seqs = 1;
  alone.enable_prefix_caching = false;
  const std::vector<CompletedRequest> unsplit = run_greedy(dir, alone, cases, device);
  EngineConfig batched;  // all at once, chunks of 5 tokens, blocks of 4, the second round from the cache
  batched.max_num_batched_tokens = 5;
  batched.block_size = 4;
  for (EngineConfig config : {alone, batched}) {
    SCOPED_TRACE(config.max_num_seqs == 1 ? "alone" : "batched, chunked, cached");
    config.tensor_parallel_size = GetParam().tensor_parallel_size;
    config.tensor_parallel_share_device = device == "cuda" && !GetParam().own_gpus;
    const std::vector<CompletedRequest> split =
        run_greedy(dir, config, cases, device, config.max_num_seqs == 1 ? 1 : 2);
    ASSERT_EQ(split.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      ASSERT_TRUE(split[i].error.is_ok()) << split[i].error.message();
      EXPECT_EQ(cases[i].checked(split[i].token_ids), cases[i].checked(cases[i].greedy)) << "prompt " << i;
      ASSERT_EQ(split[i].logprobs.size(), unsplit[i].logprobs.size());
      for (size_t step = 0; step < split[i].logprobs.size(); ++step)
        for (size_t k = 0; k < 5; ++k) {
          const TokenLogprob& a = split[i].logprobs[step].top.at(k);
          const TokenLogprob& b = unsplit[i].logprobs[step].top.at(k);
          EXPECT_EQ(a.token_id, b.token_id) << "prompt " << i << " step " << step << " rank " << k;
          EXPECT_NEAR(a.logprob, b.logprob, tolerance) << "prompt " << i << " step " << step << " rank " << k;
        }
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<TpCase>& info) {
  std::string name = info.param.fixture + "_tp" + std::to_string(info.param.tensor_parallel_size);
  if (info.param.own_gpus) name += "_gpus";
  for (char& c : name)
    if (c == '/') c = '_';
  return name;
}
INSTANTIATE_TEST_SUITE_P(Cpu, TensorParallelGolden, ::testing::ValuesIn(tp_cases("cpu")), case_name);
// CUDA ranks sharing the one GPU of the test machine (the multi-rank path: a backend and stream per
// rank, sharded weights, per-rank caches, the same-device all-reduce); NCCL over GPUs needs more cards.
INSTANTIATE_TEST_SUITE_P(Cuda, TensorParallelGolden, ::testing::ValuesIn(tp_cases("cuda")), case_name);
// A GPU per rank (skipped where there are fewer GPUs than ranks): peer-memory collectives, ranks that
// pipeline without host waits, decode steps replayed from graphs that hold every rank's part.
INSTANTIATE_TEST_SUITE_P(CudaGpus, TensorParallelGolden, ::testing::ValuesIn(tp_cases("cuda", true)), case_name);

TEST(TensorParallelGolden, CoversDenseMoeGptOssAndHybridFixtures) {
  // Fails (rather than skips) when the fixtures are missing: CI must run them.
  bool one_kv_head_over_four = false, two_kv_heads_over_two = false, moe = false, qwen35 = false, qwen3_next = false;
  int gpt_oss = 0;  // dense and MXFP4 experts
  for (const TpCase& c : tp_cases()) {
    auto config = load_model_config((golden_fixture_root("") / c.fixture / "config.json").string());
    ASSERT_TRUE(config.has_value());
    one_kv_head_over_four |= config->num_key_value_heads == 1 && c.tensor_parallel_size == 4;
    two_kv_heads_over_two |= config->num_key_value_heads == 2 && c.tensor_parallel_size == 2;
    moe |= config->architecture == "Qwen3MoeForCausalLM";
    gpt_oss += config->architecture == "GptOssForCausalLM" ? 1 : 0;
    // Hybrid fixtures: 2 key and 4 value GDN heads, so TP 4 replicates the key heads.
    qwen35 |= config->architecture == "Qwen3_5ForCausalLM" && c.tensor_parallel_size == 4;
    qwen3_next |= config->architecture == "Qwen3NextForCausalLM" && c.tensor_parallel_size == 4;
  }
  EXPECT_TRUE(moe);
  EXPECT_EQ(gpt_oss, 2);
  EXPECT_TRUE(qwen35);
  EXPECT_TRUE(qwen3_next);
  EXPECT_TRUE(one_kv_head_over_four);
  EXPECT_TRUE(two_kv_heads_over_two);
}

std::string load_error(const fs::path& dir, int tensor_parallel_size) {
  EngineConfig config;
  config.model_dir = dir.string();
  config.device = "cpu";
  config.tensor_parallel_size = tensor_parallel_size;
  auto llm = LLM::load(config);
  return llm.has_value() ? "" : std::string(llm.status().message());
}

TEST(TensorParallelGolden, RefusesSplitsTheModelDoesNotFit) {
  EXPECT_NE(load_error(golden_fixture_root("families") / "llama3_untied_f32", 3).find(
                "--tensor-parallel-size 3 does not divide num_attention_heads 4"),
            std::string::npos);
  EXPECT_NE(load_error(golden_fixture_root("families") / "gpt_oss_mxfp4_f32", 4).find(
                "gpt-oss experts of width 96 split in whole groups of 32"),
            std::string::npos);
  EXPECT_NE(load_error(golden_fixture_root("families") / "llama3_untied_f32", 0).find("must be in [1, 16]"),
            std::string::npos);
}

// Hybrid prefix caching under a split: each rank keeps its heads' GDN state and checkpoints, restored
// on a hit alongside rank 0's. Repeated and partially shared prompts (one at a time, so later ones hit
// checkpoints every 64 tokens) give the tokens of an unsplit run with caching off.
TEST(TensorParallelGolden, HybridPrefixCacheHitsGiveTheTokensOfAnUncachedUnsplitRun) {
  std::mt19937 rng(21);
  auto random_tokens = [&](int n) {
    std::vector<TokenId> tokens(static_cast<size_t>(n));
    for (TokenId& t : tokens) t = static_cast<TokenId>(rng() % 512);
    return tokens;
  };
  const std::vector<TokenId> base = random_tokens(200);
  std::vector<TokenId> shared(base.begin(), base.begin() + 100);
  const std::vector<TokenId> tail = random_tokens(80);
  shared.insert(shared.end(), tail.begin(), tail.end());
  const std::vector<std::vector<TokenId>> prompts = {base, base, shared};
  const std::vector<int> want_cached = {0, 128, 64};
  for (const char* fixture : {"qwen3_5_text_tiny_f32", "qwen3_next_tiny_moe_f32"}) {
    SCOPED_TRACE(fixture);
    const fs::path dir = golden_fixture_root("hybrid") / fixture;
    auto run = [&](EngineConfig config) {
      auto llm = make_test_llm(dir, config, "cpu");
      std::vector<CompletedRequest> outs;
      if (!llm) return outs;
      for (const auto& prompt : prompts) {
        GenerateRequest request = greedy_request(prompt, 12);
        request.sampling.num_logprobs = 2;
        outs.push_back(llm->generate({request}).at(0));
      }
      EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
      return outs;
    };
    EngineConfig unsplit;
    unsplit.enable_prefix_caching = false;
    EngineConfig split;  // prefix caching on, the default
    split.tensor_parallel_size = 2;
    const std::vector<CompletedRequest> want = run(unsplit), got = run(split);
    ASSERT_EQ(want.size(), prompts.size());
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(got[i].error.is_ok()) << got[i].error.message();
      EXPECT_EQ(got[i].num_cached_tokens, want_cached[i]) << "prompt " << i;
      EXPECT_EQ(got[i].token_ids, want[i].token_ids) << "prompt " << i;
      ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
      for (size_t step = 0; step < got[i].logprobs.size(); ++step)
        EXPECT_NEAR(got[i].logprobs[step].sampled_logprob, want[i].logprobs[step].sampled_logprob, 1e-4)
            << "prompt " << i << " step " << step;
    }
  }
}

}  // namespace
}  // namespace pagellm
