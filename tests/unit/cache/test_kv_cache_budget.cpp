#include <gtest/gtest.h>

#include "cache/kv_cache_budget.h"
#include "core/dtype.h"

namespace pagellm {
namespace {

TEST(KvCacheBudget, BytesPerBlockUseTheRealDtypeSize) {
  // Qwen3-0.6B shape: 28 layers, 8 kv heads, head_dim 128, bf16, block 16.
  const KvBlockShape bf16{.num_attention_layers = 28, .block_size = 16, .num_kv_heads = 8,
                          .head_dim = 128, .dtype_size_bytes = 2};
  EXPECT_EQ(kv_bytes_per_block(bf16), int64_t{2} * 28 * 16 * 8 * 128 * 2);
  KvBlockShape f32 = bf16;
  f32.dtype_size_bytes = 4;
  EXPECT_EQ(kv_bytes_per_block(f32), 2 * kv_bytes_per_block(bf16));
}

// --kv-cache-dtype fp8: a block costs exactly half the bytes of a bf16 one, so a budget buys twice the
// blocks (what the start-up line reports).
TEST(KvCacheBudget, Fp8CacheHalvesBytesPerBlockAndDoublesBlocks) {
  const KvBlockShape bf16{.num_attention_layers = 28, .block_size = 16, .num_kv_heads = 8, .head_dim = 128,
                          .dtype_size_bytes = static_cast<int>(dtype_size_bytes(DType::kBF16))};
  KvBlockShape fp8 = bf16;
  fp8.dtype_size_bytes = static_cast<int>(dtype_size_bytes(DType::kF8E4M3));
  EXPECT_EQ(2 * kv_bytes_per_block(fp8), kv_bytes_per_block(bf16));
  const int64_t budget = int64_t{3} << 30;
  EXPECT_EQ(num_kv_blocks_for_budget(budget, kv_bytes_per_block(fp8)),
            2 * num_kv_blocks_for_budget(budget, kv_bytes_per_block(bf16)));
}

TEST(KvCacheBudget, BlocksForBudgetAndConcurrency) {
  EXPECT_EQ(num_kv_blocks_for_budget(1000, 300), 3);
  EXPECT_EQ(num_kv_blocks_for_budget(299, 300), 0);
  EXPECT_EQ(num_kv_blocks_for_budget(-5, 300), 0);
  EXPECT_DOUBLE_EQ(max_concurrency_at(512, 16, 4096), 2.0);
  EXPECT_DOUBLE_EQ(max_concurrency_at(257, 16, 4097), 1.0);  // 4097 tokens need 257 blocks
}

TEST(KvCacheBudget, SummaryLine) {
  // 2048 blocks × 1 MiB = 2 GiB; 4096 tokens = 256 blocks → 8 requests.
  EXPECT_EQ(kv_cache_summary(2048, 16, int64_t{1} << 20, 4096),
            "KV cache: 2048 blocks of 16 tokens = 2.00 GiB, max concurrency at max_model_len = 8.00");
}

}  // namespace
}  // namespace pagellm
