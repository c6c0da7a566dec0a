// The INT4 product of more than 8 rows on the GPU (int4_gemm.cu): a tensor-core GEMM that reads W as
// 4-bit words and dequantizes it in registers, for the batch sizes between the decode GEMV
// (quant_gemv.h, M <= 8) and prefill-sized products, where dequantizing W into a 16-bit copy for
// cuBLASLt costs less than the mma.sync kernel's lower peak. Layout and math: QuantWeight kInt4
// (quant_gemv.h); the CPU twin is backend/cpu/quant_gemm.h.
//
// Plain C++ header (no fmt/Tensor), like kernels.h: cuda_backend.cpp validates and calls it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/quant_gemv.h"
#include "core/dtype.h"

namespace pagellm::cuda {

// Rows of x the GEMM takes at most: above, dequantization + cuBLASLt was faster on an H100
// (docs/PERFORMANCE.md, CudaInt4Gemm.PrintsThroughput).
inline constexpr int64_t kInt4GemmMaxRows = 512;
// Dynamic shared memory of a block at most (the ring plus the block's scales for all of K).
inline constexpr int64_t kInt4GemmMaxSmemBytes = 160 * 1024;

// Whether the GEMM takes the product: bf16/f16 x of kQuantGemvMaxRows < m <= kInt4GemmMaxRows rows,
// 16-byte aligned with ld_x % 8 == 0, an INT4 weight (block_n 1) whose K and group size are
// multiples of 64, and K / group small enough for the staged scales.
bool int4_gemm_applies(DType dtype, const QuantWeight& w, const void* x, int64_t ld_x, int64_t m);

// Compute capability 8.0+ (mma.sync, cp.async) with kInt4GemmMaxSmemBytes of shared memory per
// block. Asks the driver: call it once.
bool int4_gemm_device_supported(int device);

// out[m, n] (row stride ld_out) = x[m, k] (row stride ld_x) . W^T, f32 accumulation, rounded once to
// dtype; needs int4_gemm_applies() (else cudaErrorInvalidValue).
cudaError_t launch_int4_gemm(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w,
                             int64_t m, cudaStream_t stream);

}  // namespace pagellm::cuda
