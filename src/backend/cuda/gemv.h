// The matrix product of decode-sized batches: out[M, N] = x[M, K] . w[N, K]^T for M <= 8 rows of x,
// all operands bf16 or f16, f32 accumulation, rounded once (nearest-even) into out. At M = 1 the
// product is a stream of w through the SMs; cuBLASLt's tiles, made for large M, reach ~30% of HBM
// bandwidth there, this kernel is built to stream w at close to full bandwidth (gemv.cu says how).
//
// Row m of out depends only on row m of x and on (N, K): the same sums in the same order whatever M
// is, so decode stays batch invariant for M <= 8.
//
// Plain C++ header (no fmt/Tensor), like kernels.h: CublasLtMatmul::run decides and calls it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::cuda {

inline constexpr int64_t kGemvMaxRows = 8;  // the largest M the GEMV takes (the mma's N dimension)

// The launch geometry gemv.cu measured, shared with the quantized GEMV (quant_gemv.cu): blocks of at
// most kGemvMaxWarps warps at <= 64 registers a thread (two blocks an SM), each warp with a round of
// kGemvRoundBytes of loads a lane in flight.
inline constexpr int kGemvMaxWarps = 16;
inline constexpr int kGemvRoundBytes = 64;

// Warps per tile of output columns for a product of num_tiles tiles of `steps` steps each, a warp
// issuing the loads of steps_per_round steps at once: from (N, K, device) only, never from M (batch
// invariance). gemv.cu's header says how it was chosen.
int64_t gemv_warps_per_tile(int64_t num_tiles, int64_t steps, int steps_per_round, int num_sms);

// Whether launch_gemv takes this product: bf16/f16, 1 <= m <= 8, and x and w read as 16-byte pieces
// (8 elements): k, ld_x, ld_w multiples of 8 and x, w 16-byte aligned. out has no constraint (it is
// written one element at a time). Strides in elements.
inline bool gemv_applies(DType dtype, const void* x, int64_t ld_x, const void* w, int64_t ld_w, int64_t m,
                         int64_t k) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return false;
  if (m < 1 || m > kGemvMaxRows || k % 8 != 0) return false;
  if ((m > 1 && ld_x % 8 != 0) || ld_w % 8 != 0) return false;
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

// Compute capability 8.0+ (the kernel's mma.sync.m16n8k16). Asks the driver: call it once, not per product.
bool gemv_device_supported(int device);

// out (row stride ld_out), x [m, k] (row stride ld_x), w [n, k] (row stride ld_w); strides in elements.
// bias [n] (out's dtype) or nullptr: each output rounded, then the bias added and rounded again, the
// bits of a separate add_bias. Needs gemv_applies() (else cudaErrorInvalidValue) and a device of compute
// capability 8.0+ (mma.sync; the caller checks, once: see gemv_device_supported); num_sms: the device's
// multiprocessors (the launch geometry, gemv.cu); returns the launch's status.
cudaError_t launch_gemv(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x, const void* w,
                        int64_t ld_w, int64_t m, int64_t n, int64_t k, const void* bias, int num_sms,
                        cudaStream_t stream);

}  // namespace pagellm::cuda
