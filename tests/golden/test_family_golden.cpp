// The dense families beyond Qwen3 (Llama 3, Mistral, Qwen2, Gemma 2, Gemma 3) against transformers
// fixtures (tools/hf_golden_families.py, tests/golden/families/README.md), through the contiguous
// path on every backend of this build and through the paged engine on the CPU: alone, all at once
// with tiny chunks and blocks (prefill chunks and block edges fall inside and across the 8-token
// windows), with prefix-cache hits, and under block exhaustion (preemption by recompute). The
// sliding-window families run on KV cache groups (cache/kv_cache_groups.h): their sliding layers
// release the blocks that left the window while a request runs, and the tokens stay exact.
#include <algorithm>
#include <iostream>
#include <fstream>
#include <set>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cache/kv_cache_budget.h"
#include "cache/kv_cache_groups.h"
#include "golden_util.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/make_model.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"

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
                           "Gemma3ForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM"})
    EXPECT_TRUE(architectures.contains(arch)) << arch;
}

std::vector<std::string> f32_fixtures() {
  std::vector<std::string> names;
  for (const std::string& name : golden_fixture_names(kFixtures))
    if (name.ends_with("_f32")) names.push_back(name);
  return names;
}

class FamilyEngine : public ::testing::TestWithParam<std::string> {};

std::vector<int32_t> layer_windows(const ModelConfig& config);

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
    SCOPED_TRACE("a KV budget that fits the longest request alone: requests preempt each other");
    auto model_config = load_model_config((dir / "config.json").string());
    ASSERT_TRUE(model_config.has_value());
    const std::vector<int32_t> windows = layer_windows(*model_config);
    const KvCacheGroups groups = make_kv_cache_groups(windows);
    EngineConfig config;
    config.block_size = 4;
    config.max_num_batched_tokens = 16;
    // A block id holds layers_per_group layers (one table for all layers: every layer).
    const int64_t bytes_per_block =
        2 * groups.layers_per_group * 4 * model_config->num_key_value_heads * model_config->head_dim * 4;
    size_t longest = 0;
    for (const GoldenCase& c : cases) longest = std::max(longest, c.prompt.size() + c.greedy.size());
    const int64_t num_blocks = max_blocks_per_request(groups.windows, static_cast<int64_t>(longest), 4, 16);
    config.kv_cache_memory_bytes = num_blocks * bytes_per_block;
    auto llm = make_test_llm(dir, config);
    ASSERT_TRUE(llm);
    std::vector<GenerateRequest> requests;
    for (const GoldenCase& c : cases) requests.push_back(greedy_request(c.prompt, static_cast<int>(c.greedy.size())));
    auto outs = llm->generate(std::move(requests));
    for (size_t i = 0; i < outs.size(); ++i) {
      ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
      EXPECT_EQ(outs[i].token_ids, cases[i].greedy) << "prompt " << i;
    }
    // With a full-attention group the requests outgrow the cache together; a model of sliding layers
    // only (Mistral) holds a few blocks per request, and its requests just wait for one another.
    if (std::count(windows.begin(), windows.end(), kFullAttention) > 0) {
      EXPECT_GT(llm->engine().metrics().preemptions, 0u) << num_blocks << " blocks";
    }
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  }
}

// The window of each layer as the decoder gives it to the KV cache: -1 = full attention.
std::vector<int32_t> layer_windows(const ModelConfig& config) {
  std::vector<int32_t> windows;
  for (LayerType t : config.layer_types)
    windows.push_back(t == LayerType::kSlidingAttention && config.sliding_window && *config.sliding_window > 0
                          ? static_cast<int32_t>(*config.sliding_window)
                          : kFullAttention);
  return windows;
}

