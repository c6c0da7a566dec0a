#include "core/dtype.h"

#include <cmath>
#include <limits>

#include "core/check.h"

namespace pagellm {

size_t dtype_size_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kF8E4M3: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kF8E4M3: return "f8_e4m3";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  if (name == "f32" || name == "float32" || name == "float") *out = DType::kF32;
  else if (name == "bf16" || name == "bfloat16") *out = DType::kBF16;
  else if (name == "f16" || name == "float16" || name == "half") *out = DType::kF16;
  else return false;
  return true;
}

uint16_t f32_to_f16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs_bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  const int exponent = static_cast<int>(abs_bits >> 23) - 127;
  if (exponent >= -14) {  // normal f16
    const uint32_t mantissa = abs_bits & 0x7fffffu;
    uint32_t half = (static_cast<uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1;  // may carry into exponent
    return static_cast<uint16_t>(sign | half);
  }
  if (exponent < -25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal: value = m * 2^-24 with m < 1024; shift the full 24-bit significand.
  const uint32_t significand = (abs_bits & 0x7fffffu) | 0x800000u;
  // value / 2^-24 = significand * 2^(exponent + 1): shift right by 14..24 bits.
  const uint32_t shift = static_cast<uint32_t>(-exponent - 1);
  uint32_t half = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) half += 1;
  return static_cast<uint16_t>(sign | half);
}

float f16_bits_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    out = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    out = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &out, 4);
  return value;
}

uint8_t f32_to_e4m3_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  const float magnitude = std::fabs(value);
  if (magnitude >= kE4M3Max) return static_cast<uint8_t>(sign | 0x7eu);  // saturate (inf too)
  if (magnitude < 0.015625f) {  // below 2^-6: subnormal, m * 2^-9; rint rounds ties to even
    const auto m = static_cast<uint8_t>(std::nearbyint(magnitude * 512.0f));
    return static_cast<uint8_t>(sign | m);  // m == 8 is exactly the smallest normal's encoding
  }
  int exponent = 0;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent, [0.5, 1)
  int unbiased = exponent - 1;
  auto mantissa = static_cast<int>(std::nearbyint((fraction * 2.0f - 1.0f) * 8.0f));
  if (mantissa == 8) {
    mantissa = 0;
    ++unbiased;
  }
  if (unbiased > 8 || (unbiased == 8 && mantissa > 6)) return static_cast<uint8_t>(sign | 0x7eu);
  return static_cast<uint8_t>(sign | ((unbiased + 7) << 3) | mantissa);
}

float e4m3_bits_to_f32(uint8_t bits) {
  const float sign = (bits & 0x80u) ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t count) {
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::kBF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_bits_to_f32(in[i]);
      return;
    }
    case DType::kF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_bits_to_f32(in[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = e4m3_bits_to_f32(in[i]);
      return;
    }
    default:
      CHECK_MSG(false, "convert_to_f32 from {}", dtype_name(src_dtype));
  }
}

void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t count) {
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = f32_to_bf16_bits(src[i]);
      return;
    }
    case DType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = f32_to_f16_bits(src[i]);
      return;
    }
    case DType::kF8E4M3: {
      auto* out = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = f32_to_e4m3_bits(src[i]);
      return;
    }
    default:
      CHECK_MSG(false, "convert_from_f32 to {}", dtype_name(dst_dtype));
  }
}

}  // namespace pagellm
