// Slot mapping: where the KV of token position `pos` of a request lives in the paged cache.
//
// The cache of one attention layer is K and V, each [num_blocks, block_size, num_kv_heads, head_dim].
// Flatten the first two dims into "slots": slot = block_id * block_size + offset_in_block.
// A request's block table lists its blocks in position order:
//
//   block_size = 4, block_table = [10, 11]
//
//   position p      0   1   2   3 | 4   5   6   7
//   p / 4 (index)   0   0   0   0 | 1   1   1   1
//   block           10  10  10  10| 11  11  11  11
//   p % 4 (offset)  0   1   2   3 | 0   1   2   3
//   slot            40  41  42  43| 44  45  46  47
//
//   slot(p) = block_table[p / block_size] * block_size + p % block_size     (int64: may pass 2^31)
//
// A step computing `num_tokens` tokens starting at `start_pos` writes slots of positions
// [start_pos, start_pos + num_tokens): a 5-token prefill above gives slots 40..44, a decode at
// position 7 with blocks [5, 6] gives 6 * 4 + 3 = 27, and a chunk continuing at position 4 starts at 44.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/ids.h"
#include "core/check.h"

namespace pagellm {

// Blocks needed to hold `num_tokens` positions.
inline int num_blocks_for_tokens(int64_t num_tokens, int block_size) {
  return static_cast<int>((num_tokens + block_size - 1) / block_size);
}

inline int64_t slot_of_position(std::span<const BlockId> block_table, int64_t pos, int block_size) {
  const int64_t block_index = pos / block_size;
  CHECK_MSG(pos >= 0 && block_index < static_cast<int64_t>(block_table.size()),
            "position {} outside a block table of {} blocks", pos, block_table.size());
  const BlockId block = block_table[block_index];
  CHECK_MSG(block != kNoBlock, "position {} is in a released block (outside a sliding window)", pos);
  return static_cast<int64_t>(block) * block_size + pos % block_size;
}

// Appends the slots of positions [start_pos, start_pos + num_tokens) to `slots`.
inline void append_slot_mapping(std::span<const BlockId> block_table, int64_t start_pos,
                                int64_t num_tokens, int block_size, std::vector<int64_t>& slots) {
  for (int64_t pos = start_pos; pos < start_pos + num_tokens; ++pos) {
    slots.push_back(slot_of_position(block_table, pos, block_size));
  }
}

}  // namespace pagellm
