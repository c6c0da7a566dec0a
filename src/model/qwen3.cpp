#include "model/qwen3.h"

#include <cmath>

#include <fmt/format.h>

#include "model/activations.h"
#include "model/rope_table.h"
#include "model/weights.h"

namespace pagellm {

namespace {

struct Qwen3Layer {
  Tensor input_norm;       // [H]
  Tensor qkv_proj;         // [(nH + 2 nKV) hd, H]  rows: q | k | v
  Tensor q_norm, k_norm;   // [hd]
  Tensor o_proj;           // [H, nH hd]
  Tensor post_norm;        // [H]
  Tensor gate_up_proj;     // [2 I, H]  rows: gate | up
  Tensor down_proj;        // [H, I]
};

// Activation buffers, by index.
enum Buffer : size_t { kHidden, kNormed, kQkv, kAttnOut, kGateUp, kMlpAct, kProj, kLastRows, kNumBuffers };

class Qwen3Model final : public Model {
 public:
  Qwen3Model(const ModelConfig& config, Backend& backend)
      : config_(config), backend_(backend), act_(backend, config.dtype) {}

  Status load(const Checkpoint& checkpoint);
  const ModelConfig& config() const override { return config_; }
  MemorySpec memory_spec() const override {
    return MemorySpec{config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim, config_.dtype};
  }
  void forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) override;

 private:
  void attention_block(const Qwen3Layer& layer, const KvCacheView& cache, const StepBatch& batch,
                       int32_t sliding_window);
  void mlp_block(const Qwen3Layer& layer, int64_t num_tokens);

  ModelConfig config_;
  Backend& backend_;
  Activations act_;
  Tensor embed_tokens_;  // [V, H]
  Tensor final_norm_;    // [H]
  Tensor lm_head_;       // [V, H]; shares embed_tokens_ when tied
  Tensor inv_freq_;      // [hd / 2], f32
  float rope_scaling_ = 1.0f;
  std::vector<Qwen3Layer> layers_;
};

Status Qwen3Model::load(const Checkpoint& checkpoint) {
  const int64_t h = config_.hidden_size, hd = config_.head_dim, nh = config_.num_attention_heads,
                nkv = config_.num_key_value_heads, inter = config_.intermediate_size, v = config_.vocab_size;
  WeightLoader loader(checkpoint, backend_, backend_.weight_dtype(config_.dtype));
  PAGELLM_ASSIGN_OR_RETURN(embed_tokens_, loader.load("model.embed_tokens.weight", {v, h}));
  PAGELLM_ASSIGN_OR_RETURN(final_norm_, loader.load("model.norm.weight", {h}));
  if (loader.has("lm_head.weight")) {
    PAGELLM_ASSIGN_OR_RETURN(lm_head_, loader.load("lm_head.weight", {v, h}));
  } else if (config_.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    return invalid_argument("[checkpoint] tensor 'lm_head.weight' is missing and tie_word_embeddings is false");
  }
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    Qwen3Layer layer;
    PAGELLM_ASSIGN_OR_RETURN(layer.input_norm, loader.load(p + "input_layernorm.weight", {h}));
    PAGELLM_ASSIGN_OR_RETURN(layer.qkv_proj,
                             loader.load_rows({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                               p + "self_attn.v_proj.weight"},
                                              {{nh * hd, h}, {nkv * hd, h}, {nkv * hd, h}}));
    PAGELLM_ASSIGN_OR_RETURN(layer.q_norm, loader.load(p + "self_attn.q_norm.weight", {hd}));
    PAGELLM_ASSIGN_OR_RETURN(layer.k_norm, loader.load(p + "self_attn.k_norm.weight", {hd}));
    PAGELLM_ASSIGN_OR_RETURN(layer.o_proj, loader.load(p + "self_attn.o_proj.weight", {h, nh * hd}));
    PAGELLM_ASSIGN_OR_RETURN(layer.post_norm, loader.load(p + "post_attention_layernorm.weight", {h}));
    PAGELLM_ASSIGN_OR_RETURN(layer.gate_up_proj,
                             loader.load_rows({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                                              {{inter, h}, {inter, h}}));
    PAGELLM_ASSIGN_OR_RETURN(layer.down_proj, loader.load(p + "mlp.down_proj.weight", {h, inter}));
    layers_.push_back(std::move(layer));
  }
  PAGELLM_ASSIGN_OR_RETURN(RopeTable rope, make_rope_table(config_.rope, hd));
  Tensor inv_freq_host = Tensor::cpu({static_cast<int64_t>(rope.inv_freq.size())}, DType::kF32);
  std::copy(rope.inv_freq.begin(), rope.inv_freq.end(), inv_freq_host.ptr<float>());
  inv_freq_ = backend_.alloc(inv_freq_host.shape(), DType::kF32);
  backend_.copy(inv_freq_.view(), inv_freq_host.view());
  rope_scaling_ = rope.attention_scaling;

  act_.define(kHidden, h);
  act_.define(kNormed, h);
  act_.define(kQkv, (nh + 2 * nkv) * hd);
  act_.define(kAttnOut, nh * hd);
  act_.define(kGateUp, 2 * inter);
  act_.define(kMlpAct, inter);
  act_.define(kProj, h);
  act_.define(kLastRows, h);
  return Status::ok();
}

void Qwen3Model::forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) {
  CHECK(static_cast<int64_t>(caches.attention_layers.size()) == config_.num_hidden_layers && !layers_.empty());
  const int64_t num_tokens = batch.num_tokens;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  TensorView hidden = act_.rows(kHidden, num_tokens);  // [T, H], the residual stream
  TensorView normed = act_.rows(kNormed, num_tokens);  // [T, H], the input of the next block
  TensorView proj = act_.rows(kProj, num_tokens);      // [T, H], the output of the last block
  backend_.embedding(hidden, embed_tokens_, batch.token_ids);
  backend_.rms_norm(normed, hidden, layers_.front().input_norm, eps, NormWeight::kPlain);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const bool sliding = config_.layer_types[i] == LayerType::kSlidingAttention;
    const int32_t window = sliding && config_.sliding_window ? static_cast<int32_t>(*config_.sliding_window) : -1;
    attention_block(layers_[i], caches.attention_layers[i], batch, window);
    // Each block's residual add is fused with the norm that opens the next block.
    backend_.add_rms_norm(hidden, normed, proj, layers_[i].post_norm, eps, NormWeight::kPlain);
    mlp_block(layers_[i], num_tokens);
    if (i + 1 < layers_.size()) backend_.add_rms_norm(hidden, normed, proj, layers_[i + 1].input_norm, eps, NormWeight::kPlain);
  }
  backend_.add(hidden, hidden, proj);
  // Only the rows that sample go through the final norm and the vocabulary projection.
  const int64_t num_rows = batch.logits_rows.numel();
  TensorView last = act_.rows(kLastRows, num_rows);  // [R, H]
  backend_.embedding(last, hidden, batch.logits_rows);
  backend_.rms_norm(last, last, final_norm_, eps, NormWeight::kPlain);
  backend_.matmul(logits, last, lm_head_);
}

