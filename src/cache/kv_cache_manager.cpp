#include "cache/kv_cache_manager.h"

#include "cache/block_hash.h"
#include "cache/slot_mapping.h"
#include "core/check.h"

namespace pagellm {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config), pool_(config.num_blocks) {
  CHECK_MSG(config.block_size > 0, "block_size={}", config.block_size);
}

CachedPrefix KvCacheManager::lookup_prefix(std::span<const TokenId> token_ids) const {
  CachedPrefix prefix;
  if (!config_.enable_prefix_caching || token_ids.empty()) return prefix;
  prefix.num_query_tokens = static_cast<int>(token_ids.size());
  // At least one token must stay to compute, so the last token's block is never a hit in full.
  const int max_hit_blocks = static_cast<int>((token_ids.size() - 1) / config_.block_size);
  BlockHash parent = kRootBlockHash;
  for (int i = 0; i < max_hit_blocks; ++i) {
    const BlockHash hash = hash_block(
        parent, token_ids.subspan(static_cast<size_t>(i) * config_.block_size, config_.block_size));
    const std::optional<BlockId> block_id = pool_.find_cached(hash);
    if (!block_id) break;
    prefix.block_ids.push_back(*block_id);
    prefix.block_hashes.push_back(hash);
    parent = hash;
  }
  prefix.num_cached_tokens = static_cast<int>(prefix.block_ids.size()) * config_.block_size;
  return prefix;
}

bool KvCacheManager::allocate(RequestId request_id, int num_tokens_computed, int num_new_tokens,
                              const CachedPrefix* prefix) {
  CHECK(num_tokens_computed >= 0 && num_new_tokens >= 0);
  const auto it = tables_.find(request_id);
  const bool is_new = it == tables_.end();
  const bool has_prefix = prefix != nullptr && !prefix->block_ids.empty();
  CHECK_MSG(!has_prefix || is_new, "request {} already holds blocks; a prefix is for admission",
            request_id);
  CHECK_MSG(!has_prefix || num_tokens_computed == prefix->num_cached_tokens,
            "request {}: {} tokens computed but the prefix holds {}", request_id,
            num_tokens_computed, prefix ? prefix->num_cached_tokens : 0);

  const int num_blocks_held = is_new ? 0 : static_cast<int>(it->second.block_ids.size());
  const int num_prefix_blocks = has_prefix ? static_cast<int>(prefix->block_ids.size()) : 0;
  const int num_blocks_wanted =
      num_blocks_for_tokens(static_cast<int64_t>(num_tokens_computed) + num_new_tokens,
                            config_.block_size);
  const int num_fresh_blocks =
      std::max(0, num_blocks_wanted - num_blocks_held - num_prefix_blocks);
  // A hit on a free cached block takes it off the free queue too.
  int num_prefix_blocks_free = 0;
  for (int i = 0; i < num_prefix_blocks; ++i) {
    if (pool_.ref_count(prefix->block_ids[i]) == 0) ++num_prefix_blocks_free;
  }
  if (num_fresh_blocks + num_prefix_blocks_free > pool_.num_free_blocks()) return false;

  RequestBlocks& blocks = tables_[request_id];
  if (has_prefix) {
    for (BlockId b : prefix->block_ids) pool_.take_ref(b);  // before allocate(): no self-eviction
    blocks.block_ids = prefix->block_ids;
    blocks.block_hashes = prefix->block_hashes;
  }
  for (int i = 0; i < num_fresh_blocks; ++i) blocks.block_ids.push_back(pool_.allocate());
  if (is_new && prefix != nullptr && config_.enable_prefix_caching) {
    num_prefix_query_tokens_ += prefix->num_query_tokens;
    num_prefix_hit_tokens_ += prefix->num_cached_tokens;
  }
  return true;
}

void KvCacheManager::cache_computed_blocks(RequestId request_id,
                                           std::span<const TokenId> token_ids,
                                           int num_tokens_computed) {
  if (!config_.enable_prefix_caching) return;
  const auto it = tables_.find(request_id);
  CHECK_MSG(it != tables_.end(), "cache_computed_blocks: unknown request {}", request_id);
  CHECK(num_tokens_computed >= 0 && static_cast<size_t>(num_tokens_computed) <= token_ids.size());
  RequestBlocks& blocks = it->second;
  const int num_full_blocks = num_tokens_computed / config_.block_size;
  CHECK(num_full_blocks <= static_cast<int>(blocks.block_ids.size()));
  const int num_already_offered = static_cast<int>(blocks.block_hashes.size());
  extend_block_hashes(token_ids, config_.block_size, num_full_blocks, blocks.block_hashes);
  for (int i = num_already_offered; i < num_full_blocks; ++i) {
    // false = the same content is already cached in another block; ours stays private.
    (void)pool_.register_hash(blocks.block_ids[i], blocks.block_hashes[i]);
  }
}

void KvCacheManager::free(RequestId request_id) {
  const auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  const std::vector<BlockId>& block_ids = it->second.block_ids;
  for (auto b = block_ids.rbegin(); b != block_ids.rend(); ++b) pool_.release(*b);
  tables_.erase(it);
}

std::span<const BlockId> KvCacheManager::block_table(RequestId request_id) const {
  const auto it = tables_.find(request_id);
  CHECK_MSG(it != tables_.end(), "block_table: unknown request {}", request_id);
  return it->second.block_ids;
}

double KvCacheManager::prefix_hit_rate() const {
  if (num_prefix_query_tokens_ == 0) return 0.0;
  return static_cast<double>(num_prefix_hit_tokens_) / static_cast<double>(num_prefix_query_tokens_);
}

bool KvCacheManager::is_leak_free() const {
  return tables_.empty() && pool_.num_used_blocks() == 0 && pool_.all_refs_zero();
}

}  // namespace pagellm
