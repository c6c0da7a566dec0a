#include "model/qwen35.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "model/activations.h"
#include "model/gdn_mixer.h"
#include "model/layers/attention.h"
#include "model/layers/embedding.h"
#include "model/layers/gated_mlp.h"
#include "model/moe_ffn.h"
#include "model/mtp_model.h"
#include "model/weights.h"

namespace pagellm {

namespace {

struct GatedAttentionWeights {
  layers::Linear qkv;             // [2 nH hd + 2 nKV hd, H]  rows: (q_h | gate_h) per head h, then k, then v
  layers::RmsNorm q_norm, k_norm;  // [hd], 1 + w
  layers::Linear o;               // [H, nH hd]
  KvScales kv_scales;             // FP8 KV cache scales (1.0 unless the checkpoint has k_scale / v_scale)
};

struct HybridLayer {
  LayerType type = LayerType::kLinearAttention;
  int64_t cache_index = 0;                   // attention-layer or GDN-layer ordinal (CacheViews)
  layers::RmsNorm input_norm, post_norm;     // [H], 1 + w
  GatedAttentionWeights attention;           // full-attention layers
  GdnWeights gdn;                            // linear-attention layers
  std::optional<layers::MlpWeights> mlp;     // dense FFN ...
  std::optional<MoeWeights> moe;             // ... or MoE
};

// The multi-token-prediction head (mtp.*): h' = fc([norm_embedding(embed(t)) | norm_hidden(h)]), one
// gated full-attention decoder layer, norm; embedding and head shared with the target.
struct MtpWeights {
  layers::RmsNorm norm_embedding, norm_hidden, norm;  // [H], 1 + w
  layers::Linear fc;                                  // [H, 2H]
  HybridLayer layer;                                  // full attention, MLP or MoE as the target's layers
};

// Activation buffers, by index. kFinalHidden: the target's hidden states after the final norm, every
// token row (kept for an MTP head); kMtp*: the MTP head's hidden input, [embedding | hidden] and output.
enum Buffer : size_t { kHidden, kNormed, kQkv, kAttnOut, kProj, kLastRows, kFinalHidden, kMtpConcat, kMtpHidden,
                      kShardLogits };

// [T, nH, hd] view of q (or, with first_col = hd, of the gate) inside q_proj's per-head [q_h | gate_h] rows.
TensorView interleaved_heads(const TensorView& qkv, int64_t first_col, int64_t num_heads, int64_t head_dim) {
  TensorView view = head_columns(qkv, first_col, num_heads, 2 * head_dim);
  view.shape = Shape{qkv.size(0), num_heads, head_dim};
  return view;  // strides stay (row, 2 hd, 1)
}

// This rank's part of the heads (all of them without tensor parallelism).
struct HybridShard {
  layers::AttentionShard attention;
  GdnShard gdn;
};

class Qwen35Model final : public Model {
 public:
  Qwen35Model(const ModelConfig& config, Backend& backend, const HybridShard& shard)
      : config_(config),
        backend_(backend),
        comm_(backend.communicator()),
        shard_(shard),
        act_(backend, config.dtype),
        gdn_(shard.gdn.local, static_cast<float>(config.rms_norm_eps), backend, config.dtype),
        mlp_(backend, config.dtype,
             layers::intermediate_shard(config.intermediate_size, backend.tensor_parallel_rank(),
                                        backend.tensor_parallel_size()).count) {
    if (config.num_experts > 0) moe_.emplace(config, backend);
  }

  Status load(const Checkpoint& checkpoint);
  const ModelConfig& config() const override { return config_; }
  MemorySpec memory_spec() const override;
  void forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) override;

  // The MTP head (mtp_model.h): loads mtp.* (an error naming the first missing tensor) and from then
  // on keeps every token row's final hidden state (target_hidden_states()).
  Status load_mtp(const Checkpoint& checkpoint);
  // The MTP head's forward: token rows of `batch`, hidden input row t = source[rows[t]], its one
  // attention layer's cache in caches.attention_layers[0].
  void mtp_forward(const StepBatch& batch, const CacheViews& caches, TensorView logits, const TensorView& source,
                   const TensorView& rows);
  // Rows [0, num_tokens) of the final hidden states of the last forward (a replayed graph's rows too).
  TensorView target_hidden_states(int64_t num_tokens) { return act_.rows(kFinalHidden, num_tokens); }
  TensorView mtp_hidden_states() const { return mtp_hidden_; }

