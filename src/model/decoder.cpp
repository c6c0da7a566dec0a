#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "model/activations.h"
#include "model/layers/attention.h"
#include "model/layers/embedding.h"
#include "model/layers/gated_mlp.h"
#include "model/moe_ffn.h"

namespace pagellm {

namespace {

using layers::AttentionWeights;
using layers::MlpWeights;
using layers::RmsNorm;

struct DecoderLayer {
  RmsNorm input_norm;           // before attention
  AttentionWeights attention;
  RmsNorm post_attention_norm;  // on the attention output (sandwich norms), else undefined
  RmsNorm pre_ffn_norm;         // before the MLP
  MlpWeights mlp;               // a dense layer's FFN
  std::optional<MoeWeights> moe;  // a sparse layer's FFN (DecoderSpec::moe)
  RmsNorm post_ffn_norm;        // on the MLP output (sandwich norms), else undefined
};

// Activation buffers, by index.
enum Buffer : size_t { kHidden, kNormed, kProj, kLastRows, kShardLogits };

layers::AttentionShape attention_shape(const ModelConfig& c) {
  return {c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim};
}

class DecoderModel final : public Model {
 public:
  // `local_attention` is this rank's shard of the heads (all of them without tensor parallelism).
  DecoderModel(const ModelConfig& config, const DecoderSpec& spec, Backend& backend,
               const layers::AttentionShape& local_attention)
      : config_(config),
        spec_(spec),
        backend_(backend),
        comm_(backend.communicator()),
        local_attention_(local_attention),
        act_(backend, config.dtype),
        attention_(backend, config.dtype, local_attention),
        mlp_(backend, config.dtype,
             layers::intermediate_shard(config.intermediate_size, backend.tensor_parallel_rank(),
                                        backend.tensor_parallel_size()).count) {
    if (spec.moe) moe_ffn_.emplace(config, backend, spec.moe_style);
  }

  Status load(const Checkpoint& checkpoint);
  const ModelConfig& config() const override { return config_; }
  MemorySpec memory_spec() const override {
    MemorySpec spec{config_.num_hidden_layers, local_attention_.num_kv_heads, config_.head_dim, config_.dtype};
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
      const int32_t window = attention_options(i).sliding_window;
      spec.attention_windows.push_back(window > 0 ? window : -1);  // -1 = full
    }
    return spec;
  }
  void forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) override;

 private:
  bool is_moe_layer(int64_t index) const;
  Status load_layer(WeightLoader& loader, int64_t index, DecoderLayer& layer);
  layers::AttentionOptions attention_options(int64_t layer_index) const;
  float eps() const { return static_cast<float>(config_.rms_norm_eps); }
  // Tensor parallelism: a row-parallel block's partial output summed over the ranks.
  void reduce(TensorView partial) {
    if (comm_ != nullptr) comm_->all_reduce_sum(partial);
  }

  ModelConfig config_;
  DecoderSpec spec_;
  Backend& backend_;
  Communicator* comm_;  // nullptr without tensor parallelism
  layers::AttentionShape local_attention_;
  ShardRange vocab_shard_;  // the logits columns this rank computes
  Activations act_;
  layers::Attention attention_;
  layers::GatedMlp mlp_;
  std::optional<MoeFfn> moe_ffn_;
  Activation activation_ = Activation::kSilu;
  layers::TokenEmbedding embedding_;
  layers::LmHead head_;
  layers::Rotary rotary_;                       // full-attention layers (all layers unless rotary_local_)
  std::optional<layers::Rotary> rotary_local_;  // sliding layers that rotate differently (Gemma 3)
  std::vector<DecoderLayer> layers_;
};

layers::AttentionOptions DecoderModel::attention_options(int64_t i) const {
  layers::AttentionOptions options;
  options.scale = spec_.attention_scale > 0.0f ? spec_.attention_scale
                                               : 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  const bool sliding = config_.layer_types[static_cast<size_t>(i)] == LayerType::kSlidingAttention;
  options.sliding_window = sliding && config_.sliding_window ? static_cast<int32_t>(*config_.sliding_window) : -1;
  options.softcap = spec_.attn_softcap;
  return options;
}

