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

}  // namespace pagellm
