// ModelConfig: what a model needs from config.json, normalised across transformers v4 and v5 forms.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/quant_config.h"

namespace pagellm {

enum class LayerType { kFullAttention, kSlidingAttention, kLinearAttention };

struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";  // "default", "yarn", "linear", ...
  double factor = 1.0;           // scaling factor (yarn, linear)
  int64_t original_max_position_embeddings = 0;  // yarn
  double beta_fast = 32.0, beta_slow = 1.0;      // yarn
  bool truncate = true;                          // yarn: floor/ceil the ramp's ends (gpt-oss: false)
  std::optional<double> attention_factor;        // yarn; default 0.1 ln(factor) + 1
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double partial_rotary_factor = 1.0;            // rot_dim = head_dim * this
  std::vector<int64_t> mrope_section;            // Qwen3.5 (text positions make it plain partial RoPE)
  bool mrope_interleaved = false;
};

struct ModelConfig {
  std::string architecture;  // first of "architectures", e.g. "Qwen3ForCausalLM"
  std::string model_type;    // "qwen3", "qwen3_5_text", ...
  DType dtype = DType::kF32;  // "dtype" (v5) or "torch_dtype" (v4); activation dtype
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // absent/null -> num_attention_heads
  int64_t head_dim = 0;             // explicit, else hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  RopeConfig rope;                       // full-attention layers (and every layer unless rope_local)
  std::optional<RopeConfig> rope_local;  // sliding layers, when they rotate differently (Gemma 3)
  std::optional<int64_t> sliding_window;  // only when use_sliding_window (Qwen) or always (others)
  std::vector<LayerType> layer_types;     // one per layer, always filled
  std::optional<double> attn_logit_softcapping;
  std::optional<double> final_logit_softcapping;
  std::optional<double> query_pre_attn_scalar;  // attention scale = this^-0.5 (Gemma); else head_dim^-0.5
  bool attention_bias = false;  // q, k, v and o projections carry biases (Llama's attention_bias)
  bool mlp_bias = false;        // gate, up and down projections carry biases
  double swiglu_limit = 7.0;    // gpt-oss's clamped SwiGLU (the only value transformers' bf16 experts use)
  std::vector<int64_t> eos_token_ids;  // int or list in config.json; may be empty
  std::optional<int64_t> bos_token_id;
  QuantConfig quantization;  // "quantization_config"; method kNone when absent

  // Hybrid Gated DeltaNet fields (Qwen3.5 / Qwen3-Next); 0 when absent.
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;
  int64_t full_attention_interval = 0;
  // MoE fields (Qwen3-Next / Qwen3.5-MoE); 0 when absent.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
};

}  // namespace pagellm
