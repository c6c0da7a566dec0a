#include "backend/cuda/cublaslt_fp8_matmul.h"

#include "backend/cuda/cuda_check.h"
#include "core/logging.h"

namespace pagellm::cuda {

namespace {

// As cublaslt_matmul.cpp: what NVIDIA suggests for Hopper so split-K algorithms are available.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Largest power of two (up to 256) dividing both the address and the row pitch in bytes.
int alignment_bytes(const void* ptr, int64_t ld, DType dtype) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(ptr) | (static_cast<uint64_t>(ld) * dtype_size_bytes(dtype)) | 256u;
  return static_cast<int>(bits & (~bits + 1));
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& value) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// The heuristic's best algorithm, or false with the last status in *status. Split-K partials are
// first asked to be reduced in f32 (as cublaslt_matmul.cpp, for the same reason) and the output's
// alignment is stated; if that leaves nothing, each request is dropped in turn.
bool best_algo(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
               cublasLtMatrixLayout_t c, uint64_t workspace_bytes, uint32_t c_align, cublasLtMatmulAlgo_t* algo,
               cublasStatus_t* status, int* count) {
  for (const bool f32_reduction : {true, false}) {
    for (const bool state_alignment : {true, false}) {
      cublasLtMatmulPreference_t pref = nullptr;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
      if (state_alignment) {
        set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c_align);
        set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c_align);
      }
      if (f32_reduction)
        set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE});
      cublasLtMatmulHeuristicResult_t result{};
      *count = 0;
      // An unsupported combination may answer NOT_SUPPORTED rather than zero results: both mean "no".
      *status = cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, 1, &result, count);
      cublasLtMatmulPreferenceDestroy(pref);
      if (*status == CUBLAS_STATUS_SUCCESS && *count > 0) {
        *algo = result.algo;
        return true;
      }
    }
  }
  return false;
}

}  // namespace

CublasLtFp8Matmul::CublasLtFp8Matmul(cudaStream_t stream) : stream_(stream) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

CublasLtFp8Matmul::~CublasLtFp8Matmul() {
  // Destructors do not CHECK: at process exit the driver may already be shutting down.
  for (auto& [key, plan] : plans_) {
    if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
    if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
    if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
    if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
  }
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

CublasLtFp8Matmul::Key CublasLtFp8Matmul::key_of(DType dtype, const void* out, int64_t ld_out, int64_t m, int64_t n,
                                                 int64_t k) const {
  return Key{static_cast<int>(dtype), m, n, k, ld_out, alignment_bytes(out, ld_out, dtype)};
}

CublasLtFp8Matmul::Plan CublasLtFp8Matmul::make_plan(const Key& key) {
  const auto [dtype_int, m, n, k, ld_out, align_out] = key;
  const DType dtype = static_cast<DType>(dtype_int);
  Plan plan;
  if (dtype != DType::kBF16 && dtype != DType::kF16) return plan;
  const cudaDataType_t out_type = dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F});
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F});
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, out_type, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ld_out));
  // The heuristic is asked with scale pointers set (to the workspace: any device address), as at run
  // time; run() points them at the real scales.
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(workspace_));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(workspace_));
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  int count = 0;
  plan.found = best_algo(handle_, plan.desc, plan.a, plan.b, plan.c, workspace_bytes_, static_cast<uint32_t>(align_out),
                         &plan.algo, &status, &count);
  if (!plan.found) {
    LOG_WARN("[cuda] cuBLASLt has no FP8 block-scaled algorithm for {} out m={} n={} k={} ld_out={} (status {}, {} results): "
             "this shape takes the dequantization path",
             dtype_name(dtype), m, n, k, ld_out, static_cast<int>(status), count);
  }
  return plan;
}

bool CublasLtFp8Matmul::supports(DType dtype, const void* out, int64_t ld_out, int64_t m, int64_t n, int64_t k) {
  const Key key = key_of(dtype, out, ld_out, m, n, k);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, make_plan(key)).first;
  return it->second.found;
}

void CublasLtFp8Matmul::run(DType dtype, void* out, int64_t ld_out, const void* x_fp8, const float* x_scales,
                            const void* w, const float* w_scales, int64_t m, int64_t n, int64_t k) {
  const auto it = plans_.find(key_of(dtype, out, ld_out, m, n, k));
  CHECK_MSG(it != plans_.end() && it->second.found,
            "[cuda] fp8 W8A8 matmul m={} n={} k={} run without a plan: ask supports() first", m, n, k);
  const Plan& plan = it->second;
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scales));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scales));
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.a, x_fp8, plan.b, &beta, out, plan.c, out, plan.c,
                              &plan.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace pagellm::cuda
