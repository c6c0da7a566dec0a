// Dynamic FP8 quantization of activations per token and 128-column group (fp8_group_quant.h), the
// first half of the W8A8 product. Bitwise the CPU twin (cpu/fp8_group_quant.cpp): max of |x| is
// exact in any order, and the scale and each quotient are single IEEE divisions (__fdiv_rn), then
// one round-to-nearest-even, saturating e4m3 narrowing (__NV_SATFINITE, as f32_to_e4m3_bits).
//
// Layout of the work: 16 consecutive lanes (half a warp) own one (row, group) pair of 128 columns,
// 8 elements (one 16-byte load of bf16/f16, two of f32) per lane; the group's max comes from 4
// xor-shuffles inside the half warp. Pairs are numbered row-major, so consecutive half warps read
// consecutive memory. Memory-bound: 3 bytes per element (2 read, 1 written) for 16-bit x.
#include <cuda_fp8.h>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/fp8_group_quant.h"

namespace pagellm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLanesPerGroup = 16;
constexpr int kElemsPerLane = static_cast<int>(kFp8GroupCols) / kLanesPerGroup;  // 8
constexpr float kE4m3Max = 448.0f;

template <typename T>
__device__ __forceinline__ void load8(const T* p, float v[kElemsPerLane]) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kElemsPerLane; ++i) v[i] = to_f32(e[i]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_fp8_groups_kernel(uint8_t* __restrict__ x_fp8, float* __restrict__ scales, const T* __restrict__ x,
                               int64_t ld_x, int64_t m, int64_t k) {
  const int64_t groups = k / kFp8GroupCols;
  const int64_t pair = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / kLanesPerGroup;
  if (pair >= m * groups) return;  // whole half warps leave together: the shuffles below stay full
  const int lane = static_cast<int>(threadIdx.x % kLanesPerGroup);
  const unsigned half_warp_mask = 0xffffu << (threadIdx.x & 16u);
  const int64_t row = pair / groups, group = pair % groups;
  const int64_t col = group * kFp8GroupCols + lane * kElemsPerLane;

  float v[kElemsPerLane];
  load8(x + row * ld_x + col, v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kElemsPerLane; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int offset = kLanesPerGroup / 2; offset > 0; offset /= 2)
    amax = fmaxf(amax, __shfl_xor_sync(half_warp_mask, amax, offset));
  float scale = __fdiv_rn(amax, kE4m3Max);
  if (scale == 0.0f) scale = 1.0f;

  uint32_t packed[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < kElemsPerLane; ++i) {
    const uint32_t bits = __nv_cvt_float_to_fp8(__fdiv_rn(v[i], scale), __NV_SATFINITE, __NV_E4M3);
    packed[i / 4] |= bits << (8 * (i % 4));
  }
  *reinterpret_cast<uint2*>(x_fp8 + row * k + col) = make_uint2(packed[0], packed[1]);
  if (lane == 0) scales[group * m + row] = scale;
}

__global__ void pad_block_scales_kernel(float* __restrict__ dst, int64_t ld_dst, const float* __restrict__ src,
                                        int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * ld_dst) return;
  const int64_t r = i / ld_dst, c = i % ld_dst;
  dst[i] = c < cols ? src[r * cols + c] : 1.0f;
}

}  // namespace

bool quantize_fp8_groups_applies(DType dtype, const void* x, int64_t ld_x, int64_t k) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) return false;
  const uint64_t pitch_bytes = static_cast<uint64_t>(ld_x) * dtype_size_bytes(dtype);
  return k > 0 && k % kFp8GroupCols == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && pitch_bytes % 16 == 0;
}

cudaError_t launch_quantize_fp8_groups(DType dtype, uint8_t* x_fp8, float* scales, const void* x, int64_t ld_x,
                                       int64_t m, int64_t k, cudaStream_t stream) {
  if (m < 0 || !quantize_fp8_groups_applies(dtype, x, m > 1 ? ld_x : k, k)) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  const int64_t threads = m * (k / kFp8GroupCols) * kLanesPerGroup;
  const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    quantize_fp8_groups_kernel<T><<<blocks, kThreads, 0, stream>>>(x_fp8, scales, static_cast<const T*>(x), ld_x, m, k);
    return cudaGetLastError();
  });
}

cudaError_t launch_pad_block_scales(float* dst, int64_t ld_dst, const float* src, int64_t rows, int64_t cols,
                                    cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ld_dst < cols) return cudaErrorInvalidValue;
  if (rows == 0 || ld_dst == 0) return cudaSuccess;
  constexpr int kPadThreads = 256;
  const unsigned blocks = static_cast<unsigned>((rows * ld_dst + kPadThreads - 1) / kPadThreads);
  pad_block_scales_kernel<<<blocks, kPadThreads, 0, stream>>>(dst, ld_dst, src, rows, cols);
  return cudaGetLastError();
}

}  // namespace pagellm::cuda
