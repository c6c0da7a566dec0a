#include "cache/state_cache.h"

#include "core/check.h"

namespace pagellm {

int64_t state_cache_bytes(const MemorySpec& spec, int num_slots, int num_checkpoints, int num_drafts) {
  return (static_cast<int64_t>(num_slots) * (1 + num_drafts) + 1 + num_checkpoints) * spec.state_bytes_per_slot();
}

StateCache::StateCache(const MemorySpec& spec, Backend& backend, int num_slots, int num_checkpoints, int num_drafts)
    : spec_(spec), backend_(backend), num_slots_(num_slots), num_checkpoints_(num_checkpoints), num_drafts_(num_drafts) {
  CHECK_MSG(spec.is_hybrid() && num_slots >= 1 && num_checkpoints >= 0 && num_drafts >= 0 && spec.gdn_conv_kernel >= 2,
            "state cache of {} slots, {} checkpoints and {} draft slots per slot, {} GDN layers", num_slots,
            num_checkpoints, num_drafts, spec.num_gdn_layers);
  const int64_t rows = static_cast<int64_t>(num_slots) * (1 + num_drafts) + 1 + num_checkpoints,
                history = spec.gdn_conv_kernel - 1;
  for (int64_t l = 0; l < spec.num_gdn_layers; ++l) {
    Tensor conv = backend.alloc({rows, spec.gdn_conv_dim, history}, spec.state_dtype);
    Tensor recurrent = backend.alloc(
        {rows, spec.gdn_num_value_heads, spec.gdn_key_head_dim, spec.gdn_value_head_dim}, DType::kF32);
    views_.push_back({conv.view(), recurrent.view()});
    tensors_.push_back(std::move(conv));
    tensors_.push_back(std::move(recurrent));
  }
  zero_conv_ = Tensor::cpu({1, spec.gdn_conv_dim, history}, spec.state_dtype);
  zero_recurrent_ =
      Tensor::cpu({1, spec.gdn_num_value_heads, spec.gdn_key_head_dim, spec.gdn_value_head_dim}, DType::kF32);
  for (int32_t slot = num_slots - 1; slot >= 0; --slot) free_slots_.push_back(slot);
}

int32_t StateCache::acquire(RequestId id, int32_t restore_checkpoint) {
  CHECK_MSG(!slot_of_request_.contains(id), "request {} already holds state slot {}", id, slot_of_request_.at(id));
  CHECK_MSG(!free_slots_.empty(), "all {} state slots are taken (the scheduler runs at most max_num_seqs)",
            num_slots_);
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  slot_of_request_.emplace(id, slot);
  if (restore_checkpoint < 0) {
    zero(slot);
    return slot;
  }
  CHECK_MSG(restore_checkpoint < num_checkpoints_, "checkpoint {} of {}", restore_checkpoint, num_checkpoints_);
  copy_slot(slot, checkpoint_slot(restore_checkpoint));
  return slot;
}

void StateCache::copy_slot(int32_t to, int32_t from) {
  for (const GdnStateView& layer : views_) {
    backend_.copy(layer.conv.slice_rows(to, to + 1), layer.conv.slice_rows(from, from + 1));
    backend_.copy(layer.recurrent.slice_rows(to, to + 1), layer.recurrent.slice_rows(from, from + 1));
  }
}

int32_t StateCache::slot_of(RequestId id) const {
  const auto it = slot_of_request_.find(id);
  return it == slot_of_request_.end() ? -1 : it->second;
}

void StateCache::release(RequestId id) {
  const auto it = slot_of_request_.find(id);
  if (it == slot_of_request_.end()) return;
  free_slots_.push_back(it->second);
  slot_of_request_.erase(it);
}

void StateCache::zero(int32_t slot) {
  for (const GdnStateView& layer : views_) {
    backend_.copy(layer.conv.slice_rows(slot, slot + 1), zero_conv_.view());
    backend_.copy(layer.recurrent.slice_rows(slot, slot + 1), zero_recurrent_.view());
  }
}

}  // namespace pagellm
