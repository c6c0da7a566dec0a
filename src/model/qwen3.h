// Qwen3 dense decoder (spec/models.md A): pre-norm blocks of GQA attention with per-head q/k RMSNorm
// and rotate-half RoPE, SwiGLU MLP, tied or untied head.
#pragma once

#include <memory>

#include "io/safetensors.h"
#include "model/model.h"

namespace pagellm {

Expected<std::unique_ptr<Model>> make_qwen3(const ModelConfig& config, const Checkpoint& checkpoint,
                                            Backend& backend);

}  // namespace pagellm
