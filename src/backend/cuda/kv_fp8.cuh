// The FP8 KV cache on the device: one e4m3fn byte per element, stored = e4m3(x / scale) and read as
// float(stored) * scale (backend.h KvScales). Caches of a float dtype pass through these helpers
// unchanged, so their kernels stay bit for bit what they were.
#pragma once

#include <cuda_fp8.h>

#include <type_traits>

#include "backend/cuda/device_common.cuh"

namespace pagellm::cuda {

// One element of an FP8 KV cache (its own type, so to_f32 overloads cannot meet another fp8 use).
struct KvFp8 {
  uint8_t bits;
};
static_assert(sizeof(KvFp8) == 1);

// Exact: every e4m3 value is a half.
__device__ __forceinline__ float to_f32(KvFp8 x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x.bits), __NV_E4M3)));
}

template <typename C>
inline constexpr bool kIsFp8Cache = std::is_same_v<C, KvFp8>;

// What attention reads from a cache element: float(stored) * scale for FP8, the value for a float cache.
template <typename C>
__device__ __forceinline__ float read_kv(C stored, float scale) {
  if constexpr (kIsFp8Cache<C>) {
    return __fmul_rn(to_f32(stored), scale);
  } else {
    return to_f32(stored);
  }
}

// What write_kv stores for x: e4m3(x / scale) (round to nearest even, saturating at +-448: the CPU's
// f32_to_e4m3_bits), or x rounded to a float cache dtype.
template <typename C>
__device__ __forceinline__ C store_kv(float x, float scale) {
  if constexpr (kIsFp8Cache<C>) {
    return KvFp8{static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3))};
  } else {
    return from_f32<C>(x);
  }
}

// Calls fn(T{}, C{}) with T the dtype's type (q, k, v rows) and C the cache element type: T itself for
// a float cache of the same dtype, KvFp8 for an f8_e4m3 cache. The one dispatch point of the KV ops.
template <typename Fn>
cudaError_t dispatch_kv(DType dtype, DType cache_dtype, Fn&& fn) {
  if (cache_dtype == DType::kF8E4M3) {
    return dispatch_float(dtype, [&](auto t) { return fn(t, KvFp8{}); });
  }
  if (cache_dtype != dtype) return cudaErrorInvalidValue;
  return dispatch_float(dtype, [&](auto t) { return fn(t, t); });
}

}  // namespace pagellm::cuda
