// KvCacheManager: per-request block tables over a BlockPool, with automatic prefix caching, for one
// or several KV cache groups (kv_cache_groups.h: full-attention groups and sliding-window groups).
//
// Life of a request's blocks (one full group, block_size 4, prompt of 10 tokens, one cached block
// from another request with the same first 4 tokens):
//
//   lookup_prefix(tokens)               -> CachedPrefix{blocks [7], 4 tokens}       no refs yet
//   allocate(id, 4, 6, &prefix)         -> table [7, 2, 3]: 7 shared (ref 2), 2 and 3 fresh
//       positions  0 1 2 3 | 4 5 6 7 | 8 9
//       blocks     7       | 2       | 3 (half full)
//   ... the model computes positions 4..9 ...
//   cache_computed_blocks(id, tokens, 10) -> block 2 (full, computed) enters the index; 3 is partial
//   allocate(id, 10, 1)                   -> position 10 fits in block 3: nothing new
//   free(id)                              -> refs drop; 7 and 2 stay cached in the LRU, 3 is plain free
//
// Sliding groups (window W): a query at position p reads keys [p - W + 1, p], so once a request's
// next query starts at position s (= its num_tokens_computed), its blocks whose last position is
// < s - W + 1 are never read again. They go back to the pool (cached ones into the LRU, still
// hittable) and their table entries become kNoBlock; every attention kernel reads the block table
// only at visible keys, so it never sees those entries. W = 8, blocks of 4, s = 14:
//
//   positions   0..3   4..7   8..11  12..15          first visible key: 14 - 8 + 1 = 7
//   table       -1     5      9      2               block 0 (positions 0..3 < 7) released
//
// Releases happen in allocate() (before counting what the step needs) and in cache_computed_blocks().
// With prefix caching on, a block is released only after it was offered to the prefix index (its
// tokens computed and committed), so an async step that plans ahead never drops a block's content
// before it could be cached.
//
// Capacity is a return value: allocate() returns false, leaving nothing allocated, when the pool
// cannot cover the request; the scheduler then preempts. Wrong use (unknown ids, double free) CHECKs.
//
// Prefix rules (as vLLM): only full blocks are keyed (block_hash.h); a lookup never covers the whole
// sequence, so at least its last token is computed and produces logits; blocks enter the index only
// after their tokens have been computed (cache_computed_blocks), so a hit never reads unwritten KV.
// Each group keys its blocks by the hash chain salted with the group index (group 0 unsalted). A hit
// of N tokens needs every full group's blocks of [0, N) and every sliding group's blocks of
// [N - W + 1, N) still cached; the lookup shortens the hit until all groups have theirs.
//
// Hybrid models (num_state_checkpoints > 0): the GDN layers need their state at the hit point too,
// so a hit of N tokens also needs a GDN state checkpoint (checkpoint_pool.h) under the hash of the
// block ending at N, N a multiple of checkpoint_interval_tokens, and leaves at least
// min_recompute_tokens to compute; the lookup shortens the hit to the newest such checkpoint.
// Checkpoints are reserved when a step is planned (reserve_checkpoints), published when it commits
// (publish_checkpoints) and cancelled by free(); a KV block's eviction drops its checkpoint.
#pragma once

#include <climits>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"
#include "cache/checkpoint_pool.h"
#include "cache/ids.h"
#include "cache/kv_cache_groups.h"

namespace pagellm {

struct KvCacheConfig {
  int num_blocks = 0;
  int block_size = 16;  // tokens per block
  bool enable_prefix_caching = true;
  // [G]: kFullAttention (-1) or the sliding window in tokens of each group (KvCacheGroups::windows).
  // Empty = one full-attention group.
  std::vector<int32_t> group_windows{};
  // Hybrid models: GDN state checkpoints in the prefix cache (0 = none; a hybrid model with
  // prefix caching needs them). The interval is a multiple of block_size.
  int num_state_checkpoints = 0;
  int checkpoint_interval_tokens = 0;
  int min_recompute_tokens = 1;  // a hit leaves at least this many tokens to compute
};

// The longest run of leading full blocks of a token sequence whose content is already cached.
// A view of the pool at lookup time: pass it to allocate() before anything else touches the pool.
struct CachedPrefix {
  // [G][num_hit_blocks], in position order; kNoBlock where a sliding group no longer needs the block.
  std::vector<std::vector<BlockId>> block_ids;
  std::vector<BlockHash> block_hashes;  // [num_hit_blocks], the hash chain of the tokens
  int num_cached_tokens = 0;            // num_hit_blocks * block_size
  int num_query_tokens = 0;             // length of the looked-up sequence (hit-rate denominator)
  int32_t state_checkpoint = -1;        // hybrid models: the checkpoint at num_cached_tokens
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);

  int block_size() const { return config_.block_size; }
  int num_groups() const { return static_cast<int>(windows_.size()); }
  int32_t group_window(int group) const { return windows_.at(static_cast<size_t>(group)); }
  int num_blocks() const { return pool_.num_blocks(); }
  int num_free_blocks() const { return pool_.num_free_blocks(); }
  int num_used_blocks() const { return pool_.num_used_blocks(); }
  bool prefix_caching_enabled() const { return config_.enable_prefix_caching; }

