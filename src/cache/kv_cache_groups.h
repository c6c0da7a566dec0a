// KV cache groups: how the attention layers of a model share the paged KV cache when some of them
// only look at a sliding window (vLLM's hybrid KV cache manager).
//
// Layers are grouped by kind (full attention, or sliding with window W); each kind is cut into
// groups of `layers_per_group` layers (the smallest kind's count; the last group of a kind may be
// short). Every group has its own block table per request, and the cache holds `layers_per_group`
// K/V tensors of [num_blocks, block_size, num_kv_heads, head_dim]: tensor slot j holds layer j of
// EVERY group, so a block id costs the memory of layers_per_group layers, and one BlockPool hands
// block ids to any group. A sliding group returns the blocks that left its window to the pool while
// the request runs; a full group keeps them all.
//
// Gemma-3-1B: 26 layers, every 6th global (4 full, 22 sliding with W = 512):
//
//   kind      layers                                   groups (4 layers each)
//   full      5 11 17 23                               g0 = {5 11 17 23}
//   sliding   0-4 6-10 12-16 18-22 24 25               g1 = {0 1 2 3}  g2 = {4 6 7 8}  ...  g6 = {24 25}
//
//   tensor slot j = 0 1 2 3 holds layer j of g0..g6; g6 leaves slots 2 and 3 of its blocks unused.
//   A 16k-token request (blocks of 16): g0 holds 1024 blocks, g1..g6 ~33 each, 4 layers deep:
//   ~1222 x 4 layer-blocks instead of 1024 x 26 with one table for all layers.
//
// A model with one kind of layer (Qwen3, Llama, a Mistral with its window on every layer) is one group
// of all its layers: the cache is what it was with one shared block table.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/step_batch.h"

namespace pagellm {

inline constexpr int32_t kFullAttention = -1;  // the window of a full-attention layer or group

struct KvLayerPlace {
  int32_t group = 0;  // whose block table the layer reads and writes
  int32_t slot = 0;   // which K/V tensor pair holds its blocks
};

struct KvCacheGroups {
  std::vector<int32_t> windows;      // [G]: kFullAttention, or the sliding window in tokens; full first
  int32_t layers_per_group = 0;      // K/V tensor pairs the cache allocates
  std::vector<KvLayerPlace> layers;  // [num attention layers], by attention-layer ordinal
  int num_groups() const { return static_cast<int>(windows.size()); }
};

// Groups attention layers by their window (kFullAttention or > 0), in layer order within a kind.
// An empty span (a model with no attention layer) gives no group.
KvCacheGroups make_kv_cache_groups(std::span<const int32_t> layer_windows);

// A model's groups: from spec.attention_windows, or every attention layer full when it names none.
// A model without attention layers gets one full group of no layers (tables that nothing reads).
KvCacheGroups kv_cache_groups_of(const MemorySpec& spec);

}  // namespace pagellm
