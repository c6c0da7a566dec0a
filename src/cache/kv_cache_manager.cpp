#include "cache/kv_cache_manager.h"

#include <algorithm>

#include "cache/block_hash.h"
#include "cache/slot_mapping.h"
#include "core/check.h"

namespace pagellm {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config),
      windows_(config.group_windows.empty() ? std::vector<int32_t>{kFullAttention} : config.group_windows),
      pool_(config.num_blocks),
      checkpoints_(config.num_state_checkpoints) {
  CHECK_MSG(config.block_size > 0, "block_size={}", config.block_size);
  if (config.num_state_checkpoints > 0) {
    CHECK_MSG(config.checkpoint_interval_tokens > 0 && config.checkpoint_interval_tokens % config.block_size == 0,
              "checkpoint interval {} tokens, block_size {}", config.checkpoint_interval_tokens, config.block_size);
    pool_.set_hash_drop_listener([this](BlockHash hash) { checkpoints_.drop(hash); });
  }
  for (int32_t window : windows_) CHECK_MSG(window == kFullAttention || window > 0, "group window {}", window);
}

BlockHash KvCacheManager::group_key(BlockHash hash, int group) {
  if (group == 0) return hash;  // one group: the keys of a cache without groups
  const TokenId salt = group;
  return hash_block(hash, std::span<const TokenId>(&salt, 1));
}

int KvCacheManager::num_unreadable_blocks(int group, int64_t next_query_pos) const {
  const int32_t window = windows_[static_cast<size_t>(group)];
  if (window == kFullAttention) return 0;
  const int64_t first_visible = std::max<int64_t>(0, next_query_pos - window + 1);
  return static_cast<int>(first_visible / config_.block_size);
}

CachedPrefix KvCacheManager::lookup_prefix(std::span<const TokenId> token_ids) const {
  CachedPrefix prefix;
  if (!config_.enable_prefix_caching || token_ids.empty()) return prefix;
  const int num_groups = this->num_groups();
  prefix.num_query_tokens = static_cast<int>(token_ids.size());
  // At least one token must stay to compute, so the last token's block is never a hit in full.
  const int max_hit_blocks = static_cast<int>((token_ids.size() - 1) / config_.block_size);
  // Blocks of each group under the hash chain, as far as every full group hits.
  std::vector<std::vector<BlockId>> found(static_cast<size_t>(num_groups));
  std::vector<BlockHash> hashes;
  BlockHash parent = kRootBlockHash;
  for (int i = 0; i < max_hit_blocks; ++i) {
    const BlockHash hash = hash_block(
        parent, token_ids.subspan(static_cast<size_t>(i) * config_.block_size, config_.block_size));
    bool full_groups_hit = true;
    for (int g = 0; g < num_groups && full_groups_hit; ++g) {
      const std::optional<BlockId> block_id = pool_.find_cached(group_key(hash, g));
      if (windows_[static_cast<size_t>(g)] == kFullAttention && !block_id) full_groups_hit = false;
      found[static_cast<size_t>(g)].push_back(block_id.value_or(kNoBlock));
    }
    if (!full_groups_hit) {
      for (auto& blocks : found) blocks.resize(static_cast<size_t>(i));
      break;
    }
    hashes.push_back(hash);
    parent = hash;
  }
  // The longest hit of k blocks whose last window every sliding group still holds: blocks
  // [num_unreadable_blocks(g, k * block_size), k) all found. run[g][i] = found blocks ending at i.
  std::vector<std::vector<int>> run(static_cast<size_t>(num_groups));
  for (int g = 0; g < num_groups; ++g) {
    const std::vector<BlockId>& blocks = found[static_cast<size_t>(g)];
    std::vector<int>& r = run[static_cast<size_t>(g)];
    r.resize(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) r[i] = blocks[i] == kNoBlock ? 0 : (i > 0 ? r[i - 1] : 0) + 1;
  }
  auto every_group_covers = [&](int k) {
    for (int g = 0; g < num_groups; ++g) {
      const int needed = k - num_unreadable_blocks(g, static_cast<int64_t>(k) * config_.block_size);
      if (needed > 0 && run[static_cast<size_t>(g)][static_cast<size_t>(k - 1)] < needed) return false;
    }
    return true;
  };
  // Hybrid models: the hit also needs the GDN state at its end.
  auto checkpoint_at = [&](int k) -> int32_t {
    if (!has_state_checkpoints()) return 0;
    const int64_t end = static_cast<int64_t>(k) * config_.block_size;
    if (end % config_.checkpoint_interval_tokens != 0 ||
        end + config_.min_recompute_tokens > static_cast<int64_t>(token_ids.size()))
      return -1;
    return checkpoints_.find(hashes[static_cast<size_t>(k - 1)]).value_or(-1);
  };
  int num_hit_blocks = static_cast<int>(hashes.size());
  while (num_hit_blocks > 0 && (!every_group_covers(num_hit_blocks) || checkpoint_at(num_hit_blocks) < 0))
    --num_hit_blocks;
  if (has_state_checkpoints() && num_hit_blocks > 0) prefix.state_checkpoint = checkpoint_at(num_hit_blocks);
  prefix.block_hashes.assign(hashes.begin(), hashes.begin() + num_hit_blocks);
  prefix.block_ids.resize(static_cast<size_t>(num_groups));
  for (int g = 0; g < num_groups; ++g) {
    const int unreadable = num_unreadable_blocks(g, static_cast<int64_t>(num_hit_blocks) * config_.block_size);
    std::vector<BlockId>& ids = prefix.block_ids[static_cast<size_t>(g)];
    ids.assign(found[static_cast<size_t>(g)].begin(), found[static_cast<size_t>(g)].begin() + num_hit_blocks);
    std::fill(ids.begin(), ids.begin() + std::min(unreadable, num_hit_blocks), kNoBlock);
  }
  prefix.num_cached_tokens = num_hit_blocks * config_.block_size;
  return prefix;
}