  // Cached leading full blocks of `token_ids` (a request's prompt, or prompt + outputs when it
  // resumes after preemption). Covers at most token_ids.size() - 1 tokens. Takes no references:
  // allocate() takes them, so a request that cannot be admitted leaves the LRU order untouched.
  // Empty when prefix caching is off.
  CachedPrefix lookup_prefix(std::span<const TokenId> token_ids) const;

  // Makes request_id's block tables cover positions [0, num_tokens_computed + num_new_tokens).
  // A request seen for the first time may start from `prefix` (from lookup_prefix, just now): its
  // blocks head the tables (one reference each) and num_tokens_computed must equal
  // prefix->num_cached_tokens. First releases the sliding groups' blocks that the queries from
  // num_tokens_computed on cannot see (this happens whatever the outcome); then returns false and
  // changes nothing else when there are not enough blocks.
  bool allocate(RequestId request_id, int num_tokens_computed, int num_new_tokens,
                const CachedPrefix* prefix = nullptr);

  // The request's tokens at positions [0, num_tokens_computed) now hold KV: its newly full blocks
  // enter the prefix index; then its sliding groups release the blocks that queries from
  // num_tokens_computed on cannot see. token_ids = the request's tokens (prompt + outputs), at least
  // that many. Call it only when no step planned for the request starts before num_tokens_computed.
  // num_cacheable_tokens caps what enters the index (hybrid models: the prompt, whose GDN state
  // was computed in prefill form, never decode tokens).
  void cache_computed_blocks(RequestId request_id, std::span<const TokenId> token_ids,
                             int num_tokens_computed, int num_cacheable_tokens = INT32_MAX);

  // Hybrid models: checkpoints for a step that computes positions [start_pos, end_pos) of a request
  // (start_pos on a GDN chunk boundary), one per interval multiple in (start_pos, min(end_pos,
  // num_cacheable_tokens)], while the pool has one to give. Empty without checkpoints.
  std::vector<PlannedCheckpoint> reserve_checkpoints(RequestId request_id, int start_pos, int end_pos,
                                                     int num_cacheable_tokens);
  // The step wrote them: each enters the index under the hash of the block ending at its position
  // (cache_computed_blocks for that position must have run).
  void publish_checkpoints(RequestId request_id, std::span<const PlannedCheckpoint> checkpoints);
  bool has_state_checkpoints() const { return checkpoints_.num_checkpoints() > 0; }
  const CheckpointPool& checkpoints() const { return checkpoints_; }

  // Speculative decoding: the request keeps KV for positions [0, num_tokens) only (rejected drafts
  // past it are dropped); table entries past ceil(num_tokens / block_size) go back to the pool.
  void trim(RequestId request_id, int num_tokens);

  // Drops the request's references (last block first, so a chain's tail is evicted before its head).
  // Cached full blocks wait in the LRU for a later hit. No-op for an unknown id.
  void free(RequestId request_id);

  bool has_request(RequestId request_id) const { return tables_.contains(request_id); }
  // Group `group`'s table, [ceil(covered positions / block_size)], kNoBlock where a sliding group
  // released a block; valid until the next call that changes this request.
  std::span<const BlockId> block_table(RequestId request_id, int group = 0) const;
  // Blocks the request holds now (entries other than kNoBlock), in one group or in all.
  int num_blocks_held(RequestId request_id, int group) const;
  int num_blocks_held(RequestId request_id) const;

  // Prefix-cache accounting, in tokens, over admissions (allocate with a prefix).
  int64_t num_prefix_query_tokens() const { return num_prefix_query_tokens_; }
  int64_t num_prefix_hit_tokens() const { return num_prefix_hit_tokens_; }
  double prefix_hit_rate() const;  // hits / queries; 0 before any query
  int64_t num_evictions() const { return pool_.num_evictions(); }
  int num_cached_blocks() const { return pool_.num_cached_blocks(); }

  // Forgets cached content of free blocks (benchmark passes that must start cold).
  void reset_prefix_cache() { pool_.evict_all_free_cached(); }

  // Leak check: no request holds blocks, every ref count is zero, no checkpoint pending.
  bool is_leak_free() const;

  const BlockPool& pool() const { return pool_; }

 private:
  struct RequestBlocks {
    std::vector<std::vector<BlockId>> tables;  // [G] block tables; entries [0, first_held[g]) are kNoBlock
    std::vector<int> first_held;               // [G]: index of the first entry still held
    std::vector<BlockHash> block_hashes;       // chain over the leading blocks already offered to the index
  };

  // Entries of group g that queries from position `next_query_pos` on never read: [0, this).
  int num_unreadable_blocks(int group, int64_t next_query_pos) const;
  // Releases group blocks of `blocks` that are unreadable from next_query_pos on (and, with prefix
  // caching, already offered to the index).
  void release_unreadable(RequestBlocks& blocks, int64_t next_query_pos);
  // The key group g's block of this hash chain value is indexed under.
  static BlockHash group_key(BlockHash hash, int group);

  KvCacheConfig config_;
  std::vector<int32_t> windows_;  // [G]
  BlockPool pool_;
  CheckpointPool checkpoints_;
  std::unordered_map<RequestId, RequestBlocks> tables_;
  int64_t num_prefix_query_tokens_ = 0;
  int64_t num_prefix_hit_tokens_ = 0;
};

}  // namespace pagellm
