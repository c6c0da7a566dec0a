#include "cache/kv_cache_budget.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cache/kv_cache_groups.h"

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

int64_t max_blocks_in_group(int32_t window, int64_t num_tokens, int block_size, int64_t max_step_tokens) {
  CHECK(block_size > 0 && num_tokens >= 0 && max_step_tokens >= 1);
  const int64_t all = (num_tokens + block_size - 1) / block_size;
  if (window == kFullAttention) return all;
  const int64_t span = std::max<int64_t>(window - 1, max_step_tokens) + max_step_tokens;
  return std::min(all, (span + block_size - 1) / block_size + 1);
}

int64_t max_blocks_per_request(std::span<const int32_t> group_windows, int64_t num_tokens, int block_size,
                               int64_t max_step_tokens) {
  if (group_windows.empty()) return max_blocks_in_group(kFullAttention, num_tokens, block_size, max_step_tokens);
  int64_t total = 0;
  for (int32_t window : group_windows) total += max_blocks_in_group(window, num_tokens, block_size, max_step_tokens);
  return total;
}

int64_t max_tokens_for_blocks(std::span<const int32_t> group_windows, int64_t num_blocks, int block_size,
                              int64_t max_step_tokens, int64_t limit) {
  // max_blocks_per_request grows with num_tokens: the largest fitting length by bisection.
  int64_t lo = 0, hi = limit;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (max_blocks_per_request(group_windows, mid, block_size, max_step_tokens) <= num_blocks) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

std::string kv_cache_groups_summary(std::span<const int32_t> group_windows, int layers_per_group, int64_t num_blocks,
                                    int block_size, int64_t bytes_per_block, int64_t max_model_len,
                                    int64_t max_step_tokens) {
  if (group_windows.size() <= 1 && (group_windows.empty() || group_windows[0] == kFullAttention))
    return kv_cache_summary(num_blocks, block_size, bytes_per_block, max_model_len);
  const double gib = static_cast<double>(num_blocks) * static_cast<double>(bytes_per_block) /
                     static_cast<double>(int64_t{1} << 30);
  // Groups of one kind are equal: one entry per window, in group order.
  std::vector<std::pair<int32_t, int>> kinds;
  for (int32_t window : group_windows) {
    if (kinds.empty() || kinds.back().first != window) kinds.emplace_back(window, 0);
    ++kinds.back().second;
  }
  std::string groups;
  for (const auto& [window, count] : kinds) {
    if (!groups.empty()) groups += ", ";
    if (window == kFullAttention) {
      groups += fmt::format("{} full ({} blocks each at max_model_len)", count,
                            max_blocks_in_group(window, max_model_len, block_size, max_step_tokens));
    } else {
      groups += fmt::format("{} sliding window {} (up to {} blocks each, {} while decoding)", count, window,
                            max_blocks_in_group(window, max_model_len, block_size, max_step_tokens),
                            max_blocks_in_group(window, max_model_len, block_size, 1));
    }
  }
  const double peak = static_cast<double>(num_blocks) /
                      static_cast<double>(max_blocks_per_request(group_windows, max_model_len, block_size, max_step_tokens));
  const double decoding = static_cast<double>(num_blocks) /
                          static_cast<double>(max_blocks_per_request(group_windows, max_model_len, block_size, 1));
  return fmt::format("KV cache: {} blocks of {} tokens x {} layers = {:.2f} GiB; {} layer groups: {}; max concurrency at "
                     "max_model_len = {:.2f} ({:.2f} while decoding)",
                     num_blocks, block_size, layers_per_group, gib, group_windows.size(), groups, peak, decoding);
}

}  // namespace pagellm
