#include <gtest/gtest.h>

#include "cache/checkpoint_pool.h"

namespace pagellm {
namespace {

TEST(CheckpointPool, PendingUntilPublishedThenFoundAndCancelGivesBack) {
  CheckpointPool pool(3);
  const int32_t a = pool.reserve(1).value(), b = pool.reserve(1).value(), c = pool.reserve(2).value();
  EXPECT_FALSE(pool.reserve(3).has_value()) << "every checkpoint is pending: none to evict";
  EXPECT_FALSE(pool.find(11).has_value());
  pool.publish(a, 11);
  EXPECT_EQ(pool.find(11), a);
  pool.cancel(1);  // b goes back; a is published, no longer request 1's
  EXPECT_EQ(pool.num_pending(), 1);
  EXPECT_EQ(pool.find(11), a);
  pool.cancel(2);
  EXPECT_TRUE(pool.is_leak_free());
  EXPECT_NE(b, c);
}

TEST(CheckpointPool, FullPoolEvictsTheLeastRecentlyUsed) {
  CheckpointPool pool(2);
  const int32_t a = pool.reserve(1).value();
  pool.publish(a, 100);
  const int32_t b = pool.reserve(1).value();
  pool.publish(b, 200);
  pool.touch(a);  // a hit on 100: now 200 is the least recently used
  const int32_t c = pool.reserve(2).value();
  EXPECT_EQ(c, b);
  EXPECT_FALSE(pool.find(200).has_value());
  EXPECT_EQ(pool.find(100), a);
  EXPECT_EQ(pool.num_evictions(), 1);
  pool.publish(c, 300);
  EXPECT_EQ(pool.num_cached(), 2);
}

TEST(CheckpointPool, SamePrefixTwiceKeepsTheFirstAndDropFollowsTheKvBlock) {
  CheckpointPool pool(2);
  const int32_t a = pool.reserve(1).value(), b = pool.reserve(2).value();
  pool.publish(a, 7);
  pool.publish(b, 7);  // computed twice: b is free again
  EXPECT_EQ(pool.find(7), a);
  EXPECT_EQ(pool.num_cached(), 1);
  pool.drop(7);  // the KV block under 7 was evicted
  EXPECT_FALSE(pool.find(7).has_value());
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_TRUE(pool.reserve(3).has_value() && pool.reserve(3).has_value());
}

}  // namespace
}  // namespace pagellm
