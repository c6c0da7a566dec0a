// Prefix caching of hybrid (Gated DeltaNet) models on the CPU, over the transformers fixtures in f32
// and bf16 activations: repeated, partially shared and extended prompts hit (GDN state checkpoints
// every 64 tokens, KV blocks of 16) and give the bits of a run with caching off, token ids and
// logprobs alike; LRU eviction under a small budget, preemption and abort leave no block or
// checkpoint behind.
#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "cache/state_cache.h"
#include "golden_util.h"
#include "model/model.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("hybrid");
constexpr int kOutputTokens = 12;

struct Case {
  std::string fixture;
  std::string dtype;  // activation dtype the f32 checkpoint runs in
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << "_" << c.dtype; }

std::vector<TokenId> random_tokens(std::mt19937& rng, int n) {
  std::vector<TokenId> tokens(static_cast<size_t>(n));
  for (TokenId& t : tokens) t = static_cast<TokenId>(rng() % 512);
  return tokens;
}

std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

GenerateRequest logprob_request(std::vector<TokenId> prompt) {
  GenerateRequest request = greedy_request(std::move(prompt), kOutputTokens);
  request.sampling.num_logprobs = 2;
  return request;
}

// What a user sees of a request, down to the bits of its logprobs.
struct Seen {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  int num_cached_tokens = 0;
};

Seen seen(const CompletedRequest& out) {
  EXPECT_TRUE(out.error.is_ok()) << out.error.message();
  Seen s{out.token_ids, {}, out.num_cached_tokens};
  for (const SampledLogprobs& lp : out.logprobs) {
    s.logprobs.push_back(lp.sampled_logprob);
    for (const TokenLogprob& top : lp.top) s.logprobs.push_back(top.logprob);
  }
  return s;
}

void expect_same_bits(const Seen& got, const Seen& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < got.logprobs.size(); ++i)
    EXPECT_EQ(got.logprobs[i], want.logprobs[i]) << what << ": logprob " << i << " differs (bitwise)";
}

class HybridPrefixCache : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<LLM> make(EngineConfig config) {
    config.dtype = GetParam().dtype;
    return make_test_llm(kFixtures / GetParam().fixture, config);
  }
  // Each prompt alone, one after the other (a later one may hit what an earlier one cached).
  std::vector<Seen> run_in_turns(EngineConfig config, const std::vector<std::vector<TokenId>>& prompts,
                                 EngineMetrics* metrics = nullptr) {
    auto llm = make(config);
    std::vector<Seen> runs;
    if (!llm) return runs;
    for (const auto& prompt : prompts) runs.push_back(seen(llm->generate({logprob_request(prompt)}).at(0)));
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    if (metrics) *metrics = llm->engine().metrics();
    return runs;
  }
};

TEST_P(HybridPrefixCache, RepeatedSharedAndExtendedPromptsHitWithTheBitsOfACacheOffRun) {
  std::mt19937 rng(21);
  const std::vector<TokenId> base = random_tokens(rng, 200);
  EngineConfig off;
  off.enable_prefix_caching = false;
  const Seen first_off = run_in_turns(off, {base}).at(0);
  // A multi-turn chat: the next turn resends the history, the answer included.
  const std::vector<TokenId> next_turn = concat(concat(base, first_off.tokens), random_tokens(rng, 40));
  const std::vector<std::vector<TokenId>> prompts = {
      base,                                                                    // cold
      base,                                                                    // repeat
      concat({base.begin(), base.begin() + 100}, random_tokens(rng, 80)),     // 100 shared tokens
      next_turn,                                                               // extends the first prompt
      concat({base.begin(), base.begin() + 70}, random_tokens(rng, 3)),       // 70 shared, 73 in all
  };
  // Hits end on a checkpoint (every 64 tokens), leave >= 16 tokens to compute, and cover prompt
  // positions only (the first answer was decoded: its KV and state are not cached).
  const std::vector<int> want_cached = {0, 128, 64, 192, 0};

  EngineConfig on;  // prefix caching is the default, hybrid models included
  EngineMetrics metrics;
  const std::vector<Seen> cached = run_in_turns(on, prompts, &metrics);
  const std::vector<Seen> cold = run_in_turns(off, prompts);
  ASSERT_EQ(cached.size(), prompts.size());
  ASSERT_EQ(cold.size(), prompts.size());
  int64_t hit_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string what = "prompt " + std::to_string(i);
    EXPECT_EQ(cached[i].num_cached_tokens, want_cached[i]) << what;
    EXPECT_EQ(cold[i].num_cached_tokens, 0) << what;
    expect_same_bits(cached[i], cold[i], what);
    hit_tokens += want_cached[i];
  }
  expect_same_bits(cold[0], first_off, "the cold run again");
  EXPECT_EQ(metrics.prefix_cache_hit_tokens, static_cast<uint64_t>(hit_tokens));
}

