// Element types of tensors and exact conversions between them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace pagellm {

// kF8E4M3: OCP float8 e4m3fn (bias 7, no infinities, max 448, NaN 0x7f/0xff), as safetensors'
// F8_E4M3 and torch.float8_e4m3fn; used for quantized weights and the FP8 KV cache.
enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU8, kF8E4M3 };

size_t dtype_size_bytes(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
bool parse_dtype(std::string_view name, DType* out);  // accepts "f32"/"float32", "bf16"/"bfloat16", ...

// bf16 = the top 16 bits of an f32. Round to nearest, ties to even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float bf16_bits_to_f32(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// What transformers does when it casts an f32 activation to bf16 and back: the value bf16 can hold.
inline float round_to_bf16(float value) { return bf16_bits_to_f32(f32_to_bf16_bits(value)); }

// IEEE binary16, round to nearest even, subnormals and infinities exact.
uint16_t f32_to_f16_bits(float value);
float f16_bits_to_f32(uint16_t bits);
inline float round_to_f16(float value) { return f16_bits_to_f32(f32_to_f16_bits(value)); }

// float8 e4m3fn. Narrowing rounds to nearest even and saturates to +-448 (CUDA's satfinite
// conversion, what vLLM's FP8 KV cache and quantizers use); NaN stays NaN.
uint8_t f32_to_e4m3_bits(float value);
float e4m3_bits_to_f32(uint8_t bits);
inline float round_to_e4m3(float value) { return e4m3_bits_to_f32(f32_to_e4m3_bits(value)); }

// MXFP4 (OCP microscaling; gpt-oss's experts): 4-bit e2m1 codes in groups of 32 sharing one e8m0
// exponent byte. Code c (sign bit 3) is kE2m1Values[c]; the group's scale is 2^(e - 127).
inline constexpr int64_t kMxfp4Group = 32;
inline constexpr float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
inline float e8m0_to_f32(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 127); }
inline constexpr float kE4M3Max = 448.0f;

// Rounds `value` to what `dtype` can hold (f32: unchanged).
inline float round_to_dtype(float value, DType dtype) {
  switch (dtype) {
    case DType::kBF16: return round_to_bf16(value);
    case DType::kF16: return round_to_f16(value);
    case DType::kF8E4M3: return round_to_e4m3(value);
    default: return value;
  }
}

// Widen `count` elements of `src` (f32, bf16, f16 or f8_e4m3) into f32.
void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t count);
// Narrow `count` f32 values into `dst` of `dst_dtype` (f32, bf16, f16 or f8_e4m3).
void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t count);

}  // namespace pagellm
