#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "core/dtype.h"

namespace pagellm {
namespace {

float from_bits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f808000u)), 0x3f80);
  // 1 + 3*2^-8 is halfway between odd 0x3f81 and even 0x3f82: goes up to even.
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f818000u)), 0x3f82);
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f808001u)), 0x3f81);  // just above halfway
  EXPECT_EQ(f32_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80);
  // The largest finite f32 rounds up to infinity in bf16, as torch does.
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(DType, Bf16RoundTripIsExactForRepresentableValues) {
  for (uint32_t hi = 0; hi < 0x10000u; hi += 7) {
    if (((hi << 16) & 0x7f800000u) == 0x7f800000u) continue;  // inf / nan
    const float v = from_bits(hi << 16);
    EXPECT_EQ(f32_to_bf16_bits(v), hi);
  }
}

TEST(DType, F16ExactConversions) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16_bits(-2.5f), 0xc100);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // halfway to 65536 rounds to even -> inf
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // halfway, ties to even (0)
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units -> 2 (even)
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  // 1 + 2^-11 is halfway between 1 and the next f16: ties to even -> 1.
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(std::nanf("")))));
}

TEST(DType, F16RoundTripOfEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7c00u) == 0x7c00u) continue;
    const float v = f16_bits_to_f32(static_cast<uint16_t>(h));
    EXPECT_EQ(f32_to_f16_bits(v), h) << std::hex << h;
  }
  EXPECT_EQ(f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_to_f32(0x03ff), std::ldexp(1023.0f, -24));
}

TEST(DType, E4M3RoundTripOfEveryFiniteCode) {
  for (uint32_t b = 0; b < 256; ++b) {
    if ((b & 0x7fu) == 0x7fu) {
      EXPECT_TRUE(std::isnan(e4m3_bits_to_f32(static_cast<uint8_t>(b))));
      continue;
    }
    const float v = e4m3_bits_to_f32(static_cast<uint8_t>(b));
    if (b == 0x80u) {  // -0 keeps its sign
      EXPECT_EQ(f32_to_e4m3_bits(v), 0x80u);
      continue;
    }
    EXPECT_EQ(f32_to_e4m3_bits(v), b) << std::hex << b;
  }
  EXPECT_EQ(e4m3_bits_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_bits_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_bits_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_bits_to_f32(0x08), std::ldexp(1.0f, -6));
}

// Every f32 goes to the nearest e4m3 value (ties to the even code), saturating at +-448: checked
// against a search over all 127 non-negative codes for values spread over the whole range.
TEST(DType, E4M3RoundsToNearestEvenAndSaturates) {
  auto nearest = [](float magnitude) {
    uint8_t best = 0;
    for (uint8_t b = 1; b <= 0x7e; ++b) {
      const double d_new = std::fabs(static_cast<double>(e4m3_bits_to_f32(b)) - magnitude);
      const double d_best = std::fabs(static_cast<double>(e4m3_bits_to_f32(best)) - magnitude);
      if (d_new < d_best || (d_new == d_best && (b & 1u) == 0)) best = b;
    }
    return best;
  };
  for (int i = 0; i < 20000; ++i) {
    const float magnitude = std::ldexp(1.0f + static_cast<float>(i % 997) / 997.0f, (i % 19) - 12);
    if (magnitude > 448.0f) continue;
    EXPECT_EQ(f32_to_e4m3_bits(magnitude), nearest(magnitude)) << magnitude;
    EXPECT_EQ(f32_to_e4m3_bits(-magnitude), 0x80u | nearest(magnitude)) << magnitude;
  }
  // Midpoints: 1 + 1/16 lies between 1 (0x38, even) and 1.125 (0x39): ties go to 1.
  EXPECT_EQ(f32_to_e4m3_bits(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3_bits(1.1875f), 0x3a);  // between 1.125 (odd) and 1.25 (even)
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: to 0
  EXPECT_EQ(f32_to_e4m3_bits(std::ldexp(3.0f, -10)), 0x02);  // 1.5 subnormal units: to 2 (even)
  EXPECT_EQ(f32_to_e4m3_bits(1000.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3_bits(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_e4m3_bits(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_TRUE(std::isnan(round_to_e4m3(std::nanf(""))));
  EXPECT_EQ(dtype_size_bytes(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "f8_e4m3");
}

TEST(DType, ParseNames) {
  DType d;
  ASSERT_TRUE(parse_dtype("bfloat16", &d));
  EXPECT_EQ(d, DType::kBF16);
  ASSERT_TRUE(parse_dtype("float32", &d));
  EXPECT_EQ(d, DType::kF32);
  EXPECT_FALSE(parse_dtype("int4", &d));
  EXPECT_EQ(dtype_size_bytes(DType::kBF16), 2u);
}

}  // namespace
}  // namespace pagellm
