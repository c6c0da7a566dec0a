#include <gtest/gtest.h>

#include "cache/block_hash.h"
#include "cache/block_pool.h"

namespace pagellm {
namespace {

TEST(BlockPool, AllocateReleaseAndCounters) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  const BlockId a = pool.allocate();
  const BlockId b = pool.allocate();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.num_used_blocks(), 2);
  EXPECT_EQ(pool.ref_count(a), 1);
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_TRUE(pool.all_refs_zero());
}

TEST(BlockPool, SharedBlockIsFreedByTheLastOwner) {
  BlockPool pool(2);
  const BlockId a = pool.allocate();
  ASSERT_TRUE(pool.register_hash(a, 42));
  pool.take_ref(a);
  EXPECT_EQ(pool.ref_count(a), 2);
  pool.release(a);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.release(a);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_TRUE(pool.all_refs_zero());
}

TEST(BlockPool, FreedCachedBlockIsRevivedByAHit) {
  BlockPool pool(3);
  const BlockId a = pool.allocate();
  ASSERT_TRUE(pool.register_hash(a, 7));
  pool.release(a);
  EXPECT_EQ(pool.num_free_blocks(), 3);
  ASSERT_EQ(pool.find_cached(7), a);
  pool.take_ref(a);  // a prefix hit
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_EQ(pool.ref_count(a), 1);
  pool.release(a);
  EXPECT_EQ(pool.num_evictions(), 0);
}

TEST(BlockPool, PlainFreeBlocksAreUsedBeforeCachedOnes) {
  BlockPool pool(3);
  const BlockId cached = pool.allocate();
  ASSERT_TRUE(pool.register_hash(cached, 1));
  pool.release(cached);
  // Two plain blocks remain: both are handed out before the cached one is evicted.
  const BlockId x = pool.allocate();
  const BlockId y = pool.allocate();
  EXPECT_NE(x, cached);
  EXPECT_NE(y, cached);
  EXPECT_EQ(pool.find_cached(1), cached);
  EXPECT_EQ(pool.allocate(), cached);  // now it has to go
  EXPECT_EQ(pool.find_cached(1), std::nullopt);
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_FALSE(pool.is_cached(cached));
}

TEST(BlockPool, EvictsLeastRecentlyFreedFirst) {
  BlockPool pool(3);
  const BlockId a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  ASSERT_TRUE(pool.register_hash(a, 10));
  ASSERT_TRUE(pool.register_hash(b, 11));
  ASSERT_TRUE(pool.register_hash(c, 12));
  pool.release(b);  // oldest
  pool.release(a);
  pool.release(c);  // newest
  // A hit on b refreshes it: released again, it becomes the newest.
  pool.take_ref(b);
  pool.release(b);
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_EQ(pool.allocate(), c);
  EXPECT_EQ(pool.find_cached(11), b);
  EXPECT_EQ(pool.num_evictions(), 2);
}

TEST(BlockPool, DuplicateHashIsNotRegisteredTwice) {
  BlockPool pool(2);
  const BlockId a = pool.allocate(), b = pool.allocate();
  EXPECT_TRUE(pool.register_hash(a, 5));
  EXPECT_FALSE(pool.register_hash(b, 5));
  EXPECT_FALSE(pool.is_cached(b));
  pool.release(a);
  pool.release(b);
  // b (plain) is reused before a (cached).
  EXPECT_EQ(pool.allocate(), b);
}

TEST(BlockPool, EvictAllFreeCachedKeepsInUseHashes) {
  BlockPool pool(2);
  const BlockId a = pool.allocate(), b = pool.allocate();
  ASSERT_TRUE(pool.register_hash(a, 1));
  ASSERT_TRUE(pool.register_hash(b, 2));
  pool.release(a);
  pool.evict_all_free_cached();
  EXPECT_EQ(pool.find_cached(1), std::nullopt);
  EXPECT_EQ(pool.find_cached(2), b);
  pool.release(b);
}

TEST(BlockHash, ChainDependsOnParent) {
  const std::vector<TokenId> block = {1, 2, 3, 4};
  const BlockHash under_root = hash_block(kRootBlockHash, block);
  EXPECT_EQ(under_root, hash_block(kRootBlockHash, block));
  EXPECT_NE(under_root, hash_block(under_root, block));
  EXPECT_NE(under_root, hash_block(kRootBlockHash, std::vector<TokenId>{1, 2, 3, 5}));

  std::vector<BlockHash> chain;
  const std::vector<TokenId> tokens = {1, 2, 3, 4, 1, 2, 3, 4, 9};
  extend_block_hashes(tokens, 4, 100, chain);
  ASSERT_EQ(chain.size(), 2u);  // the partial third block is not hashed
  EXPECT_EQ(chain[0], under_root);
  EXPECT_EQ(chain[1], hash_block(under_root, block));
  EXPECT_NE(chain[0], chain[1]);  // same content, different parent
}

}  // namespace
}  // namespace pagellm
