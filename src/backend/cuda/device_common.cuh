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

// 16 bytes of a weight read once (the GEMVs, the MoE expert kernels): no L1 allocation, so the
// activations every block reuses keep the L1.
__device__ __forceinline__ uint4 load_streaming(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

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

// The general form divides by inner_rows; the two common layouts need no division (a 64-bit division
// is tens of instructions: per element in a conv1d over a 512-token prompt it was most of the kernel).
__host__ __device__ __forceinline__ int64_t row_offset(const Rows& rows, int64_t r) {
  if (rows.inner_rows == 1) return r * rows.outer_stride;                                // [T, D]
  if (rows.outer_stride == rows.inner_rows * rows.inner_stride) return r * rows.inner_stride;  // [T, H, D], H dense
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

// Inclusive block-wide prefix sum of one int per thread of a block of kWarps warps (every thread
// calls it); `total` gets the block's sum. warp_totals: kWarps ints of shared memory, free again on return.
template <int kWarps>
__device__ int block_inclusive_scan(int value, int* warp_totals, int& total) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  for (int k = 1; k < 32; k <<= 1) {
    const int other = __shfl_up_sync(kFullMask, value, k);
    if (lane >= k) value += other;
  }
  if (lane == 31) warp_totals[warp] = value;
  __syncthreads();
  int before = 0;
  total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += warp_totals[w];
    total += warp_totals[w];
  }
  __syncthreads();  // warp_totals may be reused by the caller's next round
  return value + before;
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

// The most dynamic shared memory one block may opt into on the current device (227 KiB on H100/H200).
inline int64_t smem_optin_limit() {
  static const int64_t limit = [] {
    int device = 0, bytes = 48 * 1024;
    if (cudaGetDevice(&device) == cudaSuccess)
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    return static_cast<int64_t>(bytes);
  }();
  return limit;
}

// The keys a query row at absolute position `pos` sees in a sequence of `context_len` keys: the
// visibility rule of backend/cpu/attention.h (causal, sliding window), shared by the attention kernels.
struct KeyRange {
  int64_t begin, end;  // [begin, end), end >= begin
};
__host__ __device__ inline KeyRange visible_keys(const AttentionArgs& a, int64_t context_len, int64_t pos) {
  KeyRange r;
  r.end = a.causal ? (context_len < pos + 1 ? context_len : pos + 1) : context_len;
  r.begin = a.window > 0 ? (pos - a.window + 1 > 0 ? pos - a.window + 1 : 0) : 0;
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

// What multiplies a row's accumulated P.V (state m, l of its keys, l > 0) to give its output: 1 / l,
// or with the head's attention sink (one more logit in the denominator, no value; AttentionParams)
// e^(m - m') / (l e^(m - m') + e^(sink - m')), m' = max(m, sink). Every kernel and the split-KV merges
// apply it once, after all keys are folded.
__device__ __forceinline__ float row_output_scale(const AttentionArgs& a, int64_t head, float m, float l) {
  if (a.sinks == nullptr) return 1.0f / l;
  const float sink = a.sinks[head];
  const float m_new = fmaxf(m, sink);
  const float keys_scale = expf(m - m_new);
  return keys_scale / (l * keys_scale + expf(sink - m_new));
}
// acc / l, or its sink form; zeros for a row that saw no key.
__device__ __forceinline__ float finish_row(const AttentionArgs& a, int64_t head, float m, float l, float acc) {
  if (!(l > 0.0f)) return 0.0f;
  return a.sinks == nullptr ? acc / l : acc * row_output_scale(a, head, m, l);
}

inline unsigned blocks_for(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

}  // namespace pagellm::cuda
