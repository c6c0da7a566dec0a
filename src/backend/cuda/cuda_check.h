// Checked CUDA and cuBLAS calls: a failing status is a broken invariant (CHECK semantics: abort with
// file:line, the call and the library's error string). Out-of-memory at allocation is reported by
// CudaBackend::alloc itself, with the numbers involved.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/check.h"

#define CUDA_CHECK(expr)                                                                            \
  do {                                                                                              \
    const cudaError_t _cuda_status = (expr);                                                        \
    if (_cuda_status != cudaSuccess)                                                                \
      ::pagellm::detail::check_failed(__FILE__, __LINE__, #expr,                                    \
                                      ::fmt::format("[cuda] {} ({})", cudaGetErrorString(_cuda_status), \
                                                    cudaGetErrorName(_cuda_status)));               \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                          \
  do {                                                                                              \
    const cublasStatus_t _cublas_status = (expr);                                                   \
    if (_cublas_status != CUBLAS_STATUS_SUCCESS)                                                    \
      ::pagellm::detail::check_failed(__FILE__, __LINE__, #expr,                                    \
                                      ::fmt::format("[cuda] cuBLAS: {} ({})",                       \
                                                    cublasLtGetStatusString(_cublas_status),        \
                                                    cublasLtGetStatusName(_cublas_status)));        \
  } while (0)
