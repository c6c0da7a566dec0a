// Dequantization of a quantized weight into a dense [N, K] copy of x's dtype (quant_gemv.h
// launch_dequantize): the path of products the GEMV does not take (M > 8, f32 x, unusual block
// sizes), which then multiply the copy through cuBLASLt. Each element is the CPU twin's f32 value
// (backend/cpu/quant_gemm.cpp: e4m3 * scale, or float(q - zero) * scale, one f32 rounding) rounded
// once to the dtype, so an f32 copy has the CPU's bits.
//
// One block per row of W (grid-stride over rows past the grid limit), threads over k: plain and
// obviously bounded; it runs once per product of a prefill-sized batch, next to a GEMM that reads
// the copy M / 8 times more.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/quant_gemv.h"

namespace pagellm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

__device__ __forceinline__ float e4m3_to_f32(uint8_t bits) {
  // e4m3 -> f16 is exact (every e4m3 value is a normal f16 or zero), f16 -> f32 too.
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(bits), __NV_E4M3)));
}

// The e2m1 code table of MXFP4 (core/dtype.h kE2m1Values): sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ float e2m1_to_f32(int code) {
  constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitudes[code & 7];
  return (code & 8) ? -magnitude : magnitude;
}

template <typename T, QuantFormat F>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(T* __restrict__ dst, QuantWeight w) {
  const int64_t k_blocks = (w.k + w.block_k - 1) / w.block_k;
  for (int64_t r = blockIdx.x; r < w.n; r += gridDim.x) {
    T* dst_row = dst + r * w.k;
    for (int64_t c = threadIdx.x; c < w.k; c += blockDim.x) {
      float value;
      if constexpr (F == QuantFormat::kFp8Block) {
        const uint8_t bits = static_cast<const uint8_t*>(w.data)[r * w.k + c];
        value = e4m3_to_f32(bits) * w.scales[(r / w.block_n) * k_blocks + c / w.block_k];
      } else if constexpr (F == QuantFormat::kMxfp4) {
        const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * (w.k / 2) + c / 2];
        const int code = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
        value = ldexpf(e2m1_to_f32(code), static_cast<int>(w.exponents[r * k_blocks + c / w.block_k]) - 127);
      } else {
        const uint32_t word = static_cast<const uint32_t*>(w.data)[r * (w.k / 8) + c / 8];
        const int q = static_cast<int>((word >> (4 * (c % 8))) & 0xfu);
        const int64_t g = r * k_blocks + c / w.block_k;
        value = static_cast<float>(q - static_cast<int>(w.zeros[g])) * w.scales[g];
      }
      dst_row[c] = from_f32<T>(value);
    }
  }
}

// The same values, eight consecutive elements of a row per thread (one i32 word of INT4, 8 bytes of
// FP8; one scale and zero for all eight), written as one 16-byte (bf16/f16) or two (f32) stores. Needs
// k % 8 == 0, block_k % 8 == 0 and 8-byte aligned data: every real checkpoint's layout. The plain kernel
// above reached ~0.7 TB/s (an int64 division per element); this one streams.
template <typename T, QuantFormat F>
__global__ void __launch_bounds__(kThreads) dequantize8_kernel(T* __restrict__ dst, QuantWeight w) {
  const int64_t words_per_row = w.k / 8, total = w.n * words_per_row;
  const int64_t k_blocks = (w.k + w.block_k - 1) / w.block_k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / words_per_row, c0 = (i - r * words_per_row) * 8;
    float v[8];
    if constexpr (F == QuantFormat::kFp8Block) {
      const uint2 bits = reinterpret_cast<const uint2*>(w.data)[i];
      const float scale = w.scales[(r / w.block_n) * k_blocks + c0 / w.block_k];
      for (int j = 0; j < 4; ++j) v[j] = e4m3_to_f32(static_cast<uint8_t>(bits.x >> (8 * j))) * scale;
      for (int j = 0; j < 4; ++j) v[4 + j] = e4m3_to_f32(static_cast<uint8_t>(bits.y >> (8 * j))) * scale;
    } else {
      const uint32_t word = static_cast<const uint32_t*>(w.data)[i];
      const int64_t g = r * k_blocks + c0 / w.block_k;
      const int zero = static_cast<int>(w.zeros[g]);
      const float scale = w.scales[g];
      for (int j = 0; j < 8; ++j) v[j] = static_cast<float>(static_cast<int>((word >> (4 * j)) & 0xfu) - zero) * scale;
    }
    alignas(16) T out[8];
    for (int j = 0; j < 8; ++j) out[j] = from_f32<T>(v[j]);
    uint4* dst16 = reinterpret_cast<uint4*>(dst + r * w.k + c0);
    const uint4* src16 = reinterpret_cast<const uint4*>(out);
    for (size_t j = 0; j < sizeof(out) / 16; ++j) dst16[j] = src16[j];
  }
}

bool streams_by_words(const void* dst, const QuantWeight& w) {
  return w.k % 8 == 0 && w.block_k % 8 == 0 && reinterpret_cast<uintptr_t>(w.data) % 8 == 0 &&
         reinterpret_cast<uintptr_t>(dst) % 16 == 0;
}

}  // namespace

cudaError_t launch_dequantize(DType dtype, void* dst, const QuantWeight& w, cudaStream_t stream) {
  if (w.n < 0 || w.k < 0 || w.block_n <= 0 || w.block_k <= 0 || w.data == nullptr) return cudaErrorInvalidValue;
  if (w.format == QuantFormat::kMxfp4 ? (w.exponents == nullptr || w.k % w.block_k != 0 || w.k % 2 != 0)
                                      : w.scales == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (w.format == QuantFormat::kInt4 && (w.zeros == nullptr || w.k % w.block_k != 0 || w.block_k % 8 != 0)) {
    return cudaErrorInvalidValue;
  }
  if (w.n == 0 || w.k == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(w.n < kMaxBlocks ? w.n : kMaxBlocks);
  if (w.format == QuantFormat::kMxfp4) {  // the plain kernel: a correct path, not yet a streaming one
    return dispatch_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      dequantize_kernel<T, QuantFormat::kMxfp4><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), w);
      return cudaGetLastError();
    });
  }
  if (streams_by_words(dst, w)) {
    const int64_t threads_needed = w.n * (w.k / 8);
    const unsigned word_blocks = static_cast<unsigned>(
        std::min<int64_t>((threads_needed + kThreads - 1) / kThreads, 132 * 16));  // enough to fill any GPU
    return dispatch_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      if (w.format == QuantFormat::kFp8Block) {
        dequantize8_kernel<T, QuantFormat::kFp8Block><<<word_blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), w);
      } else {
        dequantize8_kernel<T, QuantFormat::kInt4><<<word_blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), w);
      }
      return cudaGetLastError();
    });
  }
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (w.format == QuantFormat::kFp8Block) {
      dequantize_kernel<T, QuantFormat::kFp8Block><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), w);
    } else {
      dequantize_kernel<T, QuantFormat::kInt4><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), w);
    }
    return cudaGetLastError();
  });
}

}  // namespace pagellm::cuda
