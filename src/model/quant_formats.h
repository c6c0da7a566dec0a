// The quantized weight formats of Hugging Face checkpoints, on the host: unpacking AWQ and GPTQ
// tensors into the one INT4 layout the backends compute with (Backend::matmul_int4), and the
// quantizers that make-model and the tests use to write each format from f32 weights.
//
// pagellm's INT4 layout (row n = output feature, k = input feature, g = group_size):
//   qweight [N, K / 8] i32, nibble j (bits 4j..4j+3) of word k / 8 = q[n, k] for j = k % 8
//   scales  [N, K / g]  f32,  zeros [N, K / g] u8,   W[n, k] = (q[n, k] - zeros[n, k / g]) * scales[n, k / g]
// AWQ (AutoAWQ GEMM): qweight [K, N / 8] i32 whose word c holds columns 8c + {0, 2, 4, 6, 1, 3, 5, 7} in
//   nibbles 0..7; qzeros [K / g, N / 8] packed the same way; scales [K / g, N] f16.
// GPTQ: qweight [K / 8, N] i32 whose word r holds rows 8r + j in nibble j; qzeros [K / g, N / 8] i32 with
//   column 8c + j in nibble j, holding zero - 1 in the v1 format (the zero itself in gptq_v2); scales
//   [K / g, N] f16; g_idx [K] = k / g (desc_act false).
// FP8 (block-scaled): weight [N, K] e4m3 bytes, weight_scale_inv [ceil(N / bn), ceil(K / bk)],
//   W[n, k] = e4m3(weight[n, k]) * scale[n / bn, k / bk].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace pagellm {

struct Int4Weight {
  int64_t rows = 0, cols = 0, group_size = 0;  // N, K, g
  std::vector<int32_t> qweight;                // [rows, cols / 8]
  std::vector<float> scales;                   // [rows, cols / g]
  std::vector<uint8_t> zeros;                  // [rows, cols / g]
};

struct Fp8BlockWeight {
  int64_t rows = 0, cols = 0, block_n = 0, block_k = 0;
  std::vector<uint8_t> weight;  // [rows, cols] e4m3 bits
  std::vector<float> scales;    // [ceil(rows / block_n), ceil(cols / block_k)]
};

// The checkpoint's tensors of one AWQ or GPTQ projection (i32 words and scales widened to f32).
struct PackedInt4 {
  std::vector<int32_t> qweight, qzeros;
  std::vector<float> scales;  // [K / g, N]
};

// AWQ / GPTQ tensors of a [N = out, K = in] projection -> pagellm's layout. Checks sizes and, for
// GPTQ, that g_idx (when given) is k / g; errors name `what`.
Expected<Int4Weight> unpack_awq(const PackedInt4& packed, int64_t out_features, int64_t in_features,
                                int64_t group_size, const std::string& what);
Expected<Int4Weight> unpack_gptq(const PackedInt4& packed, const std::vector<int32_t>& g_idx, int64_t out_features,
                                 int64_t in_features, int64_t group_size, bool v2, const std::string& what);
// The reverse, for writers (make-model) and round-trip tests.
PackedInt4 pack_awq(const Int4Weight& weight);
PackedInt4 pack_gptq(const Int4Weight& weight, bool v2);

// Round-to-nearest quantizers of row-major w [rows, cols] (f32).
//   int4, asymmetric (AWQ-style): per group scale = (max - min) / 15, zero = round(-min / scale).
//   int4, symmetric (GPTQ sym): scale = 2 max|w| / 15, zero = 8.
Int4Weight quantize_int4(const float* w, int64_t rows, int64_t cols, int64_t group_size, bool symmetric);
//   fp8: per block scale = max|w| / 448, weight = e4m3(w / scale).
Fp8BlockWeight quantize_fp8_block(const float* w, int64_t rows, int64_t cols, int64_t block_n, int64_t block_k);

// W in f32, row-major [rows, cols] (the reference the kernels and the tests dequantize to).
std::vector<float> dequantize(const Int4Weight& weight);
std::vector<float> dequantize(const Fp8BlockWeight& weight);

// Stacks projections by rows (a fused q|k|v or gate|up). FP8 scale rows stack as they are when
// every part's rows are a multiple of block_n; otherwise the result holds one scale row per weight
// row (block_n 1), so a part that ends inside a block keeps its own scales.
Int4Weight stack_rows(const std::vector<Int4Weight>& parts);
Fp8BlockWeight stack_rows(const std::vector<Fp8BlockWeight>& parts);

}  // namespace pagellm
