// Attention: the self-attention block of the dense families (Llama, Mistral, Qwen2, Qwen3, Gemma).
//
//   normed [T, H] ─ qkv (one Linear, optional bias) ─▶ q [T, nH, hd] | k [T, nKV, hd] | v [T, nKV, hd]
//   q, k ─ optional per-head RMSNorm ─ RoPE ─▶ k, v into the paged cache     (one fused backend op)
//   varlen paged attention (scale, sliding window, soft-cap) ─ o (Linear) ─▶ out [T, H]
#pragma once

#include <string>

#include "model/activations.h"
#include "model/layers/linear.h"
#include "model/layers/norm.h"
#include "model/layers/rotary.h"
#include "model/step_batch.h"

namespace pagellm::layers {

struct AttentionShape {
  int64_t hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
};

// The heads rank `rank` of `size` computes (tensor parallelism): num_heads / size query heads from
// q_head_begin, and num_kv_heads / size KV heads from kv_head_begin, or, when there are fewer KV heads
// than ranks, the one KV head its query heads read (replicated). local is the shape of the shard.
struct AttentionShard {
  AttentionShape local;
  int64_t q_head_begin = 0, kv_head_begin = 0;
};
// A one-line error when the heads do not split over `size` ranks.
Expected<AttentionShard> attention_shard(const AttentionShape& shape, int rank, int size);

// What varies between families and between the layers of one model.
struct AttentionOptions {
  float scale = 1.0f;           // multiplies q.k: head_dim^-0.5, or query_pre_attn_scalar^-0.5 (Gemma)
  int32_t sliding_window = -1;  // -1 = full attention
  float softcap = 0.0f;         // 0 = off (Gemma 2: 50)
};

struct AttentionWeights {
  Linear qkv;              // [(nH + 2 nKV) hd, H]  rows: q | k | v
  RmsNorm q_norm, k_norm;  // [hd] each, or undefined (no q/k norm)
  Linear o;                // [H, nH hd]
  const Rotary* rotary = nullptr;  // owned by the model (shared by the layers of one type)
  AttentionOptions options;
  KvScales kv_scales;  // the FP8 KV cache's k/v scales of this layer (read only when the cache is fp8)
  Tensor sinks;        // [nH] f32 attention sinks (gpt-oss), or undefined
};

// How a family names and shapes its attention tensors under `prefix` ("model.layers.3.self_attn.").
struct AttentionLoadOptions {
  bool qkv_bias = false, o_bias = false;
  bool qk_norm = false;
  bool sinks = false;  // `prefix`sinks [nH]: one softmax logit per head (gpt-oss), kept in f32
  NormWeight qk_norm_mode = NormWeight::kPlain;
  float eps = 1e-6f;
};

// The layer's FP8 KV cache scales: `prefix`k_scale and `prefix`v_scale when the checkpoint has them
// (scalar or [1], f32/bf16, as llm-compressor and vLLM FP8 checkpoints carry), else 1.0. A scale that
// is not finite and > 0 is an error.
Expected<KvScales> load_kv_scales(WeightLoader& loader, const std::string& prefix);

// `shape` is the whole model's; a tensor-parallel loader loads its shard (attention_shard): q, k, v
// rows of its heads and o's input columns of its query heads (o's output is then a partial sum).
Expected<AttentionWeights> load_attention(WeightLoader& loader, const std::string& prefix, const AttentionShape& shape,
                                          const AttentionLoadOptions& options);

// One block object serves every layer of a model (its scratch buffers are reused layer after layer).
class Attention {
 public:
  Attention(Backend& backend, DType dtype, const AttentionShape& shape);
  // out[T, H] = attention(normed[T, H]); writes this step's k, v into `cache` (through the block
  // tables and slot mapping of cache.group).
  void forward(const AttentionWeights& weights, const KvCacheView& cache, const StepBatch& batch,
               const TensorView& normed, TensorView out);

 private:
  Backend& backend_;
  AttentionShape shape_;
  Activations act_;
};

// The AttentionParams of a step's batch for one layer (of KV cache group `group`: its block tables).
AttentionParams attention_params(const StepBatch& batch, const AttentionOptions& options, int32_t group = 0);

}  // namespace pagellm::layers
