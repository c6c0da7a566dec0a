// The quantized weight formats on the host: AWQ / GPTQ layouts (nibble orders, v1 zero offsets, g_idx)
// unpack into pagellm's INT4 layout and pack back; the quantizers' error bounds; fused-row stacking.
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "model/quant_formats.h"

namespace pagellm {
namespace {

// q[n, k] = (n + 3 k) % 16, scales and zeros distinct per (row, group).
Int4Weight pattern_weight(int64_t rows, int64_t cols, int64_t group) {
  Int4Weight w;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group;
  w.qweight.assign(static_cast<size_t>(rows * cols / 8), 0);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t k = 0; k < cols; ++k) {
      const uint32_t q = static_cast<uint32_t>((n + 3 * k) % 16);
      auto& word = w.qweight[static_cast<size_t>(n * (cols / 8) + k / 8)];
      word = static_cast<int32_t>(static_cast<uint32_t>(word) | (q << (4 * (k % 8))));
    }
  for (int64_t i = 0; i < rows * (cols / group); ++i) {
    w.scales.push_back(0.125f * static_cast<float>(i + 1));
    w.zeros.push_back(static_cast<uint8_t>((5 * i) % 16));
  }
  return w;
}

void expect_same(const Int4Weight& a, const Int4Weight& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.qweight, b.qweight);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.zeros, b.zeros);
}

TEST(QuantFormats, AwqWordsHoldColumnsInAutoAwqOrder) {
  // One input row, 8 output columns whose q is the column index: AutoAWQ stores columns
  // 0, 2, 4, 6, 1, 3, 5, 7 in nibbles 0..7 of the word.
  Int4Weight w;
  w.rows = 8;
  w.cols = 8;
  w.group_size = 8;
  for (int n = 0; n < 8; ++n) w.qweight.push_back(n);  // q[n, 0] = n, the other k are 0
  w.scales.assign(8, 1.0f);
  w.zeros.assign(8, 0);
  const PackedInt4 packed = pack_awq(w);
  EXPECT_EQ(static_cast<uint32_t>(packed.qweight[0]), 0x75316420u);
  auto back = unpack_awq(packed, 8, 8, 8, "t");
  ASSERT_TRUE(back.has_value()) << back.status().message();
  expect_same(*back, w);
}

TEST(QuantFormats, AwqRoundTrip) {
  const Int4Weight w = pattern_weight(24, 64, 32);
  auto back = unpack_awq(pack_awq(w), 24, 64, 32, "t");
  ASSERT_TRUE(back.has_value()) << back.status().message();
  expect_same(*back, w);
}

TEST(QuantFormats, GptqV1StoresZeroMinusOneAndRoundTrips) {
  Int4Weight w = pattern_weight(16, 64, 32);
  std::fill(w.zeros.begin(), w.zeros.end(), 8);  // symmetric: zero 8 is stored as 7 in every nibble
  const PackedInt4 v1 = pack_gptq(w, false);
  for (int32_t word : v1.qzeros) EXPECT_EQ(static_cast<uint32_t>(word), 0x77777777u);
  auto back = unpack_gptq(v1, {}, 16, 64, 32, false, "t");
  ASSERT_TRUE(back.has_value()) << back.status().message();
  expect_same(*back, w);
  // Zeros of every value, in both formats (v1's zero 0 is stored as 15 and read back as 0).
  const Int4Weight any = pattern_weight(16, 64, 32);
  for (bool v2 : {false, true}) {
    auto again = unpack_gptq(pack_gptq(any, v2), {}, 16, 64, 32, v2, "t");
    ASSERT_TRUE(again.has_value());
    expect_same(*again, any);
  }
}

TEST(QuantFormats, GptqWordsHoldEightInputRows) {
  Int4Weight w;
  w.rows = 8;
  w.cols = 8;
  w.group_size = 8;
  // Row 0: q[0, k] = k + 1; GPTQ's word [0, 0] holds rows k = 0..7 of column 0 in nibbles 0..7.
  w.qweight = {static_cast<int32_t>(0x87654321u), 0, 0, 0, 0, 0, 0, 0};
  w.scales.assign(8, 1.0f);
  w.zeros.assign(8, 8);
  const PackedInt4 packed = pack_gptq(w, false);
  EXPECT_EQ(static_cast<uint32_t>(packed.qweight[0]), 0x87654321u);
  EXPECT_EQ(packed.qweight[1], 0);  // column 1
}

