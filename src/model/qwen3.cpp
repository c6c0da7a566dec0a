// Qwen3 (spec/models.md A): GQA attention with per-head q/k RMSNorm, rotate-half RoPE, SwiGLU MLP,
// plain RMSNorm, tied or untied head.
#include "model/qwen3.h"

#include "model/decoder.h"

namespace pagellm {

Expected<std::unique_ptr<Model>> make_qwen3(const ModelConfig& config, const Checkpoint& checkpoint,
                                            Backend& backend) {
  DecoderSpec spec;
  spec.family = "Qwen3";
  spec.qk_norm = true;
  return make_decoder(config, spec, checkpoint, backend);
}

// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention, sparse MoE FFNs without a shared expert.
Expected<std::unique_ptr<Model>> make_qwen3_moe(const ModelConfig& config, const Checkpoint& checkpoint,
                                                Backend& backend) {
  if (config.num_experts <= 0 || config.num_experts_per_tok <= 0 ||
      config.num_experts_per_tok > config.num_experts || config.moe_intermediate_size <= 0)
    return invalid_argument("[config] Qwen3-MoE needs num_experts > 0, 0 < num_experts_per_tok <= num_experts and "
                            "moe_intermediate_size > 0 (got {}, {}, {})",
                            config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size);
  DecoderSpec spec;
  spec.family = "Qwen3-MoE";
  spec.qk_norm = true;
  spec.moe = true;
  return make_decoder(config, spec, checkpoint, backend);
}

}  // namespace pagellm
