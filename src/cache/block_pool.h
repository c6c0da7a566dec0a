// BlockPool: the fixed set of KV blocks, their reference counts, and the prefix-cache index.
//
// Every block is in exactly one of three states:
//
//   in use      ref_count > 0; owned by one or more requests (shared ones hold cached content)
//   free        ref_count == 0, no hash; on the free queue, handed out first
//   free+cached ref_count == 0, hash kept; on the free queue behind the plain free blocks, in
//               least-recently-freed order; reusable by a prefix hit until evicted
//
// The free queue is one intrusive doubly linked list over block ids:
//
//   head ─▶ [plain free blocks, any order] ─▶ [cached blocks, least recently freed first] ◀─ tail
//
// allocate() pops the head. When the head is a cached block it is evicted then: its hash leaves
// the index. So cached content survives as long as any plain free block is left, and the oldest
// cached block goes first (LRU). take_ref() on a free cached block (a prefix hit) unlinks it in O(1).
// The pool knows nothing about tokens or requests; KvCacheManager does.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cache/ids.h"

namespace pagellm {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_blocks() const { return static_cast<int>(ref_counts_.size()); }
  int num_free_blocks() const { return num_free_blocks_; }  // includes free+cached blocks
  int num_used_blocks() const { return num_blocks() - num_free_blocks_; }
  int num_cached_blocks() const { return static_cast<int>(block_by_hash_.size()); }
  int64_t num_evictions() const { return num_evictions_; }

  // Takes the head of the free queue with ref_count 1, evicting its cached hash if it has one.
  // Precondition: num_free_blocks() > 0 (the caller checks capacity first; CHECKed).
  BlockId allocate();

  // One more owner of `block_id`. A free block (a prefix hit on cached content) leaves the free queue.
  void take_ref(BlockId block_id);

  // One owner fewer. At zero the block joins the free queue: at the tail when it is cached (most
  // recently used, evicted last), at the head when it is not (reused first).
  void release(BlockId block_id);

  // The block holding content with this hash chain value, in use or free.
  std::optional<BlockId> find_cached(BlockHash hash) const;

  // Publishes the content of an in-use, unhashed block under `hash`. Returns false (and changes
  // nothing) when another block already holds that hash: identical content computed twice.
  bool register_hash(BlockId block_id, BlockHash hash);

  // Forgets all hashes of free blocks (e.g. between benchmark passes). In-use blocks keep theirs.
  void evict_all_free_cached();

  int ref_count(BlockId block_id) const { return ref_counts_.at(block_id); }
  bool is_cached(BlockId block_id) const { return hashes_.at(block_id).has_value(); }

  // True when no block is referenced: the leak check for tests and shutdown.
  bool all_refs_zero() const;

  // Called with each hash that leaves the index (eviction, evict_all_free_cached): what is keyed by
  // the same chain value elsewhere (a GDN state checkpoint) goes with it.
  void set_hash_drop_listener(std::function<void(BlockHash)> listener) { on_hash_dropped_ = std::move(listener); }

 private:
  void link_front(BlockId block_id);
  void link_back(BlockId block_id);
  void unlink(BlockId block_id);
  void drop_hash(BlockId block_id);

  std::vector<int32_t> ref_counts_;                 // [num_blocks]
  std::vector<std::optional<BlockHash>> hashes_;    // [num_blocks]; set while content is indexed
  std::unordered_map<BlockHash, BlockId> block_by_hash_;
  // Free queue links; index num_blocks is the sentinel (its next is the head, its prev the tail).
  std::vector<BlockId> next_, prev_;                // [num_blocks + 1]
  int num_free_blocks_ = 0;
  int64_t num_evictions_ = 0;
  std::function<void(BlockHash)> on_hash_dropped_;
};

}  // namespace pagellm
