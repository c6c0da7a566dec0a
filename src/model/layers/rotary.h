// Rotary: one RoPE variant's inverse frequencies on the backend's device (models whose layer types
// rotate differently hold one per type).
#pragma once

#include "backend/backend.h"
#include "io/model_config.h"

namespace pagellm::layers {

struct Rotary {
  Tensor inv_freq;                 // [rot_dim / 2], f32
  float attention_scaling = 1.0f;  // multiplies cos and sin (yarn)
};

// rot_dim = head_dim * partial_rotary_factor; unknown RoPE types are an error naming the type.
Expected<Rotary> make_rotary(Backend& backend, const RopeConfig& rope, int64_t head_dim);

}  // namespace pagellm::layers
