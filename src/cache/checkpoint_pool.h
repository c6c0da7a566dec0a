// CheckpointPool: the prefix cache's GDN state checkpoints (hybrid models), beside the BlockPool's KV
// blocks. A checkpoint is the conv + recurrent state of every GDN layer after the first c tokens of a
// prompt (c a multiple of the checkpoint interval); it is keyed by the block-hash chain value of the
// block that ends at c, so it names the whole prefix [0, c) exactly as the KV blocks do.
//
// A checkpoint id is an index in [0, num_checkpoints); the runner stores checkpoint i in the state
// tensors' row first_checkpoint_slot + i (cache/state_cache.h). Each id is in one of three states:
//
//   free       no content; handed out first by reserve()
//   pending    reserved for a request's step that writes it; not findable until publish()
//   cached     indexed under its hash; on the LRU list (least recently used first)
//
// Eviction is coherent with the KV blocks: when the BlockPool evicts a block (its hash leaves the
// index) the checkpoint under that hash goes too (drop()), and reserve() on a full pool evicts the
// least recently used checkpoint (touched when published and when a prefix hit restores it).
// Restoring copies the checkpoint into the request's own state slot, so a hit holds no reference.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cache/ids.h"

namespace pagellm {

// A GDN state checkpoint a step writes: the state after position `num_tokens` - 1 goes to checkpoint
// `checkpoint` (an id of the CheckpointPool).
struct PlannedCheckpoint {
  int num_tokens = 0;
  int32_t checkpoint = -1;
};

class CheckpointPool {
 public:
  explicit CheckpointPool(int num_checkpoints);

  CheckpointPool(const CheckpointPool&) = delete;
  CheckpointPool& operator=(const CheckpointPool&) = delete;

  int num_checkpoints() const { return static_cast<int>(state_.size()); }
  int num_cached() const { return static_cast<int>(by_hash_.size()); }
  int num_pending() const { return static_cast<int>(owner_.size()); }
  int64_t num_evictions() const { return num_evictions_; }

  // The cached checkpoint under `hash`, if any.
  std::optional<int32_t> find(BlockHash hash) const;
  // Marks a cached checkpoint most recently used (a prefix hit restores it).
  void touch(int32_t id);

  // A checkpoint for `request_id` to write: a free one, else the least recently used cached one
  // (evicted). nullopt when every checkpoint is pending.
  std::optional<int32_t> reserve(RequestId request_id);
  // The pending checkpoint's content is written: index it under `hash`. When another checkpoint
  // already holds that hash (the same prefix computed twice) this one goes back to the free list.
  void publish(int32_t id, BlockHash hash);
  // Gives back every checkpoint `request_id` still has pending (finish, abort, preemption).
  void cancel(RequestId request_id);

  // The KV block under `hash` was evicted: its checkpoint (if any) is useless now.
  void drop(BlockHash hash);
  // Forgets every cached checkpoint (reset_prefix_cache).
  void drop_all();

  // Leak check: nothing pending.
  bool is_leak_free() const { return owner_.empty(); }

 private:
  enum class State : uint8_t { kFree, kPending, kCached };
  void uncache(int32_t id);

  std::vector<State> state_;                       // [num_checkpoints]
  std::vector<BlockHash> hash_;                    // [num_checkpoints], valid while cached
  std::vector<std::list<int32_t>::iterator> lru_at_;  // [num_checkpoints], valid while cached
  std::list<int32_t> lru_;                         // cached ids, least recently used first
  std::vector<int32_t> free_;                      // a stack of free ids
  std::unordered_map<BlockHash, int32_t> by_hash_;
  std::unordered_map<int32_t, RequestId> owner_;   // pending id -> request
  int64_t num_evictions_ = 0;
};

}  // namespace pagellm
