#include "model/rope_table.h"

#include <algorithm>
#include <cmath>

namespace pagellm {

namespace {

// transformers computes inv_freq = 1 / (base ** (arange(0, d, 2).float() / d)) in f32.
std::vector<float> default_inv_freq(double theta, int64_t rot_dim) {
  std::vector<float> inv_freq(static_cast<size_t>(rot_dim / 2));
  for (int64_t m = 0; m < rot_dim / 2; ++m) {
    const float exponent = static_cast<float>(2 * m) / static_cast<float>(rot_dim);
    inv_freq[static_cast<size_t>(m)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return inv_freq;
}

// spec/models.md A.6 (YaRN).
RopeTable yarn_table(const RopeConfig& rope, int64_t rot_dim) {
  const double d = static_cast<double>(rot_dim);
  const double base = rope.theta, factor = rope.factor;
  const double l0 = static_cast<double>(rope.original_max_position_embeddings);
  auto corr_dim = [&](double rotations) {
    return d * std::log(l0 / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
  };
  double low = corr_dim(rope.beta_fast), high = corr_dim(rope.beta_slow);
  if (rope.truncate) {  // transformers' default; gpt-oss configures truncate: false
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1.0);
  if (low == high) high += 0.001;
  RopeTable table;
  const std::vector<float> extrapolation = default_inv_freq(base, rot_dim);
  table.inv_freq.resize(extrapolation.size());
  for (size_t m = 0; m < extrapolation.size(); ++m) {
    const float interpolation = extrapolation[m] / static_cast<float>(factor);
    const float ramp = static_cast<float>(std::clamp((static_cast<double>(m) - low) / (high - low), 0.0, 1.0));
    const float extrapolation_factor = 1.0f - ramp;
    table.inv_freq[m] = interpolation * (1.0f - extrapolation_factor) + extrapolation[m] * extrapolation_factor;
  }
  table.attention_scaling = static_cast<float>(rope.attention_factor.value_or(0.1 * std::log(factor) + 1.0));
  return table;
}

// transformers' _compute_llama3_parameters, in f32 as torch evaluates it (scalars meet f32 tensors
// as f32): low frequencies divided by factor, high ones kept, the band between interpolated.
RopeTable llama3_table(const RopeConfig& rope, int64_t rot_dim) {
  const float factor = static_cast<float>(rope.factor);
  const float low_freq_factor = static_cast<float>(rope.low_freq_factor);
  const float old_context_len = static_cast<float>(rope.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(rope.original_max_position_embeddings / rope.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(rope.original_max_position_embeddings / rope.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * M_PI);
  RopeTable table{default_inv_freq(rope.theta, rot_dim), 1.0f};
  for (float& inv_freq : table.inv_freq) {
    const float wavelen = two_pi / inv_freq;
    const float scaled = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
    const float smooth = (old_context_len / wavelen - low_freq_factor) /
                         static_cast<float>(rope.high_freq_factor - rope.low_freq_factor);
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    inv_freq = is_medium ? smoothed : scaled;
  }
  return table;
}

}  // namespace

Expected<RopeTable> make_rope_table(const RopeConfig& rope, int64_t head_dim) {
  int64_t rot_dim = static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  rot_dim -= rot_dim % 2;
  if (rot_dim <= 0 || rot_dim > head_dim)
    return invalid_argument("[config] rotary dims {} invalid for head_dim {}", rot_dim, head_dim);
  if (rope.type == "default" || rope.type.empty()) return RopeTable{default_inv_freq(rope.theta, rot_dim), 1.0f};
  if (rope.type == "linear") {
    RopeTable table{default_inv_freq(rope.theta, rot_dim), 1.0f};
    for (float& f : table.inv_freq) f /= static_cast<float>(rope.factor);
    return table;
  }
  if (rope.type == "yarn") {
    if (rope.original_max_position_embeddings <= 0)
      return invalid_argument("[config] yarn rope_scaling needs original_max_position_embeddings");
    return yarn_table(rope, rot_dim);
  }
  if (rope.type == "llama3") {
    if (rope.original_max_position_embeddings <= 0 || !(rope.factor > 0) ||
        !(rope.high_freq_factor > rope.low_freq_factor) || !(rope.low_freq_factor > 0))
      return invalid_argument("[config] llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor "
                              "and original_max_position_embeddings");
    return llama3_table(rope, rot_dim);
  }
  return unimplemented("[config] rope type '{}' is not supported (default, linear, yarn, llama3 are)", rope.type);
}

}  // namespace pagellm
