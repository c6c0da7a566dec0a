// CPU twin of the KV-cache ops: write_kv (scatter new k/v rows into paged caches) and the varlen
// paged attention op that serves prefill, decode and mixed batches with one code path.
//
// Paged cache layout (K and V alike), in the model's activation dtype (f32, bf16 or f16) or f8_e4m3
// (the FP8 KV cache: stored = e4m3(x / scale), read = float(stored) * scale, backend.h KvScales):
//
//   cache [num_blocks, block_size, num_kv_heads, head_dim]
//   token at absolute position p of sequence s lives in
//     slot = block_tables[s][p / block_size] * block_size + p % block_size
//     element offset = (slot / block_size) * stride[0] + (slot % block_size) * stride[1]
//                      + kv_head * stride[2] + d                    (64-bit: caches exceed 2^31 elements)
//
// Varlen batch (AttentionParams):
//
//   q rows:  | seq 0: q_len 1 | seq 1: q_len 5 ........ | seq 2: q_len 129 ............ |
//            ^cu_seqlens_q[0]  ^cu_seqlens_q[1]          ^cu_seqlens_q[2]                 ^cu_seqlens_q[3]
//   row i of sequence s sits at absolute position pos = seq_lens_k[s] - q_len(s) + i, so the last
//   row of a sequence is its newest token. It sees keys j with
//     j <= pos (causal)  and  j > pos - W (sliding window W, when on).
#pragma once

#include "backend/backend.h"
#include "core/tensor.h"

namespace pagellm::cpu {

// k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim], f32/bf16/f16/f8_e4m3
// k, v:             [T, num_kv_heads, head_dim] (rows may be strided, e.g. views into a fused qkv)
// slot_mapping:     [T], i64; -1 = skip the token (padding, or a token whose KV is already cached)
// k/v are converted to the cache dtype when they differ (rounded once); an f8_e4m3 cache stores
// e4m3(k / scales.k_scale) and e4m3(v / scales.v_scale).
void write_kv(TensorView k_cache, TensorView v_cache, const TensorView& k, const TensorView& v,
              const TensorView& slot_mapping, const KvScales& scales = {});

// out: [T, num_heads, head_dim], f32/bf16/f16 (may differ from q's dtype; written rounded once)
// q:   [T, num_heads, head_dim], f32/bf16/f16
// caches as in write_kv (f8_e4m3 caches read as float(stored) * params.kv_scales). Softmax runs in f32 per query row (online, flash style). A row that sees no
// key is written as zeros. Rows past cu_seqlens_q[num_seqs] are left untouched.
//
// Numerics do not depend on the batch or the thread count: keys are processed in chunks and
// partitions aligned to absolute positions, and partial softmax states are folded in a fixed order,
// so a sequence alone and the same sequence inside a batch give bitwise-equal rows.
void attention(TensorView out, const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
               const AttentionParams& params);

}  // namespace pagellm::cpu