TEST_P(HybridPrefixCache, OneBlockOfSharedPrefixHitsWithBlocksOf64) {
  std::mt19937 rng(4);
  const std::vector<TokenId> shared = random_tokens(rng, 64);
  const std::vector<std::vector<TokenId>> prompts = {concat(shared, random_tokens(rng, 30)),
                                                     concat(shared, random_tokens(rng, 20))};
  EngineConfig on, off;
  on.block_size = off.block_size = 64;
  on.hybrid_checkpoint_interval_blocks = 1;
  off.enable_prefix_caching = false;
  const std::vector<Seen> cached = run_in_turns(on, prompts), cold = run_in_turns(off, prompts);
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_EQ(cached[1].num_cached_tokens, 64);
  for (size_t i = 0; i < 2; ++i) expect_same_bits(cached[i], cold[i], "prompt " + std::to_string(i));
}

TEST_P(HybridPrefixCache, AsyncSchedulingAndChunkedPrefillKeepTheBits) {
  std::mt19937 rng(8);
  const std::vector<TokenId> base = random_tokens(rng, 300);
  const std::vector<std::vector<TokenId>> prompts = {base, base, concat({base.begin(), base.begin() + 250}, {7, 8, 9})};
  EngineConfig on, off;
  on.async_scheduling = 1;
  on.max_num_batched_tokens = 100;  // pieces end on 64-token GDN chunks: 64, 128, ...
  off.enable_prefix_caching = false;
  const std::vector<Seen> cached = run_in_turns(on, prompts), cold = run_in_turns(off, prompts);
  ASSERT_EQ(cached.size(), prompts.size());
  EXPECT_EQ(cached[1].num_cached_tokens, 256);
  EXPECT_EQ(cached[2].num_cached_tokens, 192);
  for (size_t i = 0; i < prompts.size(); ++i) expect_same_bits(cached[i], cold[i], "prompt " + std::to_string(i));
}