// Reads the normed input rows (kNormed), writes the block's output projection (kProj).
void Qwen3Model::attention_block(const Qwen3Layer& layer, const KvCacheView& cache, const StepBatch& batch,
                                 int32_t sliding_window) {
  const int64_t num_tokens = batch.num_tokens, hd = config_.head_dim, nh = config_.num_attention_heads,
                nkv = config_.num_key_value_heads;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  TensorView normed = act_.rows(kNormed, num_tokens);   // [T, H]
  TensorView qkv = act_.rows(kQkv, num_tokens);         // [T, (nH + 2 nKV) hd]
  TensorView attn = act_.rows(kAttnOut, num_tokens);    // [T, nH hd]
  TensorView proj = act_.rows(kProj, num_tokens);       // [T, H]
  backend_.matmul(qkv, normed, layer.qkv_proj);
  TensorView q = head_columns(qkv, 0, nh, hd);             // [T, nH, hd]
  TensorView k = head_columns(qkv, nh * hd, nkv, hd);      // [T, nKV, hd]
  TensorView v = head_columns(qkv, (nh + nkv) * hd, nkv, hd);
  // Per-head q/k norm before RoPE, then k and v into the paged cache: one fused op.
  backend_.qk_norm_rope_write_kv(q, k, v, layer.q_norm, layer.k_norm, eps, NormWeight::kPlain, batch.positions,
                                 inv_freq_, rope_scaling_, cache.k, cache.v, batch.slot_mapping);
  AttentionParams params;
  params.cu_seqlens_q = batch.cu_seqlens_q;
  params.seq_lens_k = batch.seq_lens_k;
  params.block_tables = batch.block_tables;
  params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  params.sliding_window = sliding_window;
  params.max_seqlen_q = batch.max_seqlen_q;
  params.max_seqlen_k = batch.max_seqlen_k;
  backend_.attention(attn.reshape({num_tokens, nh, hd}), q, cache.k, cache.v, params);
  backend_.matmul(proj, attn, layer.o_proj);
}

// Reads the normed rows (kNormed), writes the MLP's output (kProj).
void Qwen3Model::mlp_block(const Qwen3Layer& layer, int64_t num_tokens) {
  TensorView normed = act_.rows(kNormed, num_tokens);
  TensorView gate_up = act_.rows(kGateUp, num_tokens);  // [T, 2 I]
  TensorView mlp_act = act_.rows(kMlpAct, num_tokens);  // [T, I]
  TensorView proj = act_.rows(kProj, num_tokens);
  backend_.matmul(gate_up, normed, layer.gate_up_proj);
  backend_.silu_mul(mlp_act, gate_up);
  backend_.matmul(proj, mlp_act, layer.down_proj);
}

Status validate_qwen3_config(const ModelConfig& c) {
  if (c.hidden_act != "silu")
    return unimplemented("[config] hidden_act '{}' is not supported for Qwen3 (silu is)", c.hidden_act);
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    return invalid_argument("[config] num_attention_heads {} is not a multiple of num_key_value_heads {}",
                            c.num_attention_heads, c.num_key_value_heads);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return invalid_argument("[config] head_dim must be even and > 0, got {}", c.head_dim);
  if (static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers)
    return invalid_argument("[config] layer_types has {} entries for {} layers", c.layer_types.size(),
                            c.num_hidden_layers);
  for (LayerType t : c.layer_types)
    if (t == LayerType::kLinearAttention)
      return invalid_argument("[config] Qwen3 has no linear_attention layers");
  return Status::ok();
}

}  // namespace

Expected<std::unique_ptr<Model>> make_qwen3(const ModelConfig& config, const Checkpoint& checkpoint,
                                            Backend& backend) {
  PAGELLM_RETURN_IF_ERROR(validate_qwen3_config(config));
  auto model = std::make_unique<Qwen3Model>(config, backend);
  PAGELLM_RETURN_IF_ERROR(model->load(checkpoint));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace pagellm
