// StepBatch: one engine step's tokens packed flat, as the model sees them (on the backend's device).
//
//   tokens:     | seq 0: chunk of prompt | seq 1: 1 decode token | seq 2: ... |
//   cu_seqlens_q  [0,                     n0,                      n0+1, ...]   (B+1)
//   positions   restart per sequence: seq s's first new token sits at seq_lens_k[s] - q_len(s)
//   slot_mapping[t] = block_tables[s][pos / block_size] * block_size + pos % block_size  (-1 = skip)
//   logits_rows: indices t of the tokens whose next-token logits are wanted (last of each sampling seq)
//
// KV cache groups (cache/kv_cache_groups.h): a model with full and sliding-window layers has one
// block table and one slot mapping per group; group 0's are block_tables / slot_mapping, group
// g >= 1's are more_block_tables[g - 1] / more_slot_mappings[g - 1]. KvCacheView::group says which
// a layer uses. A sliding group's table holds kNoBlock (-1) before each sequence's window: the
// attention op reads a table only at keys its queries can see, so those entries are never read.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace pagellm {

// A GDN state slot a step starts over before it runs: zeroed (from -1) or a copy of state slot `from`
// (a prefix-cache checkpoint). The runner's StateCache has done it already; tensor-parallel ranks that
// hold state copies of their own repeat it on theirs.
struct StateSlotInit {
  int32_t slot = 0, from = -1;
};

struct StepBatch {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int32_t max_seqlen_q = 0;
  int32_t max_seqlen_k = 0;
  bool has_draft_rows = false;  // speculative verification rows (AttentionParams::short_rows_split_keys)
  TensorView token_ids;     // [T], i32
  TensorView positions;     // [T], i32
  TensorView cu_seqlens_q;  // [B + 1], i32
  TensorView seq_lens_k;    // [B], i32: context length after this step
  TensorView block_tables;  // [B, max_blocks_per_seq], i32
  TensorView slot_mapping;  // [T], i64
  TensorView logits_rows;   // [R], i32
  TensorView state_slots;   // [B], i32: GDN state slot of each sequence (hybrid models; else empty)
  TensorView gdn_checkpoint_slots;  // [T], i32: prefix-cache checkpoints (GdnParams::checkpoint_slots); else empty
  std::vector<TensorView> more_block_tables;   // [G - 1]: KV cache groups 1.. ([B, max_blocks], i32 each)
  std::vector<TensorView> more_slot_mappings;  // [G - 1]: ([T], i64 each)
  std::vector<StateSlotInit> state_slot_inits;  // host: the state slots this step's new rows took

  const TensorView& block_tables_of(int32_t group) const {
    return group == 0 ? block_tables : more_block_tables.at(static_cast<size_t>(group - 1));
  }
  const TensorView& slot_mapping_of(int32_t group) const {
    return group == 0 ? slot_mapping : more_slot_mappings.at(static_cast<size_t>(group - 1));
  }
};

// The KV cache of one attention layer: K and V each [num_blocks, block_size, num_kv_heads, head_dim],
// in the model's activation dtype or f8_e4m3 (--kv-cache-dtype fp8; the layer holds its KvScales)
// (layers of different KV cache groups may share these tensors).
struct KvCacheView {
  TensorView k;
  TensorView v;
  int32_t group = 0;  // the KV cache group whose block tables and slot mapping the layer uses
};

// The recurrent state of one Gated DeltaNet layer, one slot per running sequence (cache/state_cache.h).
struct GdnStateView {
  TensorView conv;       // [num_slots, conv_dim, conv_kernel - 1], activation dtype: last conv inputs
  TensorView recurrent;  // [num_slots, Hv, dk, dv], f32: the delta-rule state S
};

struct CacheViews {
  std::vector<KvCacheView> attention_layers;  // indexed by attention-layer ordinal, not layer index
  std::vector<GdnStateView> gdn_layers;       // indexed by GDN-layer ordinal (hybrid models)
};

// What the engine must allocate for the model.
struct MemorySpec {
  int64_t num_attention_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType kv_dtype = DType::kF32;  // the model's activation dtype; the engine may choose f8_e4m3 instead
  // [num_attention_layers]: each attention layer's sliding window in tokens, -1 = full attention.
  // Empty = every layer full. Sliding layers get KV cache groups of their own (cache/kv_cache_groups.h).
  std::vector<int32_t> attention_windows{};
  // Hybrid models: per GDN layer and state slot, a conv state [conv_dim, conv_kernel - 1] in
  // state_dtype and a recurrent state [Hv, dk, dv] in f32.
  int64_t num_gdn_layers = 0;
  int64_t gdn_conv_dim = 0;
  int64_t gdn_conv_kernel = 0;
  int64_t gdn_num_value_heads = 0;
  int64_t gdn_key_head_dim = 0;
  int64_t gdn_value_head_dim = 0;
  DType state_dtype = DType::kF32;
  // Copies of each block the memory budget pays for: the CPU ranks of a tensor-parallel group each
  // hold a cache of this shape in the same host memory.
  int64_t cache_copies = 1;
  // Bytes one block of `block_size` tokens costs across all attention layers (K and V): the block of a
  // model with one KV cache group (a grouped cache's block holds KvCacheGroups::layers_per_group layers).
  int64_t kv_bytes_per_block(int64_t block_size) const {
    return 2 * num_attention_layers * block_size * num_kv_heads * head_dim *
           static_cast<int64_t>(dtype_size_bytes(kv_dtype));
  }
  bool is_hybrid() const { return num_gdn_layers > 0; }
  int64_t conv_state_bytes_per_layer() const {
    return gdn_conv_dim * (gdn_conv_kernel - 1) * static_cast<int64_t>(dtype_size_bytes(state_dtype));
  }
  int64_t recurrent_state_bytes_per_layer() const {
    return gdn_num_value_heads * gdn_key_head_dim * gdn_value_head_dim * static_cast<int64_t>(sizeof(float));
  }
  // Bytes one state slot (one running sequence) costs across all GDN layers (and the ranks' copies).
  int64_t state_bytes_per_slot() const {
    return num_gdn_layers * (conv_state_bytes_per_layer() + recurrent_state_bytes_per_layer()) * cache_copies;
  }
};

}  // namespace pagellm
