// Device helpers shared by the kernel files: element conversions, row addressing, warp/block
// reductions, and the one dtype dispatch used at each file's launch boundary.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace pagellm::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

// Round-to-nearest-even narrowing (what the CPU's convert_from_f32 does).
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// The value x takes once stored in T (transformers' intermediate casts).
template <typename T>
__device__ __forceinline__ float round_to(float x) { return to_f32(from_f32<T>(x)); }

__host__ __device__ __forceinline__ int64_t row_offset(const Rows& rows, int64_t r) {
  return (r / rows.inner_rows) * rows.outer_stride + (r % rows.inner_rows) * rows.inner_stride;
}

template <typename T>
__device__ __forceinline__ T* row_ptr(const Rows& rows, int64_t r) {
  return static_cast<T*>(rows.data) + row_offset(rows, r);
}

// Butterfly reductions: every lane ends with the same value (float addition is commutative, so
// lane i and lane i ^ k add the same two numbers), independent of the launch.
__device__ __forceinline__ float warp_sum(float v) {
  for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(kFullMask, v, k);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int k = 16; k > 0; k >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, k));
  return v;
}

// Calls fn(T{}) with T = float, __nv_bfloat16 or __half for dtype; the one dispatch point per file.
template <typename Fn>
cudaError_t dispatch_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kBF16: return fn(__nv_bfloat16{});
    case DType::kF16: return fn(__half{});
    default: return cudaErrorInvalidValue;
  }
}

inline unsigned blocks_for(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

}  // namespace pagellm::cuda