// The 64-token case through the scheduler and the runner (blocks of 4, steps of 5 tokens): its
// greedy tokens equal transformers', and the sliding groups give their blocks back while it runs, so
// the cache holds well under what one table for every layer would.
void expect_sliding_release_exact(const std::string& device, const std::string& fixture) {
  const fs::path dir = kFixtures / fixture;
  auto model_config = load_model_config((dir / "config.json").string());
  ASSERT_TRUE(model_config.has_value());
  const std::vector<int32_t> windows = layer_windows(*model_config);
  if (std::count(windows.begin(), windows.end(), kFullAttention) == static_cast<long>(windows.size()))
    GTEST_SKIP() << "no sliding layer";
  const std::vector<GoldenCase> cases = read_golden_cases(dir);
  const GoldenCase& c = cases.back();
  ASSERT_EQ(c.prompt.size(), 64u);
  auto backend = make_backend(device);
  ASSERT_TRUE(backend.has_value());
  auto model = load_model(dir.string(), **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  const MemorySpec spec = (*model)->memory_spec();
  EXPECT_EQ(spec.attention_windows, windows);
  const KvCacheGroups groups = kv_cache_groups_of(spec);

  for (bool prefix_caching : {false, true}) {
    SCOPED_TRACE(prefix_caching ? "prefix caching" : "no prefix caching");
    SchedulerConfig sched;
    sched.block_size = 4;
    sched.max_num_batched_tokens = 5;
    sched.num_blocks = 256;
    sched.max_model_len = 256;
    sched.enable_prefix_caching = prefix_caching;
    sched.kv_group_windows = groups.windows;
    Scheduler scheduler(sched);
    ModelRunner runner(**model, **backend, sched.num_blocks, sched.block_size);
    ASSERT_TRUE(scheduler.add(Request(1, c.prompt, greedy_request(c.prompt, static_cast<int>(c.greedy.size())).sampling))
                    .is_ok());
    std::vector<TokenId> output;
    int peak_blocks = 0;
    while (scheduler.has_unfinished_requests()) {
      const StepPlan plan = scheduler.schedule();
      peak_blocks = std::max(peak_blocks, scheduler.kv_cache().num_used_blocks());
      for (const RequestUpdate& u : scheduler.commit(plan, runner.execute(plan)))
        if (u.new_token_id) output.push_back(*u.new_token_id);
    }
    EXPECT_EQ(output, c.greedy);
    EXPECT_TRUE(scheduler.is_leak_free());
    // One table for every layer: ceil(83 / 4) = 21 blocks x num_layers layers. Grouped: the full
    // groups' 21 blocks each, the sliding groups' window (<= ceil((7 + 5) / 4) + 1 = 4 blocks each).
    const int64_t all_global_layer_blocks = 21 * static_cast<int64_t>(windows.size());
    const int64_t peak_layer_blocks = int64_t{peak_blocks} * groups.layers_per_group;
    int64_t bound = 0;
    for (int32_t w : groups.windows) bound += w == kFullAttention ? 21 : 4;
    EXPECT_LE(peak_blocks, bound);
    EXPECT_LT(peak_layer_blocks * 4, all_global_layer_blocks * 3)
        << peak_blocks << " blocks of " << groups.layers_per_group << " layers";
    std::cout << "[" << fixture << ", " << device << (prefix_caching ? ", prefix caching" : "") << "] peak " << peak_blocks << " blocks x " << groups.layers_per_group
              << " layers = " << peak_layer_blocks << " layer-blocks vs " << all_global_layer_blocks
              << " with one table for all layers\n";
  }
}

TEST_P(FamilyEngine, SlidingLayersReleaseTheirBlocksAndStayExact) { expect_sliding_release_exact("cpu", GetParam()); }

// The same on a GPU: the attention kernels (decode graphs included) never read a released entry.
TEST_P(FamilyEngine, SlidingLayersReleaseTheirBlocksAndStayExactOnCuda) {
  SKIP_UNLESS_BACKEND("cuda");
  expect_sliding_release_exact("cuda", GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cpu, FamilyEngine, ::testing::ValuesIn(f32_fixtures()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FamilyEngine);

}  // namespace
}  // namespace pagellm

namespace pagellm {
namespace {

// make-model's Qwen3-MoE presets write what the loader reads (per-expert names, the MoE config keys),
// and a generated checkpoint serves batched requests through the paged engine.
TEST(FamilyGolden, MakeModelQwen3MoeServesThroughTheEngine) {
  const fs::path dir = fs::temp_directory_path() / ("pagellm_qwen3_moe_micro_" + std::to_string(::getpid()));
  MakeModelOptions options;
  options.preset = "qwen3-moe-micro";
  options.out_dir = dir.string();
  options.dtype = DType::kF32;
  options.weight_std = 0.2;
  ASSERT_TRUE(make_model(options).is_ok());
  auto config = load_model_config((dir / "config.json").string());
  ASSERT_TRUE(config.has_value()) << config.status().message();
  EXPECT_EQ(config->architecture, "Qwen3MoeForCausalLM");
  EXPECT_EQ(config->num_experts, 8);
  EXPECT_EQ(config->num_experts_per_tok, 2);
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  auto model = load_model(dir.string(), **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  EXPECT_TRUE((*model)->is_graph_capturable());  // routed on the device: decode graphs as for dense models
  // The same prompt alone and in a chunked batch of three gives the same greedy tokens.
  const std::vector<TokenId> prompt = {5, 77, 301, 9, 140, 88, 23};
  auto alone = generate_sequence(**model, **backend, prompt, greedy_options(12));
  ASSERT_TRUE(alone.has_value()) << alone.status().message();
  EngineConfig engine;
  engine.max_num_batched_tokens = 5;
  engine.block_size = 4;
  auto llm = make_test_llm(dir, engine);
  ASSERT_TRUE(llm);
  std::vector<GenerateRequest> requests = {greedy_request({400, 2, 3}, 12), greedy_request(prompt, 12),
                                           greedy_request({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12)};
  auto outs = llm->generate(std::move(requests));
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[1].token_ids, alone->token_ids);
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagellm

namespace pagellm {
namespace {

// MoE routing ties and experts that get no token: with an all-zero router every expert ties, so each
// token takes experts 0 and 1 (ties go to the lower index) with weight 1/2 each and experts 2..7 see
// no token. Experts 0 and 1 hold the same weights E (the others their own), so the layer computes
// 0 + E(x)/2 + E(x)/2 = E(x) exactly: the MoE checkpoint must give bit for bit the logits of a dense
// Qwen3 whose MLPs are E.
TEST(FamilyGolden, MoeRoutingTiesGoToTheLowerExpertsAndIdleExpertsAreSkipped) {
  const fs::path root = fs::temp_directory_path() / ("pagellm_moe_ties_" + std::to_string(::getpid()));
  MakeModelOptions options;
  options.preset = "qwen3-moe-micro";
  options.out_dir = (root / "made").string();
  options.dtype = DType::kF32;
  options.weight_std = 0.2;
  ASSERT_TRUE(make_model(options).is_ok());
  auto made = Checkpoint::open_dir((root / "made").string());
  ASSERT_TRUE(made.has_value()) << made.status().message();
  auto bytes_of = [&](const std::string& name) {
    const TensorInfo* info = made->find(name);
    EXPECT_NE(info, nullptr) << name;
    const auto* data = static_cast<const uint8_t*>(info->data);
    return std::vector<uint8_t>(data, data + info->nbytes);
  };
  SafetensorsWriter moe, dense;
  for (const std::string& name : made->names()) {
    const TensorInfo* info = made->find(name);
    const std::string::size_type experts = name.find("mlp.experts.");
    if (name.ends_with("mlp.gate.weight")) {
      moe.add(name, info->dtype, info->shape, std::vector<uint8_t>(info->nbytes, 0));  // every expert ties
      continue;
    }
    if (experts == std::string::npos) {
      moe.add(name, info->dtype, info->shape, bytes_of(name));
      dense.add(name, info->dtype, info->shape, bytes_of(name));
      continue;
    }
    // Expert 1 gets expert 0's weights, the others keep their own (any of them taking a token would
    // show); the dense model's MLP is expert 0.
    const std::string layer = name.substr(0, experts), projection = name.substr(name.rfind('.', name.size() - 8) + 1);
    const std::string source = layer + "mlp.experts.0." + projection;
    const bool twin = name == layer + "mlp.experts.1." + projection;
    moe.add(name, info->dtype, info->shape, bytes_of(twin ? source : name));
    if (name == source) dense.add(layer + "mlp." + projection, info->dtype, info->shape, bytes_of(source));
  }
  fs::create_directories(root / "moe");
  fs::create_directories(root / "dense");
  ASSERT_TRUE(moe.write((root / "moe" / "model.safetensors").string()).is_ok());
  ASSERT_TRUE(dense.write((root / "dense" / "model.safetensors").string()).is_ok());
  fs::copy_file(root / "made" / "config.json", root / "moe" / "config.json");
  {
    std::ifstream in(root / "made" / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["architectures"] = {"Qwen3ForCausalLM"};
    config["model_type"] = "qwen3";
    config["intermediate_size"] = config["moe_intermediate_size"];
    for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                            "mlp_only_layers", "norm_topk_prob"})
      config.erase(key);
    std::ofstream(root / "dense" / "config.json") << config.dump(2);
  }
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  auto moe_model = load_model((root / "moe").string(), **backend);
  auto dense_model = load_model((root / "dense").string(), **backend);
  ASSERT_TRUE(moe_model.has_value()) << moe_model.status().message();
  ASSERT_TRUE(dense_model.has_value()) << dense_model.status().message();
  const std::vector<TokenId> prompt = {7, 300, 42, 42, 9, 511, 0, 128};
  auto from_moe = generate_sequence(**moe_model, **backend, prompt, greedy_options(8));
  auto from_dense = generate_sequence(**dense_model, **backend, prompt, greedy_options(8));
  ASSERT_TRUE(from_moe.has_value() && from_dense.has_value());
  EXPECT_EQ(from_moe->prompt_logits, from_dense->prompt_logits);
  EXPECT_EQ(from_moe->token_ids, from_dense->token_ids);
  fs::remove_all(root);
}

}  // namespace
}  // namespace pagellm
