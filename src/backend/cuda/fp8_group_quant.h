// The two small kernels around the W8A8 product of block-scaled FP8 weights (cuda_backend.cpp's
// matmul_fp8_block for M > 8, cublaslt_fp8_matmul.h): the dynamic per-token, per-128-group FP8
// quantization of the activations (Backend::quantize_fp8_groups; CPU twin cpu/fp8_group_quant.h,
// bitwise equal) and the padding of a weight's block scales to the row pitch cuBLASLt reads.
//
// Plain C++ header (no fmt/Tensor), like kernels.h: cuda_backend.cpp validates and calls it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::cuda {

inline constexpr int64_t kFp8GroupCols = 128;  // columns of x per activation scale

// Whether launch_quantize_fp8_groups takes x: f32/bf16/f16, k a multiple of 128, x 16-byte aligned
// with a row pitch (ld_x elements) that is a multiple of 16 bytes (each thread loads 16 bytes).
bool quantize_fp8_groups_applies(DType dtype, const void* x, int64_t ld_x, int64_t k);

// x [m, k] (row stride ld_x) -> x_fp8 [m, k] e4m3 contiguous and scales [k / 128, m] f32
// (scales[g * m + r] = max|x[r, group g]| / 448, 1 where 0; x_fp8 = e4m3 satfinite(x / scale)).
// cudaErrorInvalidValue unless quantize_fp8_groups_applies().
cudaError_t launch_quantize_fp8_groups(DType dtype, uint8_t* x_fp8, float* scales, const void* x, int64_t ld_x,
                                       int64_t m, int64_t k, cudaStream_t stream);

// dst [rows, ld_dst] = src [rows, cols] (contiguous f32) with columns [cols, ld_dst) set to 1:
// a weight's block scales with the row pitch cuBLASLt's BLK128x128_32F mode assumes.
cudaError_t launch_pad_block_scales(float* dst, int64_t ld_dst, const float* src, int64_t rows, int64_t cols,
                                    cudaStream_t stream);

}  // namespace pagellm::cuda
