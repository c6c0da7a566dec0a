#include "cache/block_hash.h"

#include <algorithm>
#include <cstring>

// Exposes XXH64_state_t so the streaming state can live on the stack (no malloc per block).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "core/check.h"

namespace pagellm {

BlockHash hash_block(BlockHash parent_hash, std::span<const TokenId> block_token_ids) {
  // Streaming state so the token span is hashed in place, without a copy.
  XXH64_state_t state;
  XXH64_reset(&state, 0);
  XXH64_update(&state, &parent_hash, sizeof(parent_hash));
  XXH64_update(&state, block_token_ids.data(), block_token_ids.size_bytes());
  return XXH64_digest(&state);
}

void extend_block_hashes(std::span<const TokenId> token_ids, int block_size, int max_num_blocks,
                         std::vector<BlockHash>& hashes) {
  CHECK(block_size > 0);
  const int num_full_blocks = static_cast<int>(token_ids.size() / block_size);
  const int num_wanted = std::min(max_num_blocks, num_full_blocks);
  for (int i = static_cast<int>(hashes.size()); i < num_wanted; ++i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : hashes[i - 1];
    hashes.push_back(hash_block(parent, token_ids.subspan(static_cast<size_t>(i) * block_size,
                                                          block_size)));
  }
}

}  // namespace pagellm