void KvCacheManager::release_unreadable(RequestBlocks& blocks, int64_t next_query_pos) {
  for (int g = 0; g < num_groups(); ++g) {
    std::vector<BlockId>& table = blocks.tables[static_cast<size_t>(g)];
    int end = std::min(num_unreadable_blocks(g, next_query_pos), static_cast<int>(table.size()));
    // A block's content is worth caching: it leaves only once offered to the index.
    if (config_.enable_prefix_caching) end = std::min(end, static_cast<int>(blocks.block_hashes.size()));
    int& first_held = blocks.first_held[static_cast<size_t>(g)];
    for (; first_held < end; ++first_held) {
      BlockId& block = table[static_cast<size_t>(first_held)];
      CHECK(block != kNoBlock);
      pool_.release(block);
      block = kNoBlock;
    }
  }
}

bool KvCacheManager::allocate(RequestId request_id, int num_tokens_computed, int num_new_tokens,
                              const CachedPrefix* prefix) {
  CHECK(num_tokens_computed >= 0 && num_new_tokens >= 0);
  const auto it = tables_.find(request_id);
  const bool is_new = it == tables_.end();
  const bool has_prefix = prefix != nullptr && prefix->num_cached_tokens > 0;
  CHECK_MSG(!has_prefix || is_new, "request {} already holds blocks; a prefix is for admission",
            request_id);
  CHECK_MSG(!has_prefix || num_tokens_computed == prefix->num_cached_tokens,
            "request {}: {} tokens computed but the prefix holds {}", request_id,
            num_tokens_computed, prefix ? prefix->num_cached_tokens : 0);
  CHECK_MSG(!has_prefix || static_cast<int>(prefix->block_ids.size()) == num_groups(),
            "a prefix of {} groups for a cache of {}", prefix->block_ids.size(), num_groups());
  if (!is_new) release_unreadable(it->second, num_tokens_computed);

  const int num_prefix_blocks = has_prefix ? static_cast<int>(prefix->block_hashes.size()) : 0;
  const int num_blocks_wanted =
      num_blocks_for_tokens(static_cast<int64_t>(num_tokens_computed) + num_new_tokens,
                            config_.block_size);
  int num_blocks_needed = 0;  // from the free queue: fresh ones, and hits on free cached ones
  for (int g = 0; g < num_groups(); ++g) {
    const int num_covered =
        is_new ? num_prefix_blocks : static_cast<int>(it->second.tables[static_cast<size_t>(g)].size());
    num_blocks_needed += std::max(0, num_blocks_wanted - num_covered);
    if (!has_prefix) continue;
    for (BlockId b : prefix->block_ids[static_cast<size_t>(g)])
      if (b != kNoBlock && pool_.ref_count(b) == 0) ++num_blocks_needed;
  }
  if (num_blocks_needed > pool_.num_free_blocks()) return false;

  RequestBlocks& blocks = tables_[request_id];
  if (is_new) {
    blocks.tables.assign(static_cast<size_t>(num_groups()), {});
    blocks.first_held.assign(static_cast<size_t>(num_groups()), 0);
  }
  if (has_prefix) {
    for (int g = 0; g < num_groups(); ++g) {
      const std::vector<BlockId>& ids = prefix->block_ids[static_cast<size_t>(g)];
      CHECK(static_cast<int>(ids.size()) == num_prefix_blocks);
      int& first_held = blocks.first_held[static_cast<size_t>(g)];
      while (first_held < num_prefix_blocks && ids[static_cast<size_t>(first_held)] == kNoBlock) ++first_held;
      for (int i = first_held; i < num_prefix_blocks; ++i) {
        CHECK_MSG(ids[static_cast<size_t>(i)] != kNoBlock, "prefix block {} of group {} is missing", i, g);
        pool_.take_ref(ids[static_cast<size_t>(i)]);  // before allocate(): no self-eviction
      }
      blocks.tables[static_cast<size_t>(g)] = ids;
    }
    blocks.block_hashes = prefix->block_hashes;
    if (prefix->state_checkpoint >= 0) checkpoints_.touch(prefix->state_checkpoint);
  }
  for (std::vector<BlockId>& table : blocks.tables)
    while (static_cast<int>(table.size()) < num_blocks_wanted) table.push_back(pool_.allocate());
  if (is_new && prefix != nullptr && config_.enable_prefix_caching) {
    num_prefix_query_tokens_ += prefix->num_query_tokens;
    num_prefix_hit_tokens_ += prefix->num_cached_tokens;
  }
  return true;
}

