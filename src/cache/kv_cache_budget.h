// KV cache sizing: how many blocks a memory budget buys, and the start-up log line.
//
//   bytes_per_block = 2 (K and V) × num_attention_layers × block_size × num_kv_heads × head_dim × dtype_bytes
//                     (num_attention_layers = KvCacheGroups::layers_per_group: a block id holds that many layers)
//   num_blocks      = floor(budget_bytes / bytes_per_block)
//   max concurrency = num_blocks / blocks one request of max_model_len holds at most, summed over groups
//
// Blocks a request of L tokens holds in a group (C = tokens it gets per step at most):
//   full group                 ceil(L / block_size)
//   sliding group, window W    min(ceil(L / block_size), ceil((max(W - 1, C) + C) / block_size) + 1)
// A sliding group holds the blocks of the last W - 1 positions before a step's first query plus the
// step's C new positions (+1 for a window edge inside a block); max(W - 1, C) instead of W - 1 covers
// an async step planned before the previous step's blocks were offered to the prefix index.
// "While decoding" (C = 1, steady state): ceil(W / block_size) + 1.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace pagellm {

struct KvBlockShape {
  int num_attention_layers = 0;  // layers with a KV cache (hybrid models: full-attention ones only)
  int block_size = 16;           // tokens per block
  int num_kv_heads = 0;
  int head_dim = 0;
  int dtype_size_bytes = 0;      // the KV cache dtype (--kv-cache-dtype): 2 for bf16/f16, 4 for f32, 1 for fp8
};

int64_t kv_bytes_per_block(const KvBlockShape& shape);

// Blocks that fit in budget_bytes (0 when not even one does).
int64_t num_kv_blocks_for_budget(int64_t budget_bytes, int64_t bytes_per_block);

// Requests of max_model_len tokens that fit at once: num_blocks / blocks per full request.
double max_concurrency_at(int64_t num_blocks, int block_size, int64_t max_model_len);

// "KV cache: 2048 blocks of 16 tokens = 3.50 GiB, max concurrency at max_model_len = 8.00"
std::string kv_cache_summary(int64_t num_blocks, int block_size, int64_t bytes_per_block,
                             int64_t max_model_len);

// Blocks a request of num_tokens tokens holds at most in a group of `window` (kFullAttention = -1),
// when it gets at most max_step_tokens tokens per step (formula above).
int64_t max_blocks_in_group(int32_t window, int64_t num_tokens, int block_size, int64_t max_step_tokens);
// The same summed over the groups.
int64_t max_blocks_per_request(std::span<const int32_t> group_windows, int64_t num_tokens, int block_size,
                               int64_t max_step_tokens);
// The longest request (in tokens, at most limit) whose max_blocks_per_request fits in num_blocks.
int64_t max_tokens_for_blocks(std::span<const int32_t> group_windows, int64_t num_blocks, int block_size,
                              int64_t max_step_tokens, int64_t limit);

// The log line of a grouped cache (one line per start-up), e.g.
// "KV cache: 9000 blocks of 16 tokens x 4 layers = 1.10 GiB; 7 layer groups: 1 full (2048 blocks each at
//  max_model_len), 6 sliding window 512 (up to 257 blocks each, 33 while decoding); max concurrency at
//  max_model_len = 2.51 (4.01 while decoding)"
// With one full-attention group it is kv_cache_summary's line.
std::string kv_cache_groups_summary(std::span<const int32_t> group_windows, int layers_per_group, int64_t num_blocks,
                                    int block_size, int64_t bytes_per_block, int64_t max_model_len,
                                    int64_t max_step_tokens);

}  // namespace pagellm
