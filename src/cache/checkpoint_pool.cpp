#include "cache/checkpoint_pool.h"

#include "core/check.h"

namespace pagellm {

CheckpointPool::CheckpointPool(int num_checkpoints)
    : state_(static_cast<size_t>(num_checkpoints), State::kFree),
      hash_(static_cast<size_t>(num_checkpoints)),
      lru_at_(static_cast<size_t>(num_checkpoints)) {
  CHECK_MSG(num_checkpoints >= 0, "num_checkpoints={}", num_checkpoints);
  for (int32_t id = num_checkpoints - 1; id >= 0; --id) free_.push_back(id);
}

std::optional<int32_t> CheckpointPool::find(BlockHash hash) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void CheckpointPool::touch(int32_t id) {
  CHECK_MSG(state_.at(static_cast<size_t>(id)) == State::kCached, "touch of uncached checkpoint {}", id);
  lru_.splice(lru_.end(), lru_, lru_at_[static_cast<size_t>(id)]);
}

std::optional<int32_t> CheckpointPool::reserve(RequestId request_id) {
  int32_t id = -1;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();
    uncache(id);
    ++num_evictions_;
  } else {
    return std::nullopt;
  }
  state_[static_cast<size_t>(id)] = State::kPending;
  owner_.emplace(id, request_id);
  return id;
}

void CheckpointPool::publish(int32_t id, BlockHash hash) {
  CHECK_MSG(state_.at(static_cast<size_t>(id)) == State::kPending, "publish of checkpoint {} that is not pending", id);
  owner_.erase(id);
  if (by_hash_.contains(hash)) {
    state_[static_cast<size_t>(id)] = State::kFree;
    free_.push_back(id);
    return;
  }
  state_[static_cast<size_t>(id)] = State::kCached;
  hash_[static_cast<size_t>(id)] = hash;
  by_hash_.emplace(hash, id);
  lru_at_[static_cast<size_t>(id)] = lru_.insert(lru_.end(), id);
}

void CheckpointPool::cancel(RequestId request_id) {
  for (auto it = owner_.begin(); it != owner_.end();) {
    if (it->second != request_id) {
      ++it;
      continue;
    }
    state_[static_cast<size_t>(it->first)] = State::kFree;
    free_.push_back(it->first);
    it = owner_.erase(it);
  }
}

void CheckpointPool::drop(BlockHash hash) {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return;
  const int32_t id = it->second;
  uncache(id);
  state_[static_cast<size_t>(id)] = State::kFree;
  free_.push_back(id);
  ++num_evictions_;
}

void CheckpointPool::drop_all() {
  while (!lru_.empty()) drop(hash_[static_cast<size_t>(lru_.front())]);
}

void CheckpointPool::uncache(int32_t id) {
  by_hash_.erase(hash_[static_cast<size_t>(id)]);
  lru_.erase(lru_at_[static_cast<size_t>(id)]);
}

}  // namespace pagellm
