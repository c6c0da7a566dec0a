// The CPU quantized matmuls (Backend::matmul_fp8_block, Backend::matmul_int4): the readable reference.
//
// W is never dequantized whole: each thread takes blocks of W's rows, dequantizes one block into an
// f32 scratch that stays in L2 (the same block size as gemm.cpp's column blocks) and runs the f32
// GEMM of gemm.h on it. Every output element is then exactly the batch-invariant sum of gemm.h over
// its row of x and its dequantized row of W: the result is bitwise cpu::matmul on the f32 W that
// dequantize_*_rows gives (the tests check it), whatever M, the blocking or the thread count.
//
// Dequantization, in f32 (one rounding each):
//   fp8:  W[n, k] = e4m3(w[n, k]) * w_scale[n / block_n, k / block_k]   (e4m3 -> f32 is exact)
//   int4: W[n, k] = float(q[n, k] - zero[n, k / g]) * scale[n, k / g]  (q - zero is an exact integer)
//   mxfp4: W[n, k] = e2m1(nibble) * 2^(scale[n, k / 32] - 127)          (exact: a power of two times e2m1)
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace pagellm {
class ThreadPool;
}

namespace pagellm::cpu {

// out[M, N] = x[M, K] . W^T, the contract of Backend::matmul_fp8_block: w [N, K] f8_e4m3 contiguous,
// w_scale [ceil(N / block_n), ceil(K / block_k)] f32 contiguous; x, out any float dtype with row
// strides and unit column strides. Computes in f32, rounds once to out's dtype.
void matmul_fp8_block(TensorView out, const TensorView& x, const TensorView& w, const TensorView& w_scale,
                      int64_t block_n, int64_t block_k, ThreadPool* pool = nullptr);

// out[M, N] = x[M, K] . W^T, the contract of Backend::matmul_int4: qweight [N, K / 8] i32 (nibble j
// of word k / 8 is q[n, k] for j = k % 8), scales [N, K / group_size] f32, zeros [N, K / group_size]
// u8, all contiguous; K % group_size == 0, group_size % 8 == 0.
void matmul_int4(TensorView out, const TensorView& x, const TensorView& qweight, const TensorView& scales,
                 const TensorView& zeros, int64_t group_size, ThreadPool* pool = nullptr);

// out[M, N] = x[M, K] . W^T, the contract of Backend::matmul_mxfp4: blocks [N, K / 2] u8 (byte j of
// row n: element 2j in the low nibble, 2j + 1 in the high one), scales [N, K / 32] u8 (e8m0), both
// contiguous; K % 32 == 0.
void matmul_mxfp4(TensorView out, const TensorView& x, const TensorView& blocks, const TensorView& scales,
                  ThreadPool* pool = nullptr);

// Rows [n0, n1) of the dequantized W into dst (row-major [n1 - n0, K] f32): what the matmuls
// multiply by. The operands are checked as the matmuls check them.
void dequantize_fp8_block_rows(const TensorView& w, const TensorView& w_scale, int64_t block_n, int64_t block_k,
                               int64_t n0, int64_t n1, float* dst);
void dequantize_int4_rows(const TensorView& qweight, const TensorView& scales, const TensorView& zeros,
                          int64_t group_size, int64_t n0, int64_t n1, float* dst);
void dequantize_mxfp4_rows(const TensorView& blocks, const TensorView& scales, int64_t n0, int64_t n1, float* dst);

}  // namespace pagellm::cpu