TEST(QuantFormats, ActOrderGIdxIsRefused) {
  const Int4Weight w = pattern_weight(8, 64, 32);
  std::vector<int32_t> g_idx(64);
  for (int k = 0; k < 64; ++k) g_idx[static_cast<size_t>(k)] = k % 2;  // permuted groups
  auto got = unpack_gptq(pack_gptq(w, false), g_idx, 8, 64, 32, false, "model.layers.0.mlp.up_proj");
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.status().message(),
            "[checkpoint] model.layers.0.mlp.up_proj: g_idx[1] = 1 is not 1 / 32: act-order (desc_act) GPTQ weights "
            "are not supported");
}

TEST(QuantFormats, SizeMismatchIsAnError) {
  PackedInt4 packed = pack_awq(pattern_weight(8, 64, 32));
  packed.scales.pop_back();
  auto got = unpack_awq(packed, 8, 64, 32, "x");
  ASSERT_FALSE(got.has_value());
  EXPECT_NE(got.status().message().find("do not fit [8 out, 64 in] in groups of 32"), std::string::npos);
}

std::vector<float> ramp(int64_t count, float scale) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = scale * std::sin(0.37f * static_cast<float>(i));
  return values;
}

TEST(QuantFormats, Int4QuantizersStayWithinHalfAStep) {
  const std::vector<float> w = ramp(16 * 64, 0.3f);
  for (bool symmetric : {false, true}) {
    const Int4Weight q = quantize_int4(w.data(), 16, 64, 32, symmetric);
    const std::vector<float> back = dequantize(q);
    for (int64_t i = 0; i < 16 * 64; ++i) {
      const float scale = q.scales[static_cast<size_t>((i / 64) * 2 + (i % 64) / 32)];
      EXPECT_LE(std::fabs(back[static_cast<size_t>(i)] - w[static_cast<size_t>(i)]), 0.51f * scale + 1e-6f) << i;  // f16 scales: a hair over half a step
    }
    for (float s : q.scales) EXPECT_EQ(s, round_to_f16(s));  // stored as f16 without loss
    if (symmetric) for (uint8_t z : q.zeros) EXPECT_EQ(z, 8);
  }
}

TEST(QuantFormats, Fp8BlocksMapTheirLargestEntryTo448) {
  const int64_t rows = 200, cols = 160;  // blocks of 128 end inside both dimensions
  const std::vector<float> w = ramp(rows * cols, 2.5f);
  const Fp8BlockWeight q = quantize_fp8_block(w.data(), rows, cols, 128, 128);
  ASSERT_EQ(q.scales.size(), 4u);
  const std::vector<float> back = dequantize(q);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float x = w[static_cast<size_t>(i)];
    EXPECT_LE(std::fabs(back[static_cast<size_t>(i)] - x), std::fabs(x) / 16 + 2.5f / 448 / 512) << i;  // 3 mantissa bits; subnormals step by 2^-9 of the scale
  }
  float largest = 0;
  for (uint8_t bits : q.weight) largest = std::max(largest, std::fabs(e4m3_bits_to_f32(bits)));
  EXPECT_EQ(largest, 448.0f);
}

TEST(QuantFormats, StackingKeepsEveryPartsScales) {
  const std::vector<float> a = ramp(200 * 64, 1.0f), b = ramp(40 * 64, 7.0f);
  const Fp8BlockWeight qa = quantize_fp8_block(a.data(), 200, 64, 128, 128);
  const Fp8BlockWeight qb = quantize_fp8_block(b.data(), 40, 64, 128, 128);
  const Fp8BlockWeight fused = stack_rows(std::vector<Fp8BlockWeight>{qa, qb});
  EXPECT_EQ(fused.block_n, 1);  // 200 rows end inside a block: one scale row per weight row
  std::vector<float> want = dequantize(qa);
  const std::vector<float> tail = dequantize(qb);
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(dequantize(fused), want);

  const std::vector<float> c = ramp(256 * 64, 1.0f);
  const Fp8BlockWeight qc = quantize_fp8_block(c.data(), 256, 64, 128, 128);
  const Fp8BlockWeight aligned = stack_rows(std::vector<Fp8BlockWeight>{qc, qc});
  EXPECT_EQ(aligned.block_n, 128);
  EXPECT_EQ(aligned.scales.size(), 4u);
}

}  // namespace
}  // namespace pagellm