Status DecoderModel::load_layer(WeightLoader& loader, int64_t i, DecoderLayer& layer) {
  const int64_t h = config_.hidden_size;
  const NormWeight mode = spec_.norm_mode;
  const std::string p = fmt::format("{}layers.{}.", spec_.weight_prefix, i);
  PAGELLM_ASSIGN_OR_RETURN(layer.input_norm, layers::load_rms_norm(loader, p + "input_layernorm.weight", h, mode, eps()));
  layers::AttentionLoadOptions attention;
  attention.qkv_bias = spec_.qkv_bias;
  attention.o_bias = spec_.o_bias;
  attention.qk_norm = spec_.qk_norm;
  attention.sinks = spec_.attention_sinks;
  attention.qk_norm_mode = mode;
  attention.eps = eps();
  PAGELLM_ASSIGN_OR_RETURN(layer.attention,
                           layers::load_attention(loader, p + "self_attn.", attention_shape(config_), attention));
  const bool sliding = config_.layer_types[static_cast<size_t>(i)] == LayerType::kSlidingAttention;
  layer.attention.rotary = sliding && rotary_local_ ? &*rotary_local_ : &rotary_;
  layer.attention.options = attention_options(i);
  if (spec_.sandwich_norms) {
    PAGELLM_ASSIGN_OR_RETURN(layer.post_attention_norm,
                             layers::load_rms_norm(loader, p + "post_attention_layernorm.weight", h, mode, eps()));
    PAGELLM_ASSIGN_OR_RETURN(layer.pre_ffn_norm,
                             layers::load_rms_norm(loader, p + "pre_feedforward_layernorm.weight", h, mode, eps()));
    PAGELLM_ASSIGN_OR_RETURN(layer.post_ffn_norm,
                             layers::load_rms_norm(loader, p + "post_feedforward_layernorm.weight", h, mode, eps()));
  } else {
    PAGELLM_ASSIGN_OR_RETURN(layer.pre_ffn_norm,
                             layers::load_rms_norm(loader, p + "post_attention_layernorm.weight", h, mode, eps()));
  }
  if (is_moe_layer(i)) {
    if (spec_.moe_style == MoeStyle::kGptOss) {
      PAGELLM_ASSIGN_OR_RETURN(layer.moe, load_gpt_oss_moe_weights(loader, backend_, config_, p + "mlp."));
    } else {
      PAGELLM_ASSIGN_OR_RETURN(layer.moe, load_moe_weights(loader, backend_, loader.weight_dtype(), config_, p + "mlp."));
    }
    return Status::ok();
  }
  PAGELLM_ASSIGN_OR_RETURN(layer.mlp, layers::load_gated_mlp(loader, p + "mlp.", h, config_.intermediate_size,
                                                             activation_, spec_.mlp_bias));
  return Status::ok();
}

bool DecoderModel::is_moe_layer(int64_t i) const {
  const std::vector<int64_t>& dense = config_.mlp_only_layers;
  return spec_.moe && config_.num_experts > 0 && std::find(dense.begin(), dense.end(), i) == dense.end() &&
         (i + 1) % config_.decoder_sparse_step == 0;
}

Status DecoderModel::load(const Checkpoint& checkpoint) {
  const int64_t h = config_.hidden_size, v = config_.vocab_size;
  PAGELLM_ASSIGN_OR_RETURN(activation_, layers::parse_activation(config_.hidden_act));
  WeightLoader loader(checkpoint, backend_, backend_.weight_dtype(config_.dtype), config_.quantization);
  PAGELLM_ASSIGN_OR_RETURN(rotary_, layers::make_rotary(backend_, config_.rope, config_.head_dim));
  if (config_.rope_local) {
    PAGELLM_ASSIGN_OR_RETURN(layers::Rotary local, layers::make_rotary(backend_, *config_.rope_local, config_.head_dim));
    rotary_local_ = std::move(local);
  }
  const std::string& m = spec_.weight_prefix;
  PAGELLM_ASSIGN_OR_RETURN(embedding_.table, loader.load(m + "embed_tokens.weight", {v, h}));
  if (spec_.scale_embeddings) {
    // transformers multiplies by sqrt(hidden) held in the activation dtype.
    embedding_.scale = round_to_dtype(static_cast<float>(std::sqrt(static_cast<double>(h))), config_.dtype);
  }
  PAGELLM_ASSIGN_OR_RETURN(head_.final_norm, layers::load_rms_norm(loader, m + "norm.weight", h, spec_.norm_mode, eps()));
  // The embedding table is whole on every rank; the head is split by vocabulary rows over the ranks.
  vocab_shard_ = shard_range(v, backend_.tensor_parallel_rank(), backend_.tensor_parallel_size());
  PAGELLM_ASSIGN_OR_RETURN(head_.weight, layers::load_head_weight(loader, embedding_.table, config_.tie_word_embeddings,
                                                                  v, h, vocab_shard_));
  head_.final_softcap = spec_.final_softcap;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    DecoderLayer layer;
    PAGELLM_RETURN_IF_ERROR(load_layer(loader, i, layer));
    layers_.push_back(std::move(layer));
  }
  act_.define(kHidden, h);
  act_.define(kNormed, h);
  act_.define(kProj, h);
  act_.define(kLastRows, h);
  if (comm_ != nullptr) act_.define(kShardLogits, std::max<int64_t>(vocab_shard_.count, 1));
  return Status::ok();
}

