#include <numeric>

#include <gtest/gtest.h>

#include "cache/kv_cache_manager.h"

namespace pagellm {
namespace {

std::vector<TokenId> iota_tokens(int n, TokenId first = 100) {
  std::vector<TokenId> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::vector<BlockId> table_of(const KvCacheManager& kv, RequestId id) {
  const auto t = kv.block_table(id);
  return {t.begin(), t.end()};
}

// Admits `tokens` the way the scheduler does: lookup, allocate the rest, mark all computed.
int admit_and_compute(KvCacheManager& kv, RequestId id, const std::vector<TokenId>& tokens) {
  const CachedPrefix prefix = kv.lookup_prefix(tokens);
  const int num_cached = prefix.num_cached_tokens;
  EXPECT_TRUE(kv.allocate(id, num_cached, static_cast<int>(tokens.size()) - num_cached, &prefix));
  kv.cache_computed_blocks(id, tokens, static_cast<int>(tokens.size()));
  return num_cached;
}

TEST(KvCacheManager, AllocateGrowsTheTableBlockByBlock) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  ASSERT_TRUE(kv.allocate(1, 0, 5));
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate(1, 5, 3));  // positions 5..7 fit in block 2 of 2
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate(1, 8, 1));
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_EQ(kv.num_used_blocks(), 3);
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManager, OutOfBlocksIsAReturnValueWithNothingLeftBehind) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 4});
  ASSERT_TRUE(kv.allocate(1, 0, 12));  // 3 blocks
  EXPECT_FALSE(kv.allocate(2, 0, 8));  // needs 2, 1 free
  EXPECT_FALSE(kv.has_request(2));
  EXPECT_EQ(kv.num_free_blocks(), 1);
  EXPECT_FALSE(kv.allocate(1, 12, 5));  // needs 2 more
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_TRUE(kv.allocate(2, 0, 4));
  kv.free(1);
  kv.free(2);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManager, SharedPrefixHitsAcrossRequestsAndRefCountsReturnToZero) {
  KvCacheManager kv({.num_blocks = 16, .block_size = 4});
  std::vector<TokenId> a = iota_tokens(10);         // blocks [100..103][104..107][108 109]
  std::vector<TokenId> b = iota_tokens(8);          // shares two full blocks with a
  b.push_back(7);
  b.push_back(8);
  b.push_back(9);
  EXPECT_EQ(admit_and_compute(kv, 1, a), 0);
  EXPECT_EQ(admit_and_compute(kv, 2, b), 8);
  const auto ta = table_of(kv, 1), tb = table_of(kv, 2);
  EXPECT_EQ(ta[0], tb[0]);
  EXPECT_EQ(ta[1], tb[1]);
  EXPECT_NE(ta[2], tb[2]);
  EXPECT_EQ(kv.pool().ref_count(ta[0]), 2);
  EXPECT_EQ(kv.num_prefix_query_tokens(), 10 + 11);
  EXPECT_EQ(kv.num_prefix_hit_tokens(), 8);
  EXPECT_NEAR(kv.prefix_hit_rate(), 8.0 / 21.0, 1e-12);

  kv.free(1);
  EXPECT_EQ(kv.pool().ref_count(ta[0]), 1);
  kv.free(2);
  EXPECT_TRUE(kv.is_leak_free());
  // Still cached after everything is freed: a third request hits without any owner alive.
  EXPECT_EQ(admit_and_compute(kv, 3, a), 8);
  kv.free(3);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManager, WholePromptIsNeverAHitTheLastTokenIsRecomputed) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  const std::vector<TokenId> prompt = iota_tokens(8);  // exactly two full blocks
  admit_and_compute(kv, 1, prompt);
  kv.free(1);
  const CachedPrefix prefix = kv.lookup_prefix(prompt);
  EXPECT_EQ(prefix.num_cached_tokens, 4);  // not 8: position 7 must produce logits
  EXPECT_EQ(kv.lookup_prefix(iota_tokens(9)).num_cached_tokens, 8);
}

