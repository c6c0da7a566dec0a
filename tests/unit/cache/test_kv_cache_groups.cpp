// KV cache groups (full + sliding-window layers) in the KvCacheManager: window release, the prefix
// index across groups, leak checks, the budget arithmetic, and the Gemma-3-1B measurement of issue
// #12 (KV bytes per token of a 16k-token request vs all-global layers, from the blocks the manager holds).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cache/kv_cache_budget.h"
#include "cache/kv_cache_groups.h"
#include "cache/kv_cache_manager.h"
#include "io/hf_config.h"

namespace pagellm {
namespace {

std::vector<TokenId> iota_tokens(int n, TokenId first = 100) {
  std::vector<TokenId> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::vector<BlockId> table_of(const KvCacheManager& kv, RequestId id, int group) {
  const auto t = kv.block_table(id, group);
  return {t.begin(), t.end()};
}

// Gemma 3's layer pattern: every 6th layer global, the others sliding.
std::vector<int32_t> gemma3_windows(int num_layers, int32_t window) {
  std::vector<int32_t> windows;
  for (int i = 0; i < num_layers; ++i) windows.push_back((i + 1) % 6 == 0 ? kFullAttention : window);
  return windows;
}

TEST(KvCacheGroups, OneKindIsOneGroupOfAllLayers) {
  const std::vector<int32_t> full(28, kFullAttention);
  const KvCacheGroups groups = make_kv_cache_groups(full);
  EXPECT_EQ(groups.windows, std::vector<int32_t>{kFullAttention});
  EXPECT_EQ(groups.layers_per_group, 28);
  for (int i = 0; i < 28; ++i) {
    EXPECT_EQ(groups.layers[i].group, 0);
    EXPECT_EQ(groups.layers[i].slot, i);
  }
  MemorySpec spec;
  spec.num_attention_layers = 6;
  const KvCacheGroups implicit = kv_cache_groups_of(spec);  // no windows named: all full
  EXPECT_EQ(implicit.num_groups(), 1);
  EXPECT_EQ(implicit.layers_per_group, 6);
  const std::vector<int32_t> mistral(4, 4096);  // a window on every layer: one sliding group
  EXPECT_EQ(make_kv_cache_groups(mistral).windows, std::vector<int32_t>{4096});
}

TEST(KvCacheGroups, Gemma3OneBillionIsSevenGroupsOfFourLayers) {
  const KvCacheGroups groups = make_kv_cache_groups(gemma3_windows(26, 512));
  EXPECT_EQ(groups.layers_per_group, 4);
  EXPECT_EQ(groups.windows, (std::vector<int32_t>{kFullAttention, 512, 512, 512, 512, 512, 512}));
  // Full layers 5 11 17 23 fill group 0; sliding 0 1 2 3 | 4 6 7 8 | ... | 24 25.
  EXPECT_EQ(groups.layers[5].group, 0);
  EXPECT_EQ(groups.layers[23].slot, 3);
  EXPECT_EQ(groups.layers[0].group, 1);
  EXPECT_EQ(groups.layers[4].group, 2);
  EXPECT_EQ(groups.layers[4].slot, 0);
  EXPECT_EQ(groups.layers[6].slot, 1);
  EXPECT_EQ(groups.layers[25].group, 6);
  EXPECT_EQ(groups.layers[25].slot, 1);
  // Every (group, slot) is used by one layer at most.
  std::set<std::pair<int, int>> places;
  for (const KvLayerPlace& p : groups.layers) EXPECT_TRUE(places.insert({p.group, p.slot}).second);

  const KvCacheGroups gemma2 = make_kv_cache_groups(std::vector<int32_t>{8, -1, 8, -1});
  EXPECT_EQ(gemma2.windows, (std::vector<int32_t>{kFullAttention, 8}));
  EXPECT_EQ(gemma2.layers_per_group, 2);
}

TEST(KvCacheManagerGroups, SlidingGroupReleasesBlocksThatLeftTheWindow) {
  // Window 8, blocks of 4: a query at p sees [p - 7, p].
  KvCacheManager kv({.num_blocks = 32, .block_size = 4, .enable_prefix_caching = false,
                     .group_windows = {kFullAttention, 8}});
  ASSERT_EQ(kv.num_groups(), 2);
  ASSERT_TRUE(kv.allocate(1, 0, 12));  // positions 0..11: 3 blocks in each group
  EXPECT_EQ(kv.num_used_blocks(), 6);
  // The next query starts at 12 and sees 5..12: block 0 (0..3) is unreadable.
  ASSERT_TRUE(kv.allocate(1, 12, 1));
  EXPECT_EQ(kv.block_table(1, 0).size(), 4u);
  const auto sliding = table_of(kv, 1, 1);
  ASSERT_EQ(sliding.size(), 4u);
  EXPECT_EQ(sliding[0], kNoBlock);
  EXPECT_NE(sliding[1], kNoBlock);
  EXPECT_EQ(kv.num_blocks_held(1, 0), 4);
  EXPECT_EQ(kv.num_blocks_held(1, 1), 3);
  EXPECT_EQ(kv.num_used_blocks(), 7);
  // Decoding on: the sliding group never holds more than ceil(8 / 4) + 1 blocks.
  for (int pos = 13; pos < 64; ++pos) {
    ASSERT_TRUE(kv.allocate(1, pos, 1));
    EXPECT_LE(kv.num_blocks_held(1, 1), 3) << pos;
    // Every position a query of this step can see is still held.
    const auto t = kv.block_table(1, 1);
    for (int p = std::max(0, pos - 7); p <= pos; ++p) EXPECT_NE(t[p / 4], kNoBlock) << pos << " " << p;
  }
  EXPECT_EQ(kv.num_blocks_held(1, 0), 16);
  EXPECT_EQ(kv.num_used_blocks(), kv.num_blocks_held(1));
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
  EXPECT_EQ(kv.num_free_blocks(), 32);
}

TEST(KvCacheManagerGroups, ALongChunkHoldsItsWholeSpanWhileItIsComputed) {
  KvCacheManager kv({.num_blocks = 32, .block_size = 4, .enable_prefix_caching = false,
                     .group_windows = {kFullAttention, 8}});
  ASSERT_TRUE(kv.allocate(1, 0, 40));  // every position of the chunk writes its KV: 10 + 10 blocks
  EXPECT_EQ(kv.num_used_blocks(), 20);
  ASSERT_TRUE(kv.allocate(1, 40, 1));  // now only 33..40 are visible: blocks 8..10 of the sliding group
  EXPECT_EQ(kv.num_blocks_held(1, 1), 3);
  EXPECT_EQ(kv.num_used_blocks(), 11 + 3);
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManagerGroups, CapacityCountsEveryGroupAndReleasesFirst) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = false,
                     .group_windows = {kFullAttention, 4}});
  ASSERT_TRUE(kv.allocate(1, 0, 12));   // 3 + 3
  EXPECT_FALSE(kv.allocate(2, 0, 8));   // needs 2 + 2, 2 free
  EXPECT_FALSE(kv.has_request(2));
  EXPECT_EQ(kv.num_free_blocks(), 2);
  // Request 1's next query (12) sees 9..12: sliding blocks 0 and 1 go back, then 1 + 1 fresh fit.
  ASSERT_TRUE(kv.allocate(1, 12, 1));
  EXPECT_EQ(kv.num_blocks_held(1, 1), 2);
  EXPECT_EQ(kv.num_free_blocks(), 2);
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManagerGroups, WithPrefixCachingABlockLeavesOnlyOnceOffered) {
  KvCacheManager kv({.num_blocks = 32, .block_size = 4, .group_windows = {kFullAttention, 8}});
  const std::vector<TokenId> tokens = iota_tokens(20);
  ASSERT_TRUE(kv.allocate(1, 0, 12));
  // An async step planned before the previous one committed: nothing is offered yet, nothing leaves.
  ASSERT_TRUE(kv.allocate(1, 12, 4));
  EXPECT_EQ(kv.num_blocks_held(1, 1), 4);
  kv.cache_computed_blocks(1, tokens, 12);  // blocks 0..2 offered; the next query (>= 12) sees 5..: block 0 goes
  EXPECT_EQ(kv.num_blocks_held(1, 1), 3);
  EXPECT_EQ(kv.num_cached_blocks(), 6);     // 3 blocks of each group in the index (block 0 still, free)
  kv.cache_computed_blocks(1, tokens, 16);  // sees 9..: block 1 goes too
  EXPECT_EQ(kv.num_blocks_held(1, 1), 2);
  EXPECT_EQ(kv.num_used_blocks(), 4 + 2);
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManagerGroups, PrefixHitNeedsTheFullPrefixAndTheLastWindow) {
  // Window 5, blocks of 4: a hit of k blocks needs sliding block k - 1 only (positions 4k - 4 ..).
  KvCacheManager kv({.num_blocks = 17, .block_size = 4, .group_windows = {kFullAttention, 5}});
  const std::vector<TokenId> a = iota_tokens(21);
  ASSERT_TRUE(kv.allocate(1, 0, 21));  // 6 + 6
  kv.cache_computed_blocks(1, a, 20);  // 5 full blocks offered; queries from 20 see 16..: sliding 0..3 go
  EXPECT_EQ(kv.num_blocks_held(1, 1), 2);
  EXPECT_EQ(kv.num_used_blocks(), 8);
  const auto a_full = table_of(kv, 1, 0);

  // B shares a's first 12 tokens: its hit needs full blocks 0..2 (held by a) and sliding block 2
  // (released by a, still cached: the hit revives it).
  std::vector<TokenId> b(a.begin(), a.begin() + 12);
  b.push_back(999);
  const CachedPrefix hit_b = kv.lookup_prefix(b);
  ASSERT_EQ(hit_b.num_cached_tokens, 12);
  ASSERT_EQ(hit_b.block_ids.size(), 2u);
  EXPECT_EQ(hit_b.block_ids[1][0], kNoBlock);
  EXPECT_EQ(hit_b.block_ids[1][1], kNoBlock);
  EXPECT_NE(hit_b.block_ids[1][2], kNoBlock);
  ASSERT_TRUE(kv.allocate(2, 12, 1, &hit_b));
  EXPECT_EQ(table_of(kv, 2, 0)[2], a_full[2]);
  EXPECT_EQ(kv.pool().ref_count(a_full[2]), 2);
  EXPECT_EQ(kv.num_blocks_held(2, 1), 2);  // sliding block 2 (shared) + a fresh one for position 12
  EXPECT_EQ(kv.num_used_blocks(), 8 + 1 + 2);

  // Fill the pool: every free cached block (a's sliding 0, 1, 3) is evicted.
  ASSERT_TRUE(kv.allocate(3, 0, 12));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  // C shares a's first 16 tokens: the full group has 4 blocks, but sliding block 3 is gone; the hit
  // shortens to 12 tokens, whose window (sliding block 2) b holds.
  std::vector<TokenId> c(a.begin(), a.begin() + 16);
  c.push_back(999);
  EXPECT_EQ(kv.lookup_prefix(c).num_cached_tokens, 12);
  // a's own tokens still hit all 20: their last window is held by a.
  EXPECT_EQ(kv.lookup_prefix(a).num_cached_tokens, 20);
  // D shares only a's first 8: sliding block 1 is evicted and block 0 too: no hit at all.
  std::vector<TokenId> d(a.begin(), a.begin() + 8);
  d.push_back(999);
  EXPECT_EQ(kv.lookup_prefix(d).num_cached_tokens, 0);

  kv.free(3);
  kv.free(2);
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
  EXPECT_EQ(kv.num_free_blocks(), 17);
}