void KvCacheManager::cache_computed_blocks(RequestId request_id,
                                           std::span<const TokenId> token_ids,
                                           int num_tokens_computed, int num_cacheable_tokens) {
  const auto it = tables_.find(request_id);
  CHECK_MSG(it != tables_.end(), "cache_computed_blocks: unknown request {}", request_id);
  CHECK(num_tokens_computed >= 0 && static_cast<size_t>(num_tokens_computed) <= token_ids.size());
  RequestBlocks& blocks = it->second;
  if (config_.enable_prefix_caching) {
    const int num_full_blocks = std::min(num_tokens_computed, num_cacheable_tokens) / config_.block_size;
    CHECK(num_full_blocks <= static_cast<int>(blocks.tables[0].size()));
    const int num_already_offered = static_cast<int>(blocks.block_hashes.size());
    extend_block_hashes(token_ids, config_.block_size, num_full_blocks, blocks.block_hashes);
    for (int i = num_already_offered; i < num_full_blocks; ++i) {
      for (int g = 0; g < num_groups(); ++g) {
        const BlockId block = blocks.tables[static_cast<size_t>(g)][static_cast<size_t>(i)];
        if (block == kNoBlock) continue;
        // false = the same content is already cached in another block; ours stays private.
        (void)pool_.register_hash(block, group_key(blocks.block_hashes[static_cast<size_t>(i)], g));
      }
    }
  }
  release_unreadable(blocks, num_tokens_computed);
}

