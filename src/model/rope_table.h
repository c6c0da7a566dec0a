// RoPE frequencies from a RopeConfig (default, linear, yarn), computed once at load in f32.
#pragma once

#include <vector>

#include "core/status.h"
#include "io/model_config.h"

namespace pagellm {

struct RopeTable {
  std::vector<float> inv_freq;  // [rot_dim / 2]
  float attention_scaling = 1.0f;  // multiplies cos and sin (yarn)
};

// rot_dim = head_dim * partial_rotary_factor (rounded down to even).
Expected<RopeTable> make_rope_table(const RopeConfig& rope, int64_t head_dim);

}  // namespace pagellm
