// The INT4 product of more than 16 rows on the GPU (int4_gemm.cu): a tensor-core GEMM that reads W as
// 4-bit words and dequantizes it in registers (Marlin's idea), instead of dequantizing W into a
// 16-bit copy for cuBLASLt. Measured on an H100 (docs/PERFORMANCE.md, PrintsInt4GemmThroughput) it
// wins only where its grid fills the GPU and the batch is small: Qwen3-8B's gate|up [24576, 4096]
// at 16..64 rows, 1.4-1.5x faster than dequantization + cuBLASLt (up to 16 rows now go to the
// quantized GEMV, quant_gemv.h, 2.3x faster again at 16); at 128 rows, or with fewer column blocks
// than SMs (q|k|v, down), it lost (no split K, one 64 x 128 tile per block). Layout and math:
// QuantWeight kInt4 (quant_gemv.h); the CPU twin is backend/cpu/quant_gemm.h.
//
// Plain C++ header (no fmt/Tensor), like kernels.h: cuda_backend.cpp validates and calls it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/quant_gemv.h"
#include "core/dtype.h"

namespace pagellm::cuda {

// Rows of x the GEMM takes at most (see above).
inline constexpr int64_t kInt4GemmMaxRows = 64;
// Dynamic shared memory of a block at most (the ring plus the block's scales for all of K).
inline constexpr int64_t kInt4GemmMaxSmemBytes = 160 * 1024;

// Whether the GEMM takes the product: bf16/f16 x of kQuantGemvMaxRows < m <= kInt4GemmMaxRows rows,
// 16-byte aligned with ld_x % 8 == 0, an INT4 weight (block_n 1) of at least 128 num_sms rows (a
// column of blocks per SM) whose K and group size are multiples of 64, and K / group small enough for
// the staged scales.
bool int4_gemm_applies(DType dtype, const QuantWeight& w, const void* x, int64_t ld_x, int64_t m, int num_sms);

// Compute capability 8.0+ (mma.sync, cp.async) with kInt4GemmMaxSmemBytes of shared memory per
// block. Asks the driver: call it once.
bool int4_gemm_device_supported(int device);

// out[m, n] (row stride ld_out) = x[m, k] (row stride ld_x) . W^T, f32 accumulation, rounded once to
// dtype; needs int4_gemm_applies() (else cudaErrorInvalidValue).
cudaError_t launch_int4_gemm(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w,
                             int64_t m, int num_sms, cudaStream_t stream);

}  // namespace pagellm::cuda