void DecoderModel::forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) {
  CHECK(static_cast<int64_t>(caches.attention_layers.size()) == config_.num_hidden_layers && !layers_.empty());
  const int64_t num_tokens = batch.num_tokens;
  TensorView hidden = act_.rows(kHidden, num_tokens);  // [T, H], the residual stream
  TensorView normed = act_.rows(kNormed, num_tokens);  // [T, H], the input of the next block
  TensorView proj = act_.rows(kProj, num_tokens);      // [T, H], the output of the last block
  embedding_.forward(backend_, hidden, batch.token_ids);
  layers_.front().input_norm.forward(backend_, normed, hidden);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DecoderLayer& layer = layers_[i];
    attention_.forward(layer.attention, caches.attention_layers[i], batch, normed, proj);
    reduce(proj);
    if (layer.post_attention_norm.defined()) layer.post_attention_norm.forward(backend_, proj, proj);
    // Each block's residual add is fused with the norm that opens the next block.
    layer.pre_ffn_norm.add_forward(backend_, hidden, normed, proj);
    const layers::RmsNorm* next_norm = i + 1 < layers_.size() ? &layers_[i + 1].input_norm : nullptr;
    // A MoE block's combine takes the residual add and the next block's norm along where nothing comes
    // between them (no all-reduce, no sandwich norm).
    if (layer.moe && next_norm != nullptr && comm_ == nullptr && !layer.post_ffn_norm.defined()) {
      const MoeFfn::ResidualNorm then{hidden, normed, next_norm};
      moe_ffn_->forward(*layer.moe, normed, proj, &then);
      continue;
    }
    if (layer.moe) moe_ffn_->forward(*layer.moe, normed, proj);
    else mlp_.forward(layer.mlp, normed, proj);
    reduce(proj);
    if (layer.post_ffn_norm.defined()) layer.post_ffn_norm.forward(backend_, proj, proj);
    if (next_norm != nullptr) next_norm->add_forward(backend_, hidden, normed, proj);
  }
  // Only the rows that sample take the last residual add, the final norm and the vocabulary projection.
  TensorView last = act_.rows(kLastRows, batch.logits_rows.numel());  // [R, H]
  if (comm_ == nullptr) {
    head_.forward_rows(backend_, logits, last, hidden, proj, batch.logits_rows);
    return;
  }
  TensorView shard = act_.rows(kShardLogits, last.size(0)).reshape({last.size(0), vocab_shard_.count});  // [R, V / N]
  head_.forward_rows(backend_, shard, last, hidden, proj, batch.logits_rows);
  comm_->gather_columns(logits, shard);  // rank 0's logits[R, V]
}

Status validate_decoder_config(const ModelConfig& c, const DecoderSpec& spec) {
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
      return invalid_argument("[config] {} has no linear_attention layers", spec.family);
  PAGELLM_RETURN_IF_ERROR(layers::parse_activation(c.hidden_act).status());
  return Status::ok();
}

}  // namespace

Expected<std::unique_ptr<Model>> make_decoder(const ModelConfig& config, const DecoderSpec& spec,
                                              const Checkpoint& checkpoint, Backend& backend) {
  PAGELLM_RETURN_IF_ERROR(validate_decoder_config(config, spec));
  const int tp_size = backend.tensor_parallel_size();
  PAGELLM_ASSIGN_OR_RETURN(const layers::AttentionShard shard,
                           layers::attention_shard(attention_shape(config), backend.tensor_parallel_rank(), tp_size));
  if (spec.moe && config.num_experts > 0 && spec.moe_style == MoeStyle::kGptOss)
    PAGELLM_RETURN_IF_ERROR(gpt_oss_expert_shard(config.moe_intermediate_size, backend.tensor_parallel_rank(), tp_size)
                                .status());
  auto model = std::make_unique<DecoderModel>(config, spec, backend, shard.local);
  PAGELLM_RETURN_IF_ERROR(model->load(checkpoint));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace pagellm
