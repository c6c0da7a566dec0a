#include "cache/block_pool.h"

#include <algorithm>

#include "core/check.h"

namespace pagellm {

BlockPool::BlockPool(int num_blocks)
    : ref_counts_(num_blocks, 0),
      hashes_(num_blocks),
      next_(num_blocks + 1),
      prev_(num_blocks + 1) {
  CHECK_MSG(num_blocks > 0, "num_blocks={}", num_blocks);
  const BlockId sentinel = num_blocks;
  next_[sentinel] = prev_[sentinel] = sentinel;
  for (BlockId b = 0; b < num_blocks; ++b) link_back(b);
}

BlockId BlockPool::allocate() {
  CHECK_MSG(num_free_blocks_ > 0, "allocate() on an exhausted pool; check capacity first");
  const BlockId block_id = next_[num_blocks()];
  unlink(block_id);
  if (hashes_[block_id].has_value()) {
    drop_hash(block_id);
    ++num_evictions_;
  }
  ref_counts_[block_id] = 1;
  return block_id;
}

void BlockPool::take_ref(BlockId block_id) {
  CHECK(block_id >= 0 && block_id < num_blocks());
  if (ref_counts_[block_id] == 0) {
    // Only cached content is worth reviving; a plain free block must come from allocate().
    CHECK_MSG(hashes_[block_id].has_value(), "take_ref on free uncached block {}", block_id);
    unlink(block_id);
  }
  ++ref_counts_[block_id];
}

void BlockPool::release(BlockId block_id) {
  CHECK(block_id >= 0 && block_id < num_blocks());
  CHECK_MSG(ref_counts_[block_id] > 0, "double release of block {}", block_id);
  if (--ref_counts_[block_id] > 0) return;
  if (hashes_[block_id].has_value()) {
    link_back(block_id);
  } else {
    link_front(block_id);
  }
}

std::optional<BlockId> BlockPool::find_cached(BlockHash hash) const {
  const auto it = block_by_hash_.find(hash);
  if (it == block_by_hash_.end()) return std::nullopt;
  return it->second;
}

bool BlockPool::register_hash(BlockId block_id, BlockHash hash) {
  CHECK(block_id >= 0 && block_id < num_blocks());
  CHECK_MSG(ref_counts_[block_id] > 0, "register_hash on free block {}", block_id);
  CHECK_MSG(!hashes_[block_id].has_value(), "block {} is already hashed", block_id);
  if (!block_by_hash_.emplace(hash, block_id).second) return false;
  hashes_[block_id] = hash;
  return true;
}

void BlockPool::evict_all_free_cached() {
  for (BlockId b = 0; b < num_blocks(); ++b) {
    if (ref_counts_[b] == 0 && hashes_[b].has_value()) {
      drop_hash(b);
      // Now a plain free block: move it to the front, where plain free blocks live.
      unlink(b);
      link_front(b);
    }
  }
}

bool BlockPool::all_refs_zero() const {
  return std::all_of(ref_counts_.begin(), ref_counts_.end(), [](int32_t r) { return r == 0; });
}

void BlockPool::link_front(BlockId block_id) {
  const BlockId sentinel = num_blocks();
  const BlockId old_head = next_[sentinel];
  next_[block_id] = old_head;
  prev_[block_id] = sentinel;
  prev_[old_head] = block_id;
  next_[sentinel] = block_id;
  ++num_free_blocks_;
}

void BlockPool::link_back(BlockId block_id) {
  const BlockId sentinel = num_blocks();
  const BlockId old_tail = prev_[sentinel];
  prev_[block_id] = old_tail;
  next_[block_id] = sentinel;
  next_[old_tail] = block_id;
  prev_[sentinel] = block_id;
  ++num_free_blocks_;
}

void BlockPool::unlink(BlockId block_id) {
  next_[prev_[block_id]] = next_[block_id];
  prev_[next_[block_id]] = prev_[block_id];
  next_[block_id] = prev_[block_id] = kNoBlock;
  --num_free_blocks_;
}

void BlockPool::drop_hash(BlockId block_id) {
  const BlockHash hash = *hashes_[block_id];
  block_by_hash_.erase(hash);
  hashes_[block_id].reset();
  if (on_hash_dropped_) on_hash_dropped_(hash);
}

}  // namespace pagellm