 private:
  Status load_layer(WeightLoader& loader, const std::string& prefix, LayerType type, bool moe, HybridLayer& layer);
  // One decoder layer over the residual stream `hidden` [T, H], where `normed` [T, H] already holds
  // the layer's input norm of it. Leaves the FFN's output in `proj` [T, H], not yet added to `hidden`:
  // the caller fuses that residual add with the next norm (the next layer's input norm, or a plain
  // add before the final one).
  void decoder_layer(const HybridLayer& layer, const StepBatch& batch, const CacheViews& caches, TensorView hidden,
                     TensorView normed, TensorView proj);
  bool is_moe_layer(int64_t index) const;
  void attention_block(const HybridLayer& layer, const KvCacheView& cache, const StepBatch& batch,
                       const TensorView& normed, TensorView out);
  void ffn_block(const HybridLayer& layer, const TensorView& normed, TensorView out);
  // Tensor parallelism: a row-parallel block's partial output summed over the ranks.
  void reduce(TensorView partial) {
    if (comm_ != nullptr) comm_->all_reduce_sum(partial);
  }

  ModelConfig config_;
  Backend& backend_;
  Communicator* comm_;  // nullptr without tensor parallelism
  HybridShard shard_;
  ShardRange vocab_shard_;  // the logits columns this rank computes
  Activations act_;
  GdnMixer gdn_;
  layers::GatedMlp mlp_;
  std::optional<MoeFfn> moe_;
  layers::TokenEmbedding embedding_;
  layers::LmHead head_;    // final norm 1 + w
  layers::Rotary rotary_;  // partial RoPE: [rot / 2]
  int64_t num_attention_layers_ = 0, num_gdn_layers_ = 0;
  std::vector<HybridLayer> layers_;
  std::optional<MtpWeights> mtp_;
  TensorView mtp_hidden_;  // [T, H] of the last MTP forward
};

// [T, 1, width] view of columns [first_col, first_col + width) of a row-major [T, C] buffer.
TensorView columns(const TensorView& rows_2d, int64_t first_col, int64_t width) {
  return head_columns(rows_2d, first_col, 1, width);
}

bool Qwen35Model::is_moe_layer(int64_t i) const {
  const auto& only = config_.mlp_only_layers;
  return config_.num_experts > 0 && std::find(only.begin(), only.end(), i) == only.end() &&
         (i + 1) % config_.decoder_sparse_step == 0;
}

Status Qwen35Model::load_layer(WeightLoader& loader, const std::string& p, LayerType type, bool moe,
                               HybridLayer& layer) {
  const int64_t h = config_.hidden_size, hd = config_.head_dim, nh = config_.num_attention_heads,
                nkv = config_.num_key_value_heads;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  // q_proj holds (q_h | gate_h) per head: a shard of heads is a run of 2 hd rows each.
  const layers::AttentionShard& a_shard = shard_.attention;
  const ShardRange q_mine{a_shard.q_head_begin * 2 * hd, a_shard.local.num_heads * 2 * hd};
  const ShardRange kv_mine{a_shard.kv_head_begin * hd, a_shard.local.num_kv_heads * hd};
  const ShardRange o_mine{a_shard.q_head_begin * hd, a_shard.local.num_heads * hd};
  layer.type = type;
  PAGELLM_ASSIGN_OR_RETURN(layer.input_norm,
                           layers::load_rms_norm(loader, p + "input_layernorm.weight", h, NormWeight::kOnePlus, eps));
  PAGELLM_ASSIGN_OR_RETURN(layer.post_norm, layers::load_rms_norm(loader, p + "post_attention_layernorm.weight", h,
                                                                  NormWeight::kOnePlus, eps));
  if (layer.type == LayerType::kLinearAttention) {
    PAGELLM_ASSIGN_OR_RETURN(layer.gdn, load_gdn_weights(loader, backend_, backend_.weight_dtype(config_.dtype),
                                                         GdnShape(config_), p + "linear_attn."));
  } else {
    GatedAttentionWeights& a = layer.attention;
    PAGELLM_ASSIGN_OR_RETURN(a.qkv, layers::load_linear(loader,
                                                        {layers::shard_rows(loader, p + "self_attn.q_proj", 2 * nh * hd, q_mine),
                                                         layers::shard_rows(loader, p + "self_attn.k_proj", nkv * hd, kv_mine),
                                                         layers::shard_rows(loader, p + "self_attn.v_proj", nkv * hd, kv_mine)},
                                                        h, /*with_bias=*/false));
    PAGELLM_ASSIGN_OR_RETURN(a.q_norm, layers::load_rms_norm(loader, p + "self_attn.q_norm.weight", hd,
                                                             NormWeight::kOnePlus, eps));
    PAGELLM_ASSIGN_OR_RETURN(a.k_norm, layers::load_rms_norm(loader, p + "self_attn.k_norm.weight", hd,
                                                             NormWeight::kOnePlus, eps));
    PAGELLM_ASSIGN_OR_RETURN(a.o, layers::load_linear(loader, {{p + "self_attn.o_proj", h}}, nh * hd, false,
                                                      layers::shard_columns(loader, o_mine)));
    PAGELLM_ASSIGN_OR_RETURN(a.kv_scales, layers::load_kv_scales(loader, p + "self_attn."));
  }
  if (moe) {
    PAGELLM_ASSIGN_OR_RETURN(layer.moe, load_moe_weights(loader, backend_, backend_.weight_dtype(config_.dtype),
                                                         config_, p + "mlp."));
  } else {
    PAGELLM_ASSIGN_OR_RETURN(layer.mlp, layers::load_gated_mlp(loader, p + "mlp.", h, config_.intermediate_size,
                                                               Activation::kSilu, /*with_bias=*/false));
  }
  return Status::ok();
}

Status Qwen35Model::load(const Checkpoint& checkpoint) {
  const int64_t h = config_.hidden_size, hd = config_.head_dim, nh = shard_.attention.local.num_heads,
                nkv = shard_.attention.local.num_kv_heads, v = config_.vocab_size;
  WeightLoader loader(checkpoint, backend_, backend_.weight_dtype(config_.dtype), config_.quantization);
  // Released Qwen3.5 checkpoints keep the text model under model.language_model.
  const std::string m = loader.has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  PAGELLM_ASSIGN_OR_RETURN(embedding_.table, loader.load(m + "embed_tokens.weight", {v, h}));
  PAGELLM_ASSIGN_OR_RETURN(head_.final_norm, layers::load_rms_norm(loader, m + "norm.weight", h, NormWeight::kOnePlus,
                                                                   static_cast<float>(config_.rms_norm_eps)));
  // The embedding table is whole on every rank; the head is split by vocabulary rows over the ranks.
  vocab_shard_ = shard_range(v, backend_.tensor_parallel_rank(), backend_.tensor_parallel_size());
  PAGELLM_ASSIGN_OR_RETURN(head_.weight, layers::load_head_weight(loader, embedding_.table, config_.tie_word_embeddings,
                                                                  v, h, vocab_shard_));
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    HybridLayer layer;
    const LayerType type = config_.layer_types[static_cast<size_t>(i)];
    PAGELLM_RETURN_IF_ERROR(load_layer(loader, fmt::format("{}layers.{}.", m, i), type, is_moe_layer(i), layer));
    layer.cache_index = type == LayerType::kLinearAttention ? num_gdn_layers_++ : num_attention_layers_++;
    layers_.push_back(std::move(layer));
  }
  PAGELLM_ASSIGN_OR_RETURN(rotary_, layers::make_rotary(backend_, config_.rope, hd));