void KvCacheManager::free(RequestId request_id) {
  checkpoints_.cancel(request_id);
  const auto it = tables_.find(request_id);
  if (it == tables_.end()) return;
  // Last position first (across groups), so a chain's tail is evicted before its head.
  const std::vector<std::vector<BlockId>>& tables = it->second.tables;
  size_t longest = 0;
  for (const auto& table : tables) longest = std::max(longest, table.size());
  for (size_t i = longest; i-- > 0;) {
    for (const auto& table : tables)
      if (i < table.size() && table[i] != kNoBlock) pool_.release(table[i]);
  }
  tables_.erase(it);
}

void KvCacheManager::trim(RequestId request_id, int num_tokens) {
  const auto it = tables_.find(request_id);
  CHECK_MSG(it != tables_.end(), "trim: unknown request {}", request_id);
  const size_t num_kept = static_cast<size_t>(num_blocks_for_tokens(num_tokens, config_.block_size));
  CHECK_MSG(num_kept >= it->second.block_hashes.size(), "trim: request {} would drop blocks of the prefix index",
            request_id);
  for (std::vector<BlockId>& table : it->second.tables) {
    while (table.size() > num_kept) {
      if (table.back() != kNoBlock) pool_.release(table.back());
      table.pop_back();
    }
  }
}

std::span<const BlockId> KvCacheManager::block_table(RequestId request_id, int group) const {
  const auto it = tables_.find(request_id);
  CHECK_MSG(it != tables_.end(), "block_table: unknown request {}", request_id);
  CHECK(group >= 0 && group < num_groups());
  return it->second.tables[static_cast<size_t>(group)];
}

int KvCacheManager::num_blocks_held(RequestId request_id, int group) const {
  const auto it = tables_.find(request_id);
  CHECK_MSG(it != tables_.end(), "num_blocks_held: unknown request {}", request_id);
  return static_cast<int>(it->second.tables[static_cast<size_t>(group)].size()) -
         it->second.first_held[static_cast<size_t>(group)];
}

int KvCacheManager::num_blocks_held(RequestId request_id) const {
  int total = 0;
  for (int g = 0; g < num_groups(); ++g) total += num_blocks_held(request_id, g);
  return total;
}

double KvCacheManager::prefix_hit_rate() const {
  if (num_prefix_query_tokens_ == 0) return 0.0;
  return static_cast<double>(num_prefix_hit_tokens_) / static_cast<double>(num_prefix_query_tokens_);
}

bool KvCacheManager::is_leak_free() const {
  return tables_.empty() && pool_.num_used_blocks() == 0 && pool_.all_refs_zero() && checkpoints_.is_leak_free();
}

std::vector<PlannedCheckpoint> KvCacheManager::reserve_checkpoints(RequestId request_id, int start_pos, int end_pos,
                                                                   int num_cacheable_tokens) {
  std::vector<PlannedCheckpoint> planned;
  if (!has_state_checkpoints() || !config_.enable_prefix_caching) return planned;
  const int interval = config_.checkpoint_interval_tokens;
  const int last = std::min(end_pos, num_cacheable_tokens);
  for (int c = (start_pos / interval + 1) * interval; c <= last; c += interval) {
    const std::optional<int32_t> id = checkpoints_.reserve(request_id);
    if (!id) break;
    planned.push_back({c, *id});
  }
  return planned;
}

void KvCacheManager::publish_checkpoints(RequestId request_id, std::span<const PlannedCheckpoint> checkpoints) {
  if (checkpoints.empty()) return;
  const auto it = tables_.find(request_id);
  CHECK_MSG(it != tables_.end(), "publish_checkpoints: unknown request {}", request_id);
  const std::vector<BlockHash>& hashes = it->second.block_hashes;
  for (const PlannedCheckpoint& planned : checkpoints) {
    const size_t block = static_cast<size_t>(planned.num_tokens / config_.block_size) - 1;
    CHECK_MSG(block < hashes.size(), "request {}: checkpoint at {} tokens before its block is offered", request_id,
              planned.num_tokens);
    checkpoints_.publish(planned.checkpoint, hashes[block]);
  }
}

}  // namespace pagellm
