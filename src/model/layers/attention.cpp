#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>

namespace pagellm::layers {

namespace {
enum Buffer : size_t { kQkv, kAttnOut };

// One scale tensor (scalar or [1]); 1.0 when the checkpoint has none.
Expected<float> load_kv_scale(WeightLoader& loader, const std::string& name) {
  if (!loader.has(name)) return 1.0f;
  Expected<std::vector<float>> values = loader.load_host_f32(name, {});
  if (!values.has_value()) values = loader.load_host_f32(name, {1});
  if (!values.has_value()) return values.status();
  const float scale = values.value().at(0);
  if (!(scale > 0) || !std::isfinite(scale))
    return invalid_argument("[checkpoint] tensor '{}' = {} is not a KV cache scale (finite, > 0)", name, scale);
  return scale;
}
}  // namespace

Expected<KvScales> load_kv_scales(WeightLoader& loader, const std::string& prefix) {
  KvScales scales;
  PAGELLM_ASSIGN_OR_RETURN(scales.k_scale, load_kv_scale(loader, prefix + "k_scale"));
  PAGELLM_ASSIGN_OR_RETURN(scales.v_scale, load_kv_scale(loader, prefix + "v_scale"));
  return scales;
}

Expected<AttentionShard> attention_shard(const AttentionShape& shape, int rank, int size) {
  AttentionShard shard{shape, 0, 0};
  if (size == 1) return shard;
  if (shape.num_heads % size != 0)
    return invalid_argument("[model] --tensor-parallel-size {} does not divide num_attention_heads {}", size,
                            shape.num_heads);
  if (shape.num_kv_heads % size != 0 && size % shape.num_kv_heads != 0)
    return invalid_argument("[model] --tensor-parallel-size {} and num_key_value_heads {}: one must divide the other",
                            size, shape.num_kv_heads);
  shard.local.num_heads = shape.num_heads / size;
  shard.q_head_begin = rank * shard.local.num_heads;
  shard.local.num_kv_heads = std::max<int64_t>(shape.num_kv_heads / size, 1);
  // With fewer KV heads than ranks, rank r's query heads all read KV head r * nKV / size.
  shard.kv_head_begin = shape.num_kv_heads >= size ? rank * shard.local.num_kv_heads : rank * shape.num_kv_heads / size;
  return shard;
}

Expected<AttentionWeights> load_attention(WeightLoader& loader, const std::string& prefix, const AttentionShape& shape,
                                          const AttentionLoadOptions& options) {
  const int64_t hd = shape.head_dim, q_rows = shape.num_heads * hd, kv_rows = shape.num_kv_heads * hd;
  PAGELLM_ASSIGN_OR_RETURN(const AttentionShard shard, attention_shard(shape, loader.tp_rank(), loader.tp_size()));
  const ShardRange q_mine{shard.q_head_begin * hd, shard.local.num_heads * hd};
  const ShardRange kv_mine{shard.kv_head_begin * hd, shard.local.num_kv_heads * hd};
  AttentionWeights w;
  PAGELLM_ASSIGN_OR_RETURN(w.qkv, load_linear(loader,
                                              {shard_rows(loader, prefix + "q_proj", q_rows, q_mine),
                                               shard_rows(loader, prefix + "k_proj", kv_rows, kv_mine),
                                               shard_rows(loader, prefix + "v_proj", kv_rows, kv_mine)},
                                              shape.hidden, options.qkv_bias));
  PAGELLM_ASSIGN_OR_RETURN(w.o, load_linear(loader, {{prefix + "o_proj", shape.hidden}}, q_rows, options.o_bias,
                                            shard_columns(loader, q_mine)));
  PAGELLM_ASSIGN_OR_RETURN(w.kv_scales, load_kv_scales(loader, prefix));
  if (options.sinks) {
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> sinks, loader.load_host_f32(prefix + "sinks", {shape.num_heads}));
    // One logit per query head: a tensor-parallel rank keeps its heads'.
    Tensor host = Tensor::cpu({shard.local.num_heads}, DType::kF32);
    std::copy_n(sinks.begin() + shard.q_head_begin, shard.local.num_heads, host.ptr<float>());
    w.sinks = loader.upload(std::move(host));
  }
  if (options.qk_norm) {
    PAGELLM_ASSIGN_OR_RETURN(w.q_norm, load_rms_norm(loader, prefix + "q_norm.weight", hd, options.qk_norm_mode,
                                                     options.eps));
    PAGELLM_ASSIGN_OR_RETURN(w.k_norm, load_rms_norm(loader, prefix + "k_norm.weight", hd, options.qk_norm_mode,
                                                     options.eps));
  }
  return w;
}

AttentionParams attention_params(const StepBatch& batch, const AttentionOptions& options, int32_t group) {
  AttentionParams params;
  params.cu_seqlens_q = batch.cu_seqlens_q;
  params.seq_lens_k = batch.seq_lens_k;
  params.block_tables = batch.block_tables_of(group);
  params.scale = options.scale;
  params.sliding_window = options.sliding_window;
  params.softcap = options.softcap;
  params.max_seqlen_q = batch.max_seqlen_q;
  params.max_seqlen_k = batch.max_seqlen_k;
  params.short_rows_split_keys = batch.has_draft_rows;
  return params;
}

Attention::Attention(Backend& backend, DType dtype, const AttentionShape& shape)
    : backend_(backend), shape_(shape), act_(backend, dtype) {
  act_.define(kQkv, (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim);
  act_.define(kAttnOut, shape.num_heads * shape.head_dim);
}

void Attention::forward(const AttentionWeights& w, const KvCacheView& cache, const StepBatch& batch,
                        const TensorView& normed, TensorView out) {
  const int64_t num_tokens = batch.num_tokens, hd = shape_.head_dim, nh = shape_.num_heads, nkv = shape_.num_kv_heads;
  TensorView qkv = act_.rows(kQkv, num_tokens);       // [T, (nH + 2 nKV) hd]
  TensorView attn = act_.rows(kAttnOut, num_tokens);  // [T, nH hd]
  w.qkv.forward(backend_, qkv, normed);
  TensorView q = head_columns(qkv, 0, nh, hd);  // [T, nH, hd]
  TensorView k = head_columns(qkv, nh * hd, nkv, hd);
  TensorView v = head_columns(qkv, (nh + nkv) * hd, nkv, hd);
  // Per-head q/k norm (when the family has one) before RoPE, then k and v into the paged cache.
  const bool has_qk_norm = w.q_norm.defined();
  backend_.qk_norm_rope_write_kv(q, k, v, has_qk_norm ? w.q_norm.weight.view() : TensorView(),
                                 has_qk_norm ? w.k_norm.weight.view() : TensorView(), w.q_norm.eps, w.q_norm.mode,
                                 batch.positions, w.rotary->inv_freq, w.rotary->attention_scaling, cache.k, cache.v,
                                 batch.slot_mapping_of(cache.group), w.kv_scales);
  AttentionParams params = attention_params(batch, w.options, cache.group);
  params.kv_scales = w.kv_scales;
  if (w.sinks.defined()) params.sinks = w.sinks.view();
  backend_.attention(attn.reshape({num_tokens, nh, hd}), q, cache.k, cache.v, params);
  w.o.forward(backend_, out, attn);
}

}  // namespace pagellm::layers