TEST(KvCacheManager, SameBlockContentUnderADifferentParentDoesNotHit) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6, 7, 8, 0};
  const std::vector<TokenId> b = {9, 9, 9, 9, 5, 6, 7, 8, 0};  // second block equal to a's
  admit_and_compute(kv, 1, a);
  const CachedPrefix prefix = kv.lookup_prefix(b);
  EXPECT_EQ(prefix.num_cached_tokens, 0);
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManager, BlocksEnterTheIndexOnlyOnceComputed) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  const std::vector<TokenId> prompt = iota_tokens(12);
  ASSERT_TRUE(kv.allocate(1, 0, 6));  // chunk 1: positions 0..5 scheduled
  EXPECT_EQ(kv.lookup_prefix(prompt).num_cached_tokens, 0);  // not computed yet
  kv.cache_computed_blocks(1, prompt, 6);
  EXPECT_EQ(kv.lookup_prefix(prompt).num_cached_tokens, 4);  // block 0 full and computed
  ASSERT_TRUE(kv.allocate(1, 6, 6));
  kv.cache_computed_blocks(1, prompt, 12);
  EXPECT_EQ(kv.lookup_prefix(prompt).num_cached_tokens, 8);
  EXPECT_EQ(kv.num_cached_blocks(), 3);
  kv.free(1);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManager, HitOnFreeCachedBlocksCountsAgainstCapacity) {
  KvCacheManager kv({.num_blocks = 3, .block_size = 4});
  const std::vector<TokenId> a = iota_tokens(9);  // 3 blocks, 2 full ones cached
  admit_and_compute(kv, 1, a);
  kv.free(1);
  ASSERT_TRUE(kv.allocate(2, 0, 4));  // takes the plain free block: 2 cached free remain
  const CachedPrefix prefix = kv.lookup_prefix(a);
  ASSERT_EQ(prefix.num_cached_tokens, 8);
  // Needs the 2 cached blocks plus 1 fresh one: only 2 free in all.
  EXPECT_FALSE(kv.allocate(3, 8, 1, &prefix));
  EXPECT_FALSE(kv.has_request(3));
  EXPECT_EQ(kv.num_cached_blocks(), 2);  // nothing evicted by the failed attempt
  EXPECT_EQ(kv.num_prefix_query_tokens(), 9);  // the failed admission is not counted
  kv.free(2);
  EXPECT_TRUE(kv.allocate(3, 8, 1, &prefix));
  kv.free(3);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManager, FreshAllocationEvictsTheOldestCachedBlock) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 2});
  admit_and_compute(kv, 1, {1, 2, 3});  // caches block {1,2}
  kv.free(1);
  admit_and_compute(kv, 2, {5, 6, 7});  // caches {5,6}; uses plain blocks first
  kv.free(2);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  ASSERT_TRUE(kv.allocate(3, 0, 6));  // 3 blocks: 2 plain + the oldest cached ({1,2})
  EXPECT_EQ(kv.num_evictions(), 1);
  EXPECT_EQ(kv.lookup_prefix(std::vector<TokenId>{1, 2, 3}).num_cached_tokens, 0);
  EXPECT_EQ(kv.lookup_prefix(std::vector<TokenId>{5, 6, 7}).num_cached_tokens, 2);
  kv.free(3);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManager, PrefixCachingOff) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = false});
  const std::vector<TokenId> prompt = iota_tokens(9);
  admit_and_compute(kv, 1, prompt);
  EXPECT_EQ(kv.lookup_prefix(prompt).num_cached_tokens, 0);
  EXPECT_EQ(kv.num_cached_blocks(), 0);
  kv.free(1);
  EXPECT_EQ(kv.num_prefix_query_tokens(), 0);
  EXPECT_TRUE(kv.is_leak_free());
}

}  // namespace
}  // namespace pagellm

namespace pagellm {
namespace {

// Hybrid models: a request computes its prompt, writing the checkpoints the scheduler plans.
int admit_with_checkpoints(KvCacheManager& kv, RequestId id, const std::vector<TokenId>& tokens) {
  const CachedPrefix prefix = kv.lookup_prefix(tokens);
  const int num_cached = prefix.num_cached_tokens;
  const int n = static_cast<int>(tokens.size());
  EXPECT_TRUE(kv.allocate(id, num_cached, n - num_cached, &prefix));
  const std::vector<PlannedCheckpoint> planned = kv.reserve_checkpoints(id, num_cached, n, n);
  kv.cache_computed_blocks(id, tokens, n, n);
  kv.publish_checkpoints(id, planned);
  return num_cached;
}

KvCacheConfig hybrid_config(int num_blocks, int num_checkpoints) {
  return {.num_blocks = num_blocks, .block_size = 4, .num_state_checkpoints = num_checkpoints,
          .checkpoint_interval_tokens = 8, .min_recompute_tokens = 2};
}

TEST(KvCacheManagerCheckpoints, HitEndsOnTheNewestCheckpointLeavingTheMinimumToCompute) {
  KvCacheManager kv(hybrid_config(32, 8));
  const std::vector<TokenId> tokens = iota_tokens(27);
  EXPECT_EQ(admit_and_compute(kv, 1, tokens), 0);  // no checkpoints written: nothing to hit
  kv.free(1);
  EXPECT_EQ(kv.lookup_prefix(tokens).num_cached_tokens, 0) << "KV blocks alone are no hit";
  EXPECT_EQ(admit_with_checkpoints(kv, 2, tokens), 0);  // writes checkpoints at 8, 16, 24
  kv.free(2);
  EXPECT_EQ(kv.lookup_prefix(tokens).num_cached_tokens, 24);
  EXPECT_GE(kv.lookup_prefix(tokens).state_checkpoint, 0);
  // 25 tokens: 24 would leave one to compute, fewer than 2.
  EXPECT_EQ(kv.lookup_prefix(iota_tokens(25)).num_cached_tokens, 16);
  // Shared for 13 tokens: three blocks match, the checkpoint at 8 is the newest below.
  std::vector<TokenId> partial = iota_tokens(13);
  partial.push_back(5);
  partial.push_back(6);
  partial.push_back(7);
  EXPECT_EQ(kv.lookup_prefix(partial).num_cached_tokens, 8);
  EXPECT_TRUE(kv.is_leak_free());
}

TEST(KvCacheManagerCheckpoints, EvictingAKvBlockDropsItsCheckpointAndFreeCancelsPending) {
  KvCacheManager kv(hybrid_config(6, 4));
  const std::vector<TokenId> first = iota_tokens(18);  // 5 blocks, checkpoints at 8 and 16
  admit_with_checkpoints(kv, 1, first);
  kv.free(1);
  EXPECT_EQ(kv.checkpoints().num_cached(), 2);
  // Another request takes 5 blocks: the LRU cached blocks go, the tail first.
  ASSERT_TRUE(kv.allocate(2, 0, 20));
  EXPECT_EQ(kv.checkpoints().num_cached(), 0) << "the blocks ending at 8 and 16 were evicted";
  EXPECT_EQ(kv.reserve_checkpoints(2, 0, 20, 20).size(), 2u);
  EXPECT_FALSE(kv.is_leak_free());
  kv.free(2);  // pending checkpoints go back with the blocks
  EXPECT_TRUE(kv.is_leak_free());
  EXPECT_EQ(kv.lookup_prefix(first).num_cached_tokens, 0);
}

}  // namespace
}  // namespace pagellm
