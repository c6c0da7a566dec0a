// Qwen3.5 and Qwen3-Next hybrid decoders (spec/models.md B): Gated DeltaNet layers (gdn_mixer.h)
// interleaved with gated full-attention layers (q/gate interleaved per head in q_proj, (1+w) q/k
// norms, partial RoPE, sigmoid gate before o_proj), (1+w) RMSNorm everywhere but the GDN output
// norm, and a dense SwiGLU MLP (Qwen3.5) or a MoE with shared expert (Qwen3-Next, moe_ffn.h).
//
//   architectures            weights under
//   Qwen3_5ForCausalLM       model.*  (or model.language_model.*)
//   Qwen3_5ForConditionalGeneration  model.language_model.*  (model.visual.* ignored)
//
// mtp.* (the multi-token-prediction head) loads only for method mtp (model/mtp_model.h).
//   Qwen3NextForCausalLM     model.*  (fused in_proj_qkvz / in_proj_ba, regrouped at load)
//
// Text positions make Qwen3.5's interleaved M-RoPE the plain partial RoPE (all three streams equal).
#pragma once

#include <memory>

#include "io/safetensors.h"
#include "model/model.h"

namespace pagellm {

Expected<std::unique_ptr<Model>> make_qwen35(const ModelConfig& config, const Checkpoint& checkpoint,
                                             Backend& backend);

}  // namespace pagellm
