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