  act_.define(kHidden, h);
  act_.define(kNormed, h);
  act_.define(kQkv, 2 * nh * hd + 2 * nkv * hd);
  act_.define(kAttnOut, nh * hd);
  act_.define(kProj, h);
  act_.define(kLastRows, h);
  if (comm_ != nullptr) act_.define(kShardLogits, std::max<int64_t>(vocab_shard_.count, 1));
  act_.define(kFinalHidden, h);
  act_.define(kMtpConcat, 2 * h);
  act_.define(kMtpHidden, h);
  return Status::ok();
}

Status Qwen35Model::load_mtp(const Checkpoint& checkpoint) {
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  WeightLoader loader(checkpoint, backend_, backend_.weight_dtype(config_.dtype), config_.quantization);
  if (!loader.has("mtp.fc.weight"))
    return invalid_argument("[speculative-config] method mtp: the checkpoint of {} has no mtp.* weights (mtp.fc.weight "
                            "is missing)", config_.architecture);
  MtpWeights w;
  PAGELLM_ASSIGN_OR_RETURN(w.norm_embedding, layers::load_rms_norm(loader, "mtp.pre_fc_norm_embedding.weight", h,
                                                                   NormWeight::kOnePlus, eps));
  PAGELLM_ASSIGN_OR_RETURN(w.norm_hidden, layers::load_rms_norm(loader, "mtp.pre_fc_norm_hidden.weight", h,
                                                                NormWeight::kOnePlus, eps));
  PAGELLM_ASSIGN_OR_RETURN(w.norm, layers::load_rms_norm(loader, "mtp.norm.weight", h, NormWeight::kOnePlus, eps));
  PAGELLM_ASSIGN_OR_RETURN(w.fc, layers::load_linear(loader, {{"mtp.fc", h}}, 2 * h, /*with_bias=*/false));
  // The MTP layer is sparse wherever the target's layers are (vLLM builds it as a target layer).
  const bool moe = config_.num_experts > 0 && loader.has("mtp.layers.0.mlp.gate.weight");
  PAGELLM_RETURN_IF_ERROR(load_layer(loader, "mtp.layers.0.", LayerType::kFullAttention, moe, w.layer));
  w.layer.cache_index = 0;  // the MTP head's own KV cache
  mtp_ = std::move(w);
  return Status::ok();
}

