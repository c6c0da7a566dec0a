// BlockHash: the prefix-cache key of a full block.
//
// A block's key is a hash chain, so equal token content under a different prefix never matches:
//
//   tokens   [t0 .. t15][t16 .. t31][t32 .. t47][t48 t49]     (block_size 16)
//   hash     h0         h1          h2          (none: partial blocks are never keyed)
//   h0 = xxh64(kRootBlockHash, t0..t15)
//   h1 = xxh64(h0, t16..t31)
//   h2 = xxh64(h1, t32..t47)
//
// Only full blocks are hashed: a partial block still changes as tokens are appended.
#pragma once

#include <span>
#include <vector>

#include "cache/ids.h"

namespace pagellm {

// Parent of the first block. Any fixed value works; non-zero so an all-zero block is not special.
inline constexpr BlockHash kRootBlockHash = 0x9e3779b97f4a7c15ull;

// xxHash64 over (parent_hash, token ids of one full block), both as little-endian bytes.
BlockHash hash_block(BlockHash parent_hash, std::span<const TokenId> block_token_ids);

// Extends `hashes` (the chain of the first hashes.size() full blocks of token_ids) to cover
// min(max_num_blocks, token_ids.size() / block_size) blocks. Already-present hashes are kept.
void extend_block_hashes(std::span<const TokenId> token_ids, int block_size, int max_num_blocks,
                         std::vector<BlockHash>& hashes);

}  // namespace pagellm
