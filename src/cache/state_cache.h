// StateCache: the per-request recurrent state of hybrid (Gated DeltaNet) models, one slot per
// running request, beside the paged KV cache of the full-attention layers.
//
//   rows = num_slots (1 + num_drafts) + 1 + num_checkpoints
//   per GDN layer l:  conv[l]      [rows, conv_dim, K - 1]  activation dtype
//                     recurrent[l] [rows, Hv, dk, dv]       f32
//
//   slot 0 .. num_slots-1   one per running request: taken (and zeroed, or copied from a prefix
//                           hit's checkpoint) at admission and after a preemption, given back at
//                           finish, abort and preemption
//   slot num_slots          scratch: padding rows of a batch write their garbage here
//   slot num_slots + 1 + i  prefix-cache checkpoint i (cache/checkpoint_pool.h): written by the GDN
//                           ops during a prompt step, read by a later request's admission
//   draft slots             speculative decoding, num_drafts per request slot s (draft_slot(s, j)):
//                           the state after token j of s's last speculative row (its first token
//                           and j drafts), copied into s when the scheduler kept only j drafts
//
// Unlike KV blocks a slot does not grow with the sequence, so the scheduler needs no new rule:
// num_slots = max_num_seqs bounds the running requests already.
//
// Bytes, exactly: rows * num_gdn_layers * (conv_dim (K-1) dtype_bytes + Hv dk dv 4).
#pragma once

#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "cache/ids.h"
#include "model/step_batch.h"

namespace pagellm {

// Bytes the state of `num_slots` requests (plus the scratch slot) and num_checkpoints checkpoints take.
int64_t state_cache_bytes(const MemorySpec& spec, int num_slots, int num_checkpoints = 0, int num_drafts = 0);

class StateCache {
 public:
  // Allocates every GDN layer's state for num_slots requests (+ the scratch slot), zeroed.
  // ... and num_drafts draft slots per request slot (speculative decoding; 0 = none).
  StateCache(const MemorySpec& spec, Backend& backend, int num_slots, int num_checkpoints = 0, int num_drafts = 0);

  // A slot for `id` (which must hold none), zeroed, or a copy of checkpoint `restore_checkpoint`
  // (>= 0); CHECK-fails when every slot is taken.
  int32_t acquire(RequestId id, int32_t restore_checkpoint = -1);
  // The slot `id` holds, or -1.
  int32_t slot_of(RequestId id) const;
  // Gives back the slot of `id`; a no-op when it holds none (finish and abort may both report it).
  void release(RequestId id);

  int32_t scratch_slot() const { return num_slots_; }
  int32_t checkpoint_slot(int32_t checkpoint) const { return num_slots_ + 1 + checkpoint; }
  // The slot holding request slot `slot`'s state after token j < num_drafts of its speculative row.
  int32_t draft_slot(int32_t slot, int j) const { return num_slots_ + 1 + num_checkpoints_ + slot * num_drafts_ + j; }
  // Copies every GDN layer's state in slot `from` to slot `to`.
  void copy_slot(int32_t to, int32_t from);
  int num_drafts() const { return num_drafts_; }
  int num_slots() const { return num_slots_; }
  int num_checkpoints() const { return num_checkpoints_; }
  int num_in_use() const { return static_cast<int>(slot_of_request_.size()); }
  int64_t bytes() const { return state_cache_bytes(spec_, num_slots_, num_checkpoints_, num_drafts_); }
  const std::vector<GdnStateView>& views() const { return views_; }

 private:
  void zero(int32_t slot);

  MemorySpec spec_;
  Backend& backend_;
  int num_slots_;
  int num_checkpoints_;
  int num_drafts_;
  std::vector<Tensor> tensors_;       // conv and recurrent of each layer
  std::vector<GdnStateView> views_;   // [num_gdn_layers]
  std::vector<int32_t> free_slots_;   // a stack; the lowest slot is taken first
  std::unordered_map<RequestId, int32_t> slot_of_request_;
  Tensor zero_conv_, zero_recurrent_;  // one slot of zeros on the host, the source of zero()
};

}  // namespace pagellm