MemorySpec Qwen35Model::memory_spec() const {
  const GdnShape& gdn = shard_.gdn.local;
  MemorySpec spec;
  spec.num_attention_layers = num_attention_layers_;
  spec.num_kv_heads = shard_.attention.local.num_kv_heads;
  spec.head_dim = config_.head_dim;
  spec.kv_dtype = config_.dtype;
  spec.num_gdn_layers = num_gdn_layers_;
  spec.gdn_conv_dim = gdn.conv_dim();
  spec.gdn_conv_kernel = gdn.conv_kernel;
  spec.gdn_num_value_heads = gdn.num_v_heads;
  spec.gdn_key_head_dim = gdn.dk;
  spec.gdn_value_head_dim = gdn.dv;
  spec.state_dtype = config_.dtype;
  return spec;
}

void Qwen35Model::forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) {
  CHECK(static_cast<int64_t>(caches.attention_layers.size()) == num_attention_layers_ &&
        static_cast<int64_t>(caches.gdn_layers.size()) == num_gdn_layers_);
  CHECK_MSG(num_gdn_layers_ == 0 || batch.state_slots.numel() == batch.num_seqs,
            "hybrid model: state_slots has {} entries for {} sequences", batch.state_slots.numel(), batch.num_seqs);
  const int64_t num_tokens = batch.num_tokens;
  TensorView hidden = act_.rows(kHidden, num_tokens);  // [T, H], the residual stream
  TensorView normed = act_.rows(kNormed, num_tokens);  // [T, H]
  TensorView proj = act_.rows(kProj, num_tokens);      // [T, H], a block's output
  embedding_.forward(backend_, hidden, batch.token_ids);
  layers_.front().input_norm.forward(backend_, normed, hidden);
  for (size_t i = 0; i < layers_.size(); ++i) {
    decoder_layer(layers_[i], batch, caches, hidden, normed, proj);
    if (i + 1 < layers_.size()) layers_[i + 1].input_norm.add_forward(backend_, hidden, normed, proj);
  }
  const int64_t num_rows = batch.logits_rows.numel();
  TensorView last = act_.rows(kLastRows, num_rows);  // [R, H]
  if (mtp_) {  // every row's final hidden state is the MTP head's input (norm then gather: the same rows)
    backend_.add(hidden, hidden, proj);
    TensorView final_hidden = act_.rows(kFinalHidden, num_tokens);  // [T, H]
    head_.final_norm.forward(backend_, final_hidden, hidden);
    backend_.embedding(last, final_hidden, batch.logits_rows);
    backend_.matmul(logits, last, head_.weight);
    return;
  }
  // Only the rows that sample take the last residual add, the final norm and the vocabulary projection.
  if (comm_ == nullptr) {
    head_.forward_rows(backend_, logits, last, hidden, proj, batch.logits_rows);
    return;
  }
  TensorView shard = act_.rows(kShardLogits, num_rows).reshape({num_rows, vocab_shard_.count});  // [R, V / N]
  head_.forward_rows(backend_, shard, last, hidden, proj, batch.logits_rows);
  comm_->gather_columns(logits, shard);  // rank 0's logits[R, V]
}

void Qwen35Model::decoder_layer(const HybridLayer& layer, const StepBatch& batch, const CacheViews& caches,
                                TensorView hidden, TensorView normed, TensorView proj) {
  if (layer.type == LayerType::kLinearAttention) {
    gdn_.forward(layer.gdn, batch, caches.gdn_layers[static_cast<size_t>(layer.cache_index)], normed, proj);
  } else {
    attention_block(layer, caches.attention_layers[static_cast<size_t>(layer.cache_index)], batch, normed, proj);
  }
  reduce(proj);
  layer.post_norm.add_forward(backend_, hidden, normed, proj);
  ffn_block(layer, normed, proj);
  reduce(proj);
}

