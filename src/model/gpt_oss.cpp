// gpt-oss (GptOssForCausalLM, transformers' modeling_gpt_oss): the shared decoder with q/k/v/o biases,
// attention sinks (one learned logit per head in the softmax denominator), alternating sliding /
// full layers (layer_types, sliding_window), YaRN RoPE (truncate: false), RMSNorms that multiply by
// the weight in f32, and every FFN a MoE (MoeStyle::kGptOss: router with bias, softmax over the top-k
// logits, experts with biases and the clamped SwiGLU; MXFP4 or dense experts, model/gpt_oss_moe.cpp).
#include "model/decoder.h"

namespace pagellm {

Expected<std::unique_ptr<Model>> make_gpt_oss(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend) {
  if (config.num_experts <= 0 || config.num_experts_per_tok <= 0 || config.num_experts_per_tok > config.num_experts)
    return invalid_argument("[config] gpt-oss needs num_local_experts > 0 and 0 < num_experts_per_tok <= "
                            "num_local_experts (got {}, {})",
                            config.num_experts, config.num_experts_per_tok);
  if (config.swiglu_limit != static_cast<double>(kClampedSwigluLimit))
    return unimplemented("[config] gpt-oss swiglu_limit {} is not supported (pagellm's clamped SwiGLU uses {})",
                         config.swiglu_limit, kClampedSwigluLimit);
  if (config.decoder_sparse_step != 1 || !config.mlp_only_layers.empty())
    return unimplemented("[config] gpt-oss with dense FFN layers (decoder_sparse_step / mlp_only_layers) is not supported");
  ModelConfig c = config;
  c.moe_intermediate_size = config.intermediate_size;  // gpt-oss's experts are intermediate_size wide
  DecoderSpec spec;
  spec.family = "gpt-oss";
  spec.norm_mode = NormWeight::kF32Weight;  // (self.weight * hidden_states).to(input_dtype)
  spec.qkv_bias = spec.o_bias = config.attention_bias;
  spec.attention_sinks = true;
  spec.moe = true;
  spec.moe_style = MoeStyle::kGptOss;
  return make_decoder(c, spec, checkpoint, backend);
}

}  // namespace pagellm
