// Gemma 2 and Gemma 3 (spec/models.md D): (1+w) RMSNorm before and after each block, GELU-tanh MLP,
// embeddings scaled by sqrt(hidden), attention scale query_pre_attn_scalar^-0.5, sliding and global
// layers (hf_config derives the pattern: 1:1 for Gemma 2, 5:1 for Gemma 3).
//   Gemma 2: attention and final logit soft-caps.
//   Gemma 3: (1+w) q/k norms; sliding layers rotate with their own base (ModelConfig::rope_local).
//     Gemma3ForConditionalGeneration keeps the text model under model.language_model. (transformers
//     v5) or language_model.model. (v4 checkpoints); the vision tower is not loaded.
#include <cmath>

#include "model/decoder.h"

namespace pagellm {

namespace {

DecoderSpec gemma_spec(const ModelConfig& config, const std::string& family) {
  DecoderSpec spec;
  spec.family = family;
  spec.norm_mode = NormWeight::kOnePlus;
  spec.sandwich_norms = true;
  spec.scale_embeddings = true;
  spec.qkv_bias = spec.o_bias = config.attention_bias;
  if (config.query_pre_attn_scalar)
    spec.attention_scale = static_cast<float>(std::pow(*config.query_pre_attn_scalar, -0.5));
  return spec;
}

}  // namespace

Expected<std::unique_ptr<Model>> make_gemma2(const ModelConfig& config, const Checkpoint& checkpoint,
                                             Backend& backend) {
  DecoderSpec spec = gemma_spec(config, "Gemma 2");
  spec.attn_softcap = static_cast<float>(config.attn_logit_softcapping.value_or(0.0));
  spec.final_softcap = static_cast<float>(config.final_logit_softcapping.value_or(0.0));
  return make_decoder(config, spec, checkpoint, backend);
}

Expected<std::unique_ptr<Model>> make_gemma3(const ModelConfig& config, const Checkpoint& checkpoint,
                                             Backend& backend) {
  DecoderSpec spec = gemma_spec(config, "Gemma 3");
  spec.qk_norm = true;
  // transformers 5 passes no soft-cap to Gemma 3's attention (only the final one is applied).
  spec.final_softcap = static_cast<float>(config.final_logit_softcapping.value_or(0.0));
  for (const char* prefix : {"model.language_model.", "language_model.model.", "model."}) {
    if (checkpoint.find(std::string(prefix) + "embed_tokens.weight") != nullptr) {
      spec.weight_prefix = prefix;
      break;
    }
  }
  return make_decoder(config, spec, checkpoint, backend);
}

}  // namespace pagellm