// A budget of a few dozen blocks and checkpoints: distinct prompts evict the oldest prefixes
// (KV blocks and checkpoints together); a repeat of the newest still hits, one of the oldest
// misses; all of it, and a batch under preemption, with the cache-off bits and no leak.
TEST_P(HybridPrefixCache, SmallBudgetEvictsLeastRecentlyUsedAndPreemptsWithoutLeaks) {
  auto backend = make_backend("cpu");
  auto model = load_model((kFixtures / GetParam().fixture).string(), **backend);
  ASSERT_TRUE(model.has_value());
  MemorySpec spec = (*model)->memory_spec();
  if (GetParam().dtype == "bfloat16") spec.kv_dtype = spec.state_dtype = DType::kBF16;
  constexpr int kSeqs = 4;
  EngineConfig on;
  on.max_num_seqs = kSeqs;
  on.max_model_len = 320;
  on.kv_cache_memory_bytes = state_cache_bytes(spec, kSeqs) + 2 * 40 * spec.kv_bytes_per_block(16);
  EngineConfig off = on;
  off.enable_prefix_caching = false;

  std::mt19937 rng(99);
  std::vector<std::vector<TokenId>> distinct;
  for (int i = 0; i < 8; ++i) distinct.push_back(random_tokens(rng, 200));
  std::vector<std::vector<TokenId>> in_turns = distinct;
  in_turns.push_back(distinct.back());   // the newest: still cached
  in_turns.push_back(distinct.front());  // the oldest: evicted long ago
  EngineMetrics metrics;
  const std::vector<Seen> cached = run_in_turns(on, in_turns, &metrics);
  const std::vector<Seen> cold = run_in_turns(off, in_turns);
  ASSERT_EQ(cached.size(), in_turns.size());
  EXPECT_EQ(cached[8].num_cached_tokens, 128);
  EXPECT_EQ(cached[9].num_cached_tokens, 0);
  for (size_t i = 0; i < in_turns.size(); ++i) expect_same_bits(cached[i], cold[i], "prompt " + std::to_string(i));

  // All at once, twice: preemption (40 blocks for 4 requests of 13) and hits on what survived.
  auto run_batch = [&](const EngineConfig& config, EngineMetrics* batch_metrics) {
    auto llm = make(config);
    std::vector<Seen> runs;
    if (!llm) return runs;
    for (int round = 0; round < 2; ++round) {
      std::vector<GenerateRequest> requests;
      for (const auto& prompt : distinct) requests.push_back(logprob_request(prompt));
      for (const CompletedRequest& out : llm->generate(std::move(requests))) runs.push_back(seen(out));
    }
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    *batch_metrics = llm->engine().metrics();
    return runs;
  };
  EngineMetrics batch_on, batch_off;
  const std::vector<Seen> batch_cached = run_batch(on, &batch_on), batch_cold = run_batch(off, &batch_off);
  ASSERT_EQ(batch_cached.size(), batch_cold.size());
  EXPECT_GT(batch_on.preemptions, 0u);
  EXPECT_GT(batch_on.prefix_cache_hit_tokens, 0u);
  // Tokens only here: a request preempted after some decode steps recomputes its outputs in the
  // chunked GDN form, whose last bits differ from the token-by-token decode; where preemption
  // strikes differs between the two budgets (checkpoints take a share of this one), as it does
  // between any two schedules without caching.
  for (size_t i = 0; i < batch_cached.size(); ++i)
    EXPECT_EQ(batch_cached[i].tokens, batch_cold[i].tokens) << "batched request " << i;
}

TEST_P(HybridPrefixCache, AbortMidPrefillLeavesNoPendingCheckpoint) {
  std::mt19937 rng(3);
  for (int async : {0, 1}) {
    SCOPED_TRACE(async ? "async" : "sync");
    EngineConfig config;
    config.async_scheduling = async;
    config.max_num_batched_tokens = 64;  // a 640-token prompt takes ten steps, a checkpoint each
    auto llm = make(config);
    ASSERT_TRUE(llm);
    auto channel = llm->engine().submit(greedy_request(random_tokens(rng, 640), 50));
    ASSERT_TRUE(channel.has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    llm->engine().abort((*channel)->id());
    while ((*channel)->next()) {
    }
    for (int i = 0; i < 200 && !llm->engine().is_idle_and_leak_free(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  }
}

TEST(HybridPrefixCacheConfig, IntervalMustBeAMultipleOfTheGdnChunkAndTheFlagTurnsCachingOff) {
  EngineConfig config;
  config.hybrid_checkpoint_interval_blocks = 3;  // 48 tokens
  config.model_dir = (kFixtures / "qwen3_5_text_tiny_f32").string();
  config.device = "cpu";
  config.kv_cache_memory_bytes = 64 << 20;
  auto engine = Engine::load(config);
  ASSERT_FALSE(engine.has_value());
  EXPECT_NE(engine.status().message().find("--hybrid-checkpoint-interval-blocks 3"), std::string::npos)
      << engine.status().message();

  EngineConfig off;
  off.enable_prefix_caching = false;
  auto llm = make_test_llm(kFixtures / "qwen3_5_text_tiny_f32", off);
  ASSERT_TRUE(llm);
  EXPECT_EQ(llm->engine().config().num_state_checkpoints, 0);
  const std::vector<TokenId> prompt(150, 5);
  auto outs = llm->generate({greedy_request(prompt, 2), greedy_request(prompt, 2)});
  EXPECT_EQ(outs.at(1).num_cached_tokens, 0);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const std::string& fixture : golden_fixture_names(kFixtures))
    for (const char* dtype : {"float32", "bfloat16"}) all.push_back({fixture, dtype});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridPrefixCache, ::testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.fixture + "_" + info.param.dtype;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HybridPrefixCache);

}  // namespace
}  // namespace pagellm
