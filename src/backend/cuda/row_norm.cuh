// The norm arithmetic shared by the norm kernels (elementwise.cu) and the kernels that end in a norm
// (moe.cu's combine fused with the next block's residual add and norm): the weighted element, the
// block reduction, and the block form of one row held in registers. Every caller of the block form
// holds element i of a row in thread i % kNormThreads, register i / kNormThreads, and sums in that
// order, so a fused kernel's norm is the bits of launch_rms_norm / launch_add_rms_norm.
#pragma once

#include "backend/cuda/device_common.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kNormWarps = kNormThreads / 32;
// Rows of this many elements and more take the block form (a block a row, every load in flight at
// once); below it a warp a row. Up to kNormThreads * kNormMaxPerThread the row stays in registers.
constexpr int64_t kBlockRowMin = 512;
constexpr int kNormMaxPerThread = 32;

// One normalised element with its weight (NormForm); kPlain follows transformers' Llama norm, which
// casts the normalised value to the activation dtype before the weight multiply.
template <typename T>
__device__ __forceinline__ float weighted_norm(float v, float inv_rms, float weight, NormForm form) {
  return form.f32_product ? __fmul_rn(__fmul_rn(v, inv_rms), form.offset + weight)
                          : __fmul_rn(weight, round_to<T>(__fmul_rn(v, inv_rms)));
}

// kMax: block max; else block sum (partials folded in a fixed order). Blocks of kNormThreads.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[kNormWarps];
  v = kMax ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float result = partial[0];
  for (int w = 1; w < kNormWarps; ++w) result = kMax ? fmaxf(result, partial[w]) : result + partial[w];
  __syncthreads();
  return result;
}

// The end of the block form: v[j] and weight[j] hold element first + j * kNormThreads of a row of d
// (zeros past d); writes sum_dst[i] = v (when not null: the residual stream of an add + norm) and
// dst[i] = the normalised element. The reduction also orders the caller's loads of the row before
// these stores, so dst and sum_dst may be rows the caller read.
template <typename T, int kPerThread>
__device__ __forceinline__ void store_normed_row(const float (&v)[kPerThread], const float (&weight)[kPerThread], int d,
                                                 float eps, NormForm form, T* sum_dst, T* dst) {
  const int first = static_cast<int>(threadIdx.x);
  float sum_sq = 0.0f;  // ascending i within a thread
#pragma unroll
  for (int j = 0; j < kPerThread; ++j)
    if (first + j * kNormThreads < d) sum_sq += v[j] * v[j];
  sum_sq = block_reduce<false>(sum_sq);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = first + j * kNormThreads;
    if (i < d) {
      if (sum_dst != nullptr) sum_dst[i] = from_f32<T>(v[j]);
      dst[i] = from_f32<T>(weighted_norm<T>(v[j], inv_rms, weight[j], form));
    }
  }
}

// Calls f(kPerThread) with the smallest register form (4, 16 or 32 elements a thread) that holds a
// row of d elements; false when the row is longer than the register forms take.
template <typename F>
__host__ bool with_norm_registers(int64_t d, F&& f) {
  if (d <= kNormThreads * 4) return f(std::integral_constant<int, 4>{}), true;
  if (d <= kNormThreads * 16) return f(std::integral_constant<int, 16>{}), true;
  if (d <= kNormThreads * kNormMaxPerThread) return f(std::integral_constant<int, kNormMaxPerThread>{}), true;
  return false;
}

}  // namespace
}  // namespace pagellm::cuda
