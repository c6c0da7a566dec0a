// Matrix products: out[M, N] = x[M, K] . w[N, K]^T with row strides, f32 accumulation.
//
// Decode-sized bf16/f16 products (M <= 8, gemv.h's gemv_applies: k, ld_x multiples of 8, x and w
// 16-byte aligned) go to the GEMV of gemv.cu, which streams w at close to HBM bandwidth where
// cuBLASLt's tiles reach ~30% of it, and keeps rows batch invariant for M <= 8. Everything else, f32
// always (its fixtures want true f32 sums), goes to cuBLASLt. run(..., use_gemv = false) (KernelOptions::gemv,
// PAGELLM_CUDA_GEMV=0 for an engine) sends everything to cuBLASLt, so tests and benchmarks can compare
// the two paths (a captured CUDA graph keeps the path it was captured with).
//
// cuBLASLt: descriptors and the heuristic's algorithm are cached per shape (and alignment), so a
// shape pays for planning once; one workspace is allocated at construction.
//
// Row-major to cuBLASLt's column-major: a row-major [R, C] matrix with row stride ld is the
// column-major [C, R] matrix with leading dimension ld. So out^T (N x M, ld_out) = w (op T of the
// column-major K x N matrix, ld_w) . x^T (column-major K x M, ld_x): A = w with TRANSA = T, B = x.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "core/dtype.h"

namespace pagellm::cuda {

class CublasLtMatmul {
 public:
  // num_sms: the device's multiprocessors (the GEMV's launch geometry).
  CublasLtMatmul(cudaStream_t stream, int num_sms);
  ~CublasLtMatmul();
  CublasLtMatmul(const CublasLtMatmul&) = delete;
  CublasLtMatmul& operator=(const CublasLtMatmul&) = delete;

  // All three operands have `dtype` (f32, bf16 or f16); strides in elements. Launches on the stream.
  // use_gemv false: every product on cuBLASLt, decode-sized ones too (KernelOptions::gemv).
  // bias [n] (`dtype`) or nullptr: the GEMV adds it in its epilogue (add_bias's bits); returns whether
  // it did, so that the caller adds it otherwise.
  bool run(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x, const void* w, int64_t ld_w,
           int64_t m, int64_t n, int64_t k, bool use_gemv, const void* bias = nullptr);

 private:
  // (dtype, m, n, k, ld_out, ld_x, ld_w, alignment of out, x, w in bytes)
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  Plan make_plan(const Key& key);

  cudaStream_t stream_;
  int num_sms_;
  bool gemv_supported_ = false;  // the device runs gemv.cu's mma.sync (compute capability 8.0+)
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace pagellm::cuda
