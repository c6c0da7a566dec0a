// The slot-mapping vectors of serving.md, checked by hand (block size 4).
#include <gtest/gtest.h>

#include "cache/slot_mapping.h"

namespace pagellm {
namespace {

TEST(SlotMapping, PrefillOfFiveTokensIntoBlocks10And11) {
  const std::vector<BlockId> table = {10, 11};
  std::vector<int64_t> slots;
  append_slot_mapping(table, /*start_pos=*/0, /*num_tokens=*/5, /*block_size=*/4, slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{40, 41, 42, 43, 44}));
}

TEST(SlotMapping, DecodeAtPosition7WithBlocks5And6) {
  const std::vector<BlockId> table = {5, 6};
  EXPECT_EQ(slot_of_position(table, 7, 4), 27);
  std::vector<int64_t> slots;
  append_slot_mapping(table, 7, 1, 4, slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{27}));
}

TEST(SlotMapping, ChunkedPrefillContinuesAtPosition4) {
  // First chunk wrote positions 0..3 into block 10; the second chunk starts a new block.
  const std::vector<BlockId> table = {10, 11, 3};
  std::vector<int64_t> slots;
  append_slot_mapping(table, 0, 4, 4, slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{40, 41, 42, 43}));
  slots.clear();
  append_slot_mapping(table, 4, 6, 4, slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{44, 45, 46, 47, 12, 13}));
}

TEST(SlotMapping, LargeBlockIdsDoNotOverflow32Bits) {
  const std::vector<BlockId> table = {0, 200'000'000};
  EXPECT_EQ(slot_of_position(table, 17, 16), int64_t{200'000'000} * 16 + 1);
}

TEST(SlotMapping, BlocksForTokens) {
  EXPECT_EQ(num_blocks_for_tokens(0, 4), 0);
  EXPECT_EQ(num_blocks_for_tokens(1, 4), 1);
  EXPECT_EQ(num_blocks_for_tokens(4, 4), 1);
  EXPECT_EQ(num_blocks_for_tokens(5, 4), 2);
}

}  // namespace
}  // namespace pagellm