void Qwen35Model::mtp_forward(const StepBatch& batch, const CacheViews& caches, TensorView logits,
                              const TensorView& source, const TensorView& rows) {
  CHECK_MSG(mtp_.has_value() && caches.attention_layers.size() == 1 && rows.numel() == batch.num_tokens,
            "MTP forward: {} hidden rows for {} tokens", rows.numel(), batch.num_tokens);
  const int64_t num_tokens = batch.num_tokens, h = config_.hidden_size;
  TensorView hidden = act_.rows(kHidden, num_tokens);      // [T, H]
  TensorView normed = act_.rows(kNormed, num_tokens);      // [T, H]
  TensorView proj = act_.rows(kProj, num_tokens);          // [T, H]
  TensorView concat = act_.rows(kMtpConcat, num_tokens);   // [T, 2H]: norm_embedding(embed) | norm_hidden(h)
  backend_.embedding(normed, source, rows);  // first: source may be this head's output of its last forward
  mtp_->norm_hidden.forward(backend_, columns(concat, h, h), normed.reshape({num_tokens, 1, h}));
  embedding_.forward(backend_, hidden, batch.token_ids);
  mtp_->norm_embedding.forward(backend_, columns(concat, 0, h), hidden.reshape({num_tokens, 1, h}));
  mtp_->fc.forward(backend_, hidden, concat);
  mtp_->layer.input_norm.forward(backend_, normed, hidden);
  decoder_layer(mtp_->layer, batch, caches, hidden, normed, proj);
  backend_.add(hidden, hidden, proj);
  mtp_hidden_ = act_.rows(kMtpHidden, num_tokens);  // [T, H]
  mtp_->norm.forward(backend_, mtp_hidden_, hidden);
  TensorView last = act_.rows(kLastRows, batch.logits_rows.numel());  // [R, H]
  backend_.embedding(last, mtp_hidden_, batch.logits_rows);
  backend_.matmul(logits, last, head_.weight);
}

void Qwen35Model::attention_block(const HybridLayer& layer, const KvCacheView& cache, const StepBatch& batch,
                                  const TensorView& normed, TensorView out) {
  const int64_t num_tokens = batch.num_tokens, hd = config_.head_dim, nh = shard_.attention.local.num_heads,
                nkv = shard_.attention.local.num_kv_heads;
  const GatedAttentionWeights& w = layer.attention;
  TensorView qkv = act_.rows(kQkv, num_tokens);       // [T, 2 nH hd + 2 nKV hd]
  TensorView attn = act_.rows(kAttnOut, num_tokens);  // [T, nH hd]
  w.qkv.forward(backend_, qkv, normed);
  TensorView q = interleaved_heads(qkv, 0, nh, hd);      // [T, nH, hd], row stride 2 nH hd + ..., head stride 2 hd
  TensorView gate = interleaved_heads(qkv, hd, nh, hd);  // [T, nH, hd]
  TensorView k = head_columns(qkv, 2 * nh * hd, nkv, hd);
  TensorView v = head_columns(qkv, 2 * nh * hd + nkv * hd, nkv, hd);
  // Per-head q/k norms, then RoPE on the first rot dims only (partial), then k and v into the cache.
  backend_.qk_norm_rope_write_kv(q, k, v, w.q_norm.weight, w.k_norm.weight, w.q_norm.eps, w.q_norm.mode,
                                 batch.positions, rotary_.inv_freq, rotary_.attention_scaling, cache.k, cache.v,
                                 batch.slot_mapping, w.kv_scales);
  layers::AttentionOptions options;
  options.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  TensorView attn_heads = attn.reshape({num_tokens, nh, hd});
  AttentionParams params = layers::attention_params(batch, options);
  params.kv_scales = w.kv_scales;
  backend_.attention(attn_heads, q, cache.k, cache.v, params);
  backend_.sigmoid_mul(attn_heads, attn_heads, gate);
  w.o.forward(backend_, out, attn);
}

void Qwen35Model::ffn_block(const HybridLayer& layer, const TensorView& normed, TensorView out) {
  if (layer.moe) {
    moe_->forward(*layer.moe, normed, out);
    return;
  }
  mlp_.forward(*layer.mlp, normed, out);
}