TEST(KvCacheManagerGroups, GroupsKeyTheSameTokensApart) {
  // Two groups cache the same token blocks in different blocks: a hit takes each group's own.
  KvCacheManager kv({.num_blocks = 16, .block_size = 4, .group_windows = {kFullAttention, 64}});
  const std::vector<TokenId> a = iota_tokens(9);
  ASSERT_TRUE(kv.allocate(1, 0, 9));
  kv.cache_computed_blocks(1, a, 9);
  EXPECT_EQ(kv.num_cached_blocks(), 4);
  kv.free(1);
  const CachedPrefix hit = kv.lookup_prefix(a);
  ASSERT_EQ(hit.num_cached_tokens, 8);
  for (int i = 0; i < 2; ++i) EXPECT_NE(hit.block_ids[0][i], hit.block_ids[1][i]);
  ASSERT_TRUE(kv.allocate(2, 8, 1, &hit));
  EXPECT_EQ(kv.num_used_blocks(), 6);
  kv.free(2);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManagerGroups, PreemptionFreesEveryGroup) {
  KvCacheManager kv({.num_blocks = 12, .block_size = 4, .group_windows = {kFullAttention, 8, 8}});
  const std::vector<TokenId> a = iota_tokens(30);
  ASSERT_TRUE(kv.allocate(1, 0, 8));
  kv.cache_computed_blocks(1, a, 8);
  ASSERT_TRUE(kv.allocate(1, 8, 8));
  kv.cache_computed_blocks(1, a, 16);
  EXPECT_EQ(kv.num_used_blocks(), 4 + 2 + 2);  // queries from 16 see 9..: sliding blocks 0, 1 left
  kv.free(1);  // preemption: everything goes, cached blocks wait in the LRU
  EXPECT_TRUE(kv.is_leak_free());
  // Resuming recomputes from the longest exact hit: 16 tokens computed, the 17th (index 16) not yet
  // offered; the lookup over 17 tokens hits 16 (4 full blocks + the last window of each sliding group).
  std::vector<TokenId> resumed(a.begin(), a.begin() + 17);
  const CachedPrefix hit = kv.lookup_prefix(resumed);
  EXPECT_EQ(hit.num_cached_tokens, 16);
  ASSERT_TRUE(kv.allocate(1, 16, 1, &hit));
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheBudgetGroups, BlocksPerRequestAndSummary) {
  // Full: ceil(L / 16). Sliding 512 with steps of 2048: ceil((2048 + 2048) / 16) + 1 = 257, capped by L.
  EXPECT_EQ(max_blocks_in_group(kFullAttention, 16384, 16, 2048), 1024);
  EXPECT_EQ(max_blocks_in_group(512, 16384, 16, 2048), 257);
  EXPECT_EQ(max_blocks_in_group(512, 16384, 16, 1), 33);  // decoding: ceil(512 / 16) + 1
  EXPECT_EQ(max_blocks_in_group(512, 100, 16, 2048), 7);
  const std::vector<int32_t> windows = {kFullAttention, 512, 512};
  EXPECT_EQ(max_blocks_per_request(windows, 16384, 16, 2048), 1024 + 2 * 257);
  EXPECT_EQ(max_blocks_per_request({}, 4097, 16, 2048), 257);
  // The longest request whose bound fits.
  EXPECT_EQ(max_tokens_for_blocks({}, 256, 16, 2048, 1 << 20), 4096);
  const int64_t fits = max_tokens_for_blocks(windows, 1024 + 2 * 257, 16, 2048, 1 << 20);
  EXPECT_EQ(fits, 16384);
  // One full group: the line of a cache without groups.
  EXPECT_EQ(kv_cache_groups_summary(std::vector<int32_t>{kFullAttention}, 28, 2048, 16, int64_t{1} << 20, 4096, 2048),
            kv_cache_summary(2048, 16, int64_t{1} << 20, 4096));
  // Gemma-3-1B's groups, 9000 blocks, max_model_len 32768: 2048 + 6 x 257 blocks per request at the
  // peak, 2048 + 6 x 33 while decoding.
  const std::string line = kv_cache_groups_summary(make_kv_cache_groups(gemma3_windows(26, 512)).windows, 4, 9000, 16,
                                                   int64_t{1} << 17, 32768, 2048);
  EXPECT_NE(line.find("7 layer groups: 1 full (2048 blocks each at max_model_len), 6 sliding window 512 (up to 257 "
                      "blocks each, 33 while decoding)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("max concurrency at max_model_len = 2.51 (4.01 while decoding)"), std::string::npos) << line;
}

// Issue #12's check: the Gemma-3-1B shape (config.json of `make-model --preset gemma3-1b`: 26 layers,
// sliding_window 512, sliding_window_pattern 6, 1 kv head of 256, bf16), one request of 16k tokens
// prefilled in steps of 2048 then decoding, blocks of 16, as the scheduler drives the manager. KV bytes
// per token = blocks held x layers per block x bytes per layer-block / tokens, vs one table for all 26.
TEST(KvCacheManagerGroups, Gemma3OneBillionSixteenKTokensHoldsUnderAThirdOfAllGlobal) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "pagellm_gemma3_1b_shape";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
    "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 256, "hidden_act": "silu", "rms_norm_eps": 1e-6,
    "max_position_embeddings": 32768, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "tie_word_embeddings": true, "attention_bias": false, "dtype": "bfloat16", "bos_token_id": 2,
    "eos_token_id": [1, 106], "sliding_window": 512, "sliding_window_pattern": 6,
    "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh"})";
  auto config = load_model_config((dir / "config.json").string());
  ASSERT_TRUE(config.has_value()) << config.status().message();
  std::filesystem::remove_all(dir);
  ASSERT_EQ(config->num_hidden_layers, 26);
  ASSERT_TRUE(config->sliding_window.has_value());
  std::vector<int32_t> windows;
  for (LayerType t : config->layer_types)
    windows.push_back(t == LayerType::kSlidingAttention ? static_cast<int32_t>(*config->sliding_window) : kFullAttention);
  ASSERT_EQ(windows, gemma3_windows(26, 512));

  const int block_size = 16, step_tokens = 2048, num_tokens = 16384;
  const int64_t bytes_per_layer_block = 2 * block_size * config->num_key_value_heads * config->head_dim * 2;  // bf16
  struct Held {
    int64_t now = 0, peak = 0, layers_per_block = 0;
  };
  auto run = [&](const std::vector<int32_t>& layer_windows) {
    const KvCacheGroups groups = make_kv_cache_groups(layer_windows);
    KvCacheManager kv({.num_blocks = 40000, .block_size = block_size, .group_windows = groups.windows});
    const std::vector<TokenId> tokens = iota_tokens(num_tokens + 64, 7);
    Held held{0, 0, groups.layers_per_group};
    int computed = 0;
    auto step = [&](int n) {
      EXPECT_TRUE(kv.allocate(1, computed, n));
      held.peak = std::max<int64_t>(held.peak, kv.num_used_blocks());
      computed += n;
      kv.cache_computed_blocks(1, tokens, computed);
    };
    while (computed < num_tokens) step(std::min(step_tokens, num_tokens - computed));
    held.now = kv.num_used_blocks();  // 16384 tokens hold KV, the next query starts at 16384
    for (int i = 0; i < 32; ++i) step(1);
    EXPECT_EQ(kv.num_used_blocks(), kv.num_blocks_held(1));
    kv.free(1);
    EXPECT_TRUE(kv.is_leak_free());
    return held;
  };
  const Held grouped = run(windows);
  const Held global = run(std::vector<int32_t>(26, kFullAttention));
  EXPECT_EQ(grouped.layers_per_block, 4);
  EXPECT_EQ(global.layers_per_block, 26);
  EXPECT_EQ(global.now, 1024);
  EXPECT_EQ(grouped.now, 1024 + 6 * 32);  // each sliding group holds the 32 blocks of positions 15872..16383
  const double grouped_bytes_per_token =
      static_cast<double>(grouped.now * grouped.layers_per_block * bytes_per_layer_block) / num_tokens;
  const double global_bytes_per_token =
      static_cast<double>(global.now * global.layers_per_block * bytes_per_layer_block) / num_tokens;
  const double ratio = grouped_bytes_per_token / global_bytes_per_token;
  std::cout << fmt::format(
      "[gemma3-1b shape, 16k tokens, blocks of 16] grouped: {} blocks x {} layers = {:.0f} B/token (peak {} "
      "blocks while prefilling in steps of {}); all-global: {} blocks x {} layers = {:.0f} B/token; ratio {:.3f}\n",
      grouped.now, grouped.layers_per_block, grouped_bytes_per_token, grouped.peak, step_tokens, global.now,
      global.layers_per_block, global_bytes_per_token, ratio);
  EXPECT_LE(ratio, 1.0 / 3.0);
  EXPECT_LT(ratio, 0.2);  // "about a fifth"
}

}  // namespace
}  // namespace pagellm
