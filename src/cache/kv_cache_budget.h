// KV cache sizing: how many blocks a memory budget buys, and the start-up log line.
//
//   bytes_per_block = 2 (K and V) × num_attention_layers × block_size × num_kv_heads × head_dim × dtype_bytes
//   num_blocks      = floor(budget_bytes / bytes_per_block)
//   max concurrency = num_blocks / ceil(max_model_len / block_size)   (requests of full length at once)
#pragma once

#include <cstdint>
#include <string>

namespace pagellm {

struct KvBlockShape {
  int num_attention_layers = 0;  // layers with a KV cache (hybrid models: full-attention ones only)
  int block_size = 16;           // tokens per block
  int num_kv_heads = 0;
  int head_dim = 0;
  int dtype_size_bytes = 0;      // the model's activation dtype: 2 for bf16/f16, 4 for f32
};

int64_t kv_bytes_per_block(const KvBlockShape& shape);

// Blocks that fit in budget_bytes (0 when not even one does).
int64_t num_kv_blocks_for_budget(int64_t budget_bytes, int64_t bytes_per_block);

// Requests of max_model_len tokens that fit at once: num_blocks / blocks per full request.
double max_concurrency_at(int64_t num_blocks, int block_size, int64_t max_model_len);

// "KV cache: 2048 blocks of 16 tokens = 3.50 GiB, max concurrency at max_model_len = 8.00"
std::string kv_cache_summary(int64_t num_blocks, int block_size, int64_t bytes_per_block,
                             int64_t max_model_len);

}  // namespace pagellm
