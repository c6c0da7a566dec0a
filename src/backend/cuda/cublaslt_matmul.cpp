#include "backend/cuda/cublaslt_matmul.h"

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"

namespace pagellm::cuda {

namespace {

// 32 MiB: what NVIDIA suggests for Hopper so split-K and stream-K algorithms are available.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: CHECK_MSG(false, "[cuda] matmul dtype {} is not f32/bf16/f16", dtype_name(dtype));
  }
  return CUDA_R_32F;
}

// Largest power of two (up to 256) dividing both the address and the row pitch in bytes: what the
// algorithms chosen for this operand may assume.
int alignment_bytes(const void* ptr, int64_t ld, DType dtype) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(ptr) | (static_cast<uint64_t>(ld) * dtype_size_bytes(dtype)) | 256u;
  return static_cast<int>(bits & (~bits + 1));
}

}  // namespace

CublasLtMatmul::CublasLtMatmul(cudaStream_t stream, int num_sms) : stream_(stream), num_sms_(num_sms) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  gemv_supported_ = gemv_device_supported(device);
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

CublasLtMatmul::~CublasLtMatmul() {
  // Destructors do not CHECK: at process exit the driver may already be shutting down.
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

CublasLtMatmul::Plan CublasLtMatmul::make_plan(const Key& key) {
  const auto [dtype_int, m, n, k, ld_out, ld_x, ld_w, align_out, align_x, align_w] = key;
  const DType dtype = static_cast<DType>(dtype_int);
  const cudaDataType_t type = cuda_type(dtype);
  Plan plan;
  // CUBLAS_COMPUTE_32F: f32 accumulation for every dtype. For f32 operands this is true f32 math,
  // NOT TF32 (that would be CUBLAS_COMPUTE_32F_FAST_TF32): f32 checkpoints stay exact enough for the
  // golden fixtures' greedy agreement.
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, type, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ld_w));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, type, static_cast<uint64_t>(k), static_cast<uint64_t>(m), ld_x));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, type, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ld_out));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = workspace_bytes_;
  const uint32_t a_align = static_cast<uint32_t>(align_w), b_align = static_cast<uint32_t>(align_x),
                 c_align = static_cast<uint32_t>(align_out);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_align,
                                                    sizeof(a_align)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_align,
                                                    sizeof(b_align)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_align,
                                                    sizeof(c_align)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_align,
                                                    sizeof(c_align)));
  // Split-K partial sums reduced in f32 only: the in-place and output-type schemes add the partials
  // in the output dtype (f16/bf16), which lost ~1e-2 of a small result after cancellation (measured:
  // f16 k = 1004, 0.0461 for 0.0492).
  const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask,
                                                    sizeof(reduction_mask)));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result,
                                              &count));
  cublasLtMatmulPreferenceDestroy(pref);
  CHECK_MSG(count > 0, "[cuda] cuBLASLt has no algorithm for {} matmul m={} n={} k={} (ld out {} x {} w {})",
            dtype_name(dtype), m, n, k, ld_out, ld_x, ld_w);
  plan.algo = result.algo;
  return plan;
}

bool CublasLtMatmul::run(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x, const void* w,
                         int64_t ld_w, int64_t m, int64_t n, int64_t k, bool use_gemv, const void* bias) {
  if (use_gemv && gemv_supported_ && gemv_applies(dtype, x, ld_x, w, ld_w, m, k)) {
    CUDA_CHECK(launch_gemv(dtype, out, ld_out, x, ld_x, w, ld_w, m, n, k, bias, num_sms_, stream_));
    return bias != nullptr;
  }
  const Key key{static_cast<int>(dtype), m, n, k, ld_out, ld_x, ld_w, alignment_bytes(out, ld_out, dtype),
                alignment_bytes(x, ld_x, dtype), alignment_bytes(w, ld_w, dtype)};
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, make_plan(key)).first;
  const Plan& plan = it->second;
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, out, plan.c, out, plan.c,
                              &plan.algo, workspace_, workspace_bytes_, stream_));
  return false;
}

}  // namespace pagellm::cuda
