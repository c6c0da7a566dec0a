// The kinds of norm weight and gated activation the backend ops take (backend.h), in a header of
// their own so the CUDA kernels' declarations (cuda/kernels.h) can name them too.
#pragma once

namespace pagellm {

enum class NormWeight {
  kPlain,    // Qwen3/Llama: out = w * cast_to_out_dtype(x * rsqrt(mean(x^2) + eps))
  kOnePlus,  // Qwen3.5/Gemma: out = cast_to_out_dtype(x * rsqrt(mean(x^2) + eps) * (1 + w)), f32 math
  kF32Weight,  // gpt-oss: out = cast_to_out_dtype(x * rsqrt(mean(x^2) + eps) * w), f32 math
};

// The activation of a gated MLP (act(gate) * up).
enum class Activation {
  kSilu,      // x * sigmoid(x)
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): transformers' gelu_pytorch_tanh
  // gpt-oss's clamped SwiGLU, not of the act(gate) * up form: g = min(gate, 7), u = clamp(up, -7, 7),
  // out = (u + 1) * (g * sigmoid(1.702 g)), each of 1.702 g, the sigmoid, g * sigmoid, u + 1 and the
  // product rounded to out's dtype (transformers' GptOssExperts in the activation dtype).
  kClampedSwiglu,
};
inline constexpr float kClampedSwigluAlpha = 1.702f;
inline constexpr float kClampedSwigluLimit = 7.0f;

}  // namespace pagellm
