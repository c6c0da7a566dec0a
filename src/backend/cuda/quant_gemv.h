// Quantized weights on the GPU: the decode-sized GEMV that streams them once and dequantizes in
// registers (quant_gemv.cu), and the dequantization into a 16-bit or f32 copy that larger products
// multiply through cuBLASLt (quant_dequant.cu; INT4 batches on large weights: int4_gemm.h). Layouts and dequantization are Backend's
// (backend.h matmul_fp8_block / matmul_int4); the CPU twin is backend/cpu/quant_gemm.h.
//
// Plain C++ header (no fmt/Tensor), like kernels.h: cuda_backend.cpp validates and calls it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::cuda {

enum class QuantFormat { kFp8Block, kInt4, kMxfp4 };

// One quantized weight W [n, k], all arrays contiguous on the device:
//   kFp8Block: data = w [n, k] e4m3 bytes, scales [ceil(n / block_n), ceil(k / block_k)] f32, zeros null;
//              W[r, c] = e4m3(w[r, c]) * scales[r / block_n, c / block_k]
//   kInt4:     data = qweight [n, k / 8] u32 words (nibble j of word c / 8 = q[r, c], j = c % 8),
//              scales [n, k / block_k] f32, zeros [n, k / block_k] u8, block_n = 1, block_k = group size;
//              W[r, c] = (q[r, c] - zeros[r, c / block_k]) * scales[r, c / block_k]
//   kMxfp4:    data = blocks [n, k / 2] u8 (byte c / 2: element c in the low nibble when c is even, the
//              high one when odd), exponents [n, k / 32] u8 (e8m0), scales null, block_n = 1, block_k = 32;
//              W[r, c] = e2m1(nibble) * 2^(exponents[r, c / 32] - 127). The GEMV does not take it (the
//              dequantization path does).
struct QuantWeight {
  QuantFormat format = QuantFormat::kFp8Block;
  const void* data = nullptr;
  const float* scales = nullptr;
  const uint8_t* zeros = nullptr;
  const uint8_t* exponents = nullptr;  // kMxfp4
  int64_t n = 0, k = 0;
  int64_t block_n = 1, block_k = 1;
};

// Two groups of 8 x rows share each converted weight (quant_gemv.cu), so decode batches of up to 16
// rows stream W once.
inline constexpr int64_t kQuantGemvMaxRows = 16;

// Bytes of w one lane reads per step (16, 8 or 4: the widest the layout allows), or 0 when the GEMV
// does not take the product. It takes bf16/f16 x with 1 <= m <= 16, x 16-byte aligned with ld_x a
// multiple of 8 (m > 1), a 16-byte aligned weight, and a step (4 lanes' pieces of k) that lies
// inside one scale block: fp8 block_k 32 or 64 (for 16-byte pieces) times a power of two and block_n
// a multiple of 16 (one scale per tile of 16 rows), int4 group size 32 (64, 128) times a power of two,
// K < 2^31 and a multiple of the piece, fewer than 2^31 scales. Everything else goes through dequantization.
int quant_gemv_lane_bytes(DType dtype, const QuantWeight& w, const void* x, int64_t ld_x, int64_t m);

// out[m, n] (row stride ld_out) = x[m, k] (row stride ld_x) . W^T, f32 accumulation, rounded once to
// dtype. Needs quant_gemv_lane_bytes() > 0 (else cudaErrorInvalidValue) and compute capability 8.0+
// (mma.sync; see quant_gemv_device_supported). Row r of out depends only on row r of x (batch
// invariant for m <= 16, as gemv.h for its 8). num_sms: the device's multiprocessors (gemv.cu's launch geometry).
cudaError_t launch_quant_gemv(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x,
                              const QuantWeight& w, int64_t m, int num_sms, cudaStream_t stream);

// Compute capability 8.0+ (the mma.sync of gemv.cu). Asks the driver: call it once.
bool quant_gemv_device_supported(int device);

// dst [n, k] contiguous, of dtype (f32, bf16 or f16) = W rounded once from its f32 value (the CPU's
// dequantization, then one rounding to dtype).
cudaError_t launch_dequantize(DType dtype, void* dst, const QuantWeight& w, cudaStream_t stream);

}  // namespace pagellm::cuda
