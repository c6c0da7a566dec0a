// The W8A8 product of block-scaled FP8 weights on Hopper's FP8 tensor cores, through cuBLASLt's block
// scaling (CUDA 12.9+, compute capability 9.0):
//
//   out[m, n] = sum_k (x_fp8[m, k] * x_scales[k / 128, m]) * (w[n, k] * w_scales[n / 128, k / 128])
//
// with f32 accumulation, rounded once to out's dtype (bf16 or f16). The x operand comes from
// fp8_group_quant.h. Bytes read per product: the FP8 weight once (1 byte an element, where the
// dequantization path writes and then reads a 2-byte copy), the activations twice (16-bit, then FP8).
//
// Row-major to cuBLASLt's column-major as in cublaslt_matmul.h: out^T (N x M) = w^T-op A (column-major
// K x N, TRANSA = T) . B (x_fp8^T, column-major K x M). FP8 on Hopper needs exactly this "TN" form,
// so the weight is A and carries the 2-D mode, the activations are B and carry the 1-D mode:
//   A scale mode CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: one f32 per 128 x 128 block of w, at
//     w_scales[nb * ld_w_scales + kb] with ld_w_scales = round_up(ceil(k / 128), 4) (cuBLASLt's pitch:
//     a checkpoint's [ceil(n / 128), ceil(k / 128)] scales fit as they are when k % 512 == 0; else the
//     caller pads a copy, fp8_group_quant.h launch_pad_block_scales);
//   B scale mode CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: one f32 per 128 elements of a column of B
//     (a row of x), at x_scales[kb * m + r] (group-major, tokens contiguous).
// The same convention as torch._scaled_mm's DeepSeek recipe (1x128 activations, 128x128 weights).
//
// Plans (descriptors and the heuristic's algorithm) are cached per shape and output alignment; the
// scale pointers are set on the cached descriptor at every call (host-side, so graph capture is fine).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.h"

namespace pagellm::cuda {

// Row pitch (in scales) of a weight's block scales as cuBLASLt's BLK128x128_32F mode reads them.
inline int64_t fp8_block_scales_pitch(int64_t k) { return ((k + 127) / 128 + 3) / 4 * 4; }

class CublasLtFp8Matmul {
 public:
  explicit CublasLtFp8Matmul(cudaStream_t stream);
  ~CublasLtFp8Matmul();
  CublasLtFp8Matmul(const CublasLtFp8Matmul&) = delete;
  CublasLtFp8Matmul& operator=(const CublasLtFp8Matmul&) = delete;

  // Whether cuBLASLt has an algorithm for this product (asked once per shape, then cached): out of
  // dtype bf16/f16 with row stride ld_out; x_fp8 [m, k] and w [n, k] contiguous. Launches nothing.
  bool supports(DType dtype, const void* out, int64_t ld_out, int64_t m, int64_t n, int64_t k);

  // The product above; needs supports() to have said yes for the same arguments.
  void run(DType dtype, void* out, int64_t ld_out, const void* x_fp8, const float* x_scales, const void* w,
           const float* w_scales, int64_t m, int64_t n, int64_t k);

 private:
  // (dtype, m, n, k, ld_out, alignment of out in bytes)
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int>;
  struct Plan {
    bool found = false;  // cuBLASLt had an algorithm (else nothing below is set)
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  Key key_of(DType dtype, const void* out, int64_t ld_out, int64_t m, int64_t n, int64_t k) const;
  Plan make_plan(const Key& key);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace pagellm::cuda