Status validate_hybrid_config(const ModelConfig& c) {
  if (c.hidden_act != "silu")
    return unimplemented("[config] hidden_act '{}' is not supported for {} (silu is)", c.hidden_act, c.model_type);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return invalid_argument("[config] head_dim must be even and > 0, got {}", c.head_dim);
  if (static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers)
    return invalid_argument("[config] layer_types has {} entries for {} layers", c.layer_types.size(), c.num_hidden_layers);
  for (LayerType t : c.layer_types)
    if (t == LayerType::kSlidingAttention)
      return unimplemented("[config] {} with sliding_attention layers is not supported", c.model_type);
  const bool has_gdn = std::find(c.layer_types.begin(), c.layer_types.end(), LayerType::kLinearAttention) != c.layer_types.end();
  if (has_gdn) {
    if (c.linear_num_key_heads <= 0 || c.linear_num_value_heads <= 0 || c.linear_key_head_dim <= 0 ||
        c.linear_value_head_dim <= 0 || c.linear_conv_kernel_dim < 2)
      return invalid_argument("[config] linear_attention layers need linear_num_key_heads, linear_num_value_heads, "
                              "linear_key_head_dim, linear_value_head_dim and linear_conv_kernel_dim >= 2");
    if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
      return invalid_argument("[config] linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                              c.linear_num_value_heads, c.linear_num_key_heads);
  }
  if (c.num_experts > 0 && (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts ||
                            c.moe_intermediate_size <= 0 || c.shared_expert_intermediate_size <= 0))
    return invalid_argument("[config] MoE needs 0 < num_experts_per_tok <= num_experts, moe_intermediate_size and "
                            "shared_expert_intermediate_size");
  return Status::ok();
}

class Qwen35Mtp final : public MtpModel {
 public:
  explicit Qwen35Mtp(Qwen35Model& target) : target_(target) {}
  const ModelConfig& config() const override { return target_.config(); }
  MemorySpec memory_spec() const override {
    const ModelConfig& c = target_.config();
    MemorySpec spec;
    spec.num_attention_layers = 1;
    spec.num_kv_heads = c.num_key_value_heads;
    spec.head_dim = c.head_dim;
    spec.kv_dtype = c.dtype;
    return spec;
  }
  void forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) override {
    target_.mtp_forward(batch, caches, logits, source_, rows_);
  }
  void set_hidden_input(const TensorView& source, const TensorView& rows) override {
    source_ = source;
    rows_ = rows;
  }
  TensorView target_hidden_states(int64_t num_tokens) const override {
    return target_.target_hidden_states(num_tokens);
  }
  TensorView hidden_states() const override { return target_.mtp_hidden_states(); }

 private:
  Qwen35Model& target_;
  TensorView source_, rows_;
};

}  // namespace

Expected<std::unique_ptr<MtpModel>> load_mtp_model(Model& target, const std::string& model_dir, Backend& backend) {
  auto* hybrid = dynamic_cast<Qwen35Model*>(&target);
  if (hybrid == nullptr)
    return invalid_argument("[speculative-config] method mtp: {} has no MTP head in pagellm (Qwen3.5 and Qwen3-Next "
                            "checkpoints with mtp.* weights do; a tensor-parallel target does not yet)",
                            target.config().architecture);
  PAGELLM_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::open_dir(model_dir));
  PAGELLM_RETURN_IF_ERROR(hybrid->load_mtp(checkpoint));
  return std::unique_ptr<MtpModel>(std::make_unique<Qwen35Mtp>(*hybrid));
}

Expected<std::unique_ptr<Model>> make_qwen35(const ModelConfig& config, const Checkpoint& checkpoint,
                                             Backend& backend) {
  PAGELLM_RETURN_IF_ERROR(validate_hybrid_config(config));
  const int rank = backend.tensor_parallel_rank(), size = backend.tensor_parallel_size();
  HybridShard shard;
  PAGELLM_ASSIGN_OR_RETURN(shard.attention,
                           layers::attention_shard({config.hidden_size, config.num_attention_heads,
                                                    config.num_key_value_heads, config.head_dim}, rank, size));
  PAGELLM_ASSIGN_OR_RETURN(shard.gdn, gdn_shard(GdnShape(config), rank, size));
  auto model = std::make_unique<Qwen35Model>(config, backend, shard);
  PAGELLM_RETURN_IF_ERROR(model->load(checkpoint));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace pagellm
