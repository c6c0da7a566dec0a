#include "cache/kv_cache_budget.h"

#include <fmt/format.h>

#include "core/check.h"

namespace pagellm {

int64_t kv_bytes_per_block(const KvBlockShape& shape) {
  CHECK(shape.num_attention_layers >= 0 && shape.block_size > 0 && shape.num_kv_heads >= 0 &&
        shape.head_dim >= 0 && shape.dtype_size_bytes > 0);
  return int64_t{2} * shape.num_attention_layers * shape.block_size * shape.num_kv_heads *
         shape.head_dim * shape.dtype_size_bytes;
}

int64_t num_kv_blocks_for_budget(int64_t budget_bytes, int64_t bytes_per_block) {
  CHECK_MSG(bytes_per_block > 0, "bytes_per_block={}", bytes_per_block);
  return budget_bytes <= 0 ? 0 : budget_bytes / bytes_per_block;
}

double max_concurrency_at(int64_t num_blocks, int block_size, int64_t max_model_len) {
  CHECK(block_size > 0 && max_model_len > 0);
  const int64_t blocks_per_request = (max_model_len + block_size - 1) / block_size;
  return static_cast<double>(num_blocks) / static_cast<double>(blocks_per_request);
}

std::string kv_cache_summary(int64_t num_blocks, int block_size, int64_t bytes_per_block,
                             int64_t max_model_len) {
  const double gib = static_cast<double>(num_blocks) * static_cast<double>(bytes_per_block) /
                     static_cast<double>(int64_t{1} << 30);
  return fmt::format("KV cache: {} blocks of {} tokens = {:.2f} GiB, max concurrency at "
                     "max_model_len = {:.2f}",
                     num_blocks, block_size, gib, max_concurrency_at(num_blocks, block_size,
                                                                     max_model_len));
}

}  // namespace pagellm
