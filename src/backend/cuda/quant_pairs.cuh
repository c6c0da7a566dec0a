// Device pieces the quantized products share (quant_gemv.cu, int4_gemm.cu): exact conversions of
// quantized weights into pairs of 16-bit T (two elements per register, low half first, the operand
// form of mma.sync), and cp.async, which copies global memory into shared memory without holding
// registers while the copy is in flight.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace pagellm::cuda {

// The bits of 128.0 in bf16 / 1024.0 in f16: the ulp there is 1, so OR-ing a nibble q into the low
// mantissa bits gives exactly 128 + q / 1024 + q.
template <typename T>
constexpr uint32_t kNibbleBias = 0;
template <>
constexpr uint32_t kNibbleBias<__nv_bfloat16> = 0x4300u;
template <>
constexpr uint32_t kNibbleBias<__half> = 0x6400u;

// a - b on pairs of T (exact here: both are small integers plus the same bias).
template <typename T>
__device__ __forceinline__ uint32_t sub_pair(uint32_t a, uint32_t b);
template <>
__device__ __forceinline__ uint32_t sub_pair<__half>(uint32_t a, uint32_t b) {
  __half2 ha, hb;
  memcpy(&ha, &a, 4);
  memcpy(&hb, &b, 4);
  const __half2 d = __hsub2(ha, hb);
  uint32_t bits;
  memcpy(&bits, &d, 4);
  return bits;
}
template <>
__device__ __forceinline__ uint32_t sub_pair<__nv_bfloat16>(uint32_t a, uint32_t b) {
  __nv_bfloat162 ha, hb;
  memcpy(&ha, &a, 4);
  memcpy(&hb, &b, 4);
  const __nv_bfloat162 d = __hsub2(ha, hb);
  uint32_t bits;
  memcpy(&bits, &d, 4);
  return bits;
}

// a * b on pairs of T.
template <typename T>
__device__ __forceinline__ uint32_t mul_pair(uint32_t a, uint32_t b);
template <>
__device__ __forceinline__ uint32_t mul_pair<__half>(uint32_t a, uint32_t b) {
  __half2 ha, hb;
  memcpy(&ha, &a, 4);
  memcpy(&hb, &b, 4);
  const __half2 d = __hmul2(ha, hb);
  uint32_t bits;
  memcpy(&bits, &d, 4);
  return bits;
}
template <>
__device__ __forceinline__ uint32_t mul_pair<__nv_bfloat16>(uint32_t a, uint32_t b) {
  __nv_bfloat162 ha, hb;
  memcpy(&ha, &a, 4);
  memcpy(&hb, &b, 4);
  const __nv_bfloat162 d = __hmul2(ha, hb);
  uint32_t bits;
  memcpy(&bits, &d, 4);
  return bits;
}

// e4m3 -> T by bits: the sign to T's sign, exponent|mantissa (7 bits) shifted so the 3 mantissa
// bits lead T's mantissa, then one exact multiply by 2^(T's exponent bias - 7) (subnormal e4m3
// values come out normal T values). Integer ops and one multiply per pair: the cvt route (f16x2 from
// e4m3x2, f32 from f16, bf16x2 from f32) runs on the conversion unit at a quarter of the rate and
// held the fp8 GEMV near 2 TB/s. The NaN codes 0x7f / 0xff would come out as +-480 (the CPU gives
// NaN); checkpoints hold none.
template <typename T>
constexpr int kE4m3Shift = 4;  // bf16: 8 exponent bits, 4 more than e4m3's
template <>
constexpr int kE4m3Shift<__half> = 1;  // f16: 5 exponent bits
template <typename T>
constexpr uint32_t kE4m3BiasPair = 0x7b807b80u;  // bf16 2^120, twice
template <>
constexpr uint32_t kE4m3BiasPair<__half> = 0x5c005c00u;  // f16 2^8, twice

// The four e4m3 bytes b0..b3 of a word as the pairs (b0, b2) and (b1, b3) of T.
template <typename T>
__device__ __forceinline__ void e4m3x4_to_pairs(uint32_t word, uint32_t& pair02, uint32_t& pair13) {
  constexpr uint32_t kSign = 0x80008000u, kBits = 0x7f007f00u;  // of the bytes 1 and 3
  const uint32_t bits13 = (word & kSign) | ((word & kBits) >> kE4m3Shift<T>);
  const uint32_t word02 = word << 8;
  const uint32_t bits02 = (word02 & kSign) | ((word02 & kBits) >> kE4m3Shift<T>);
  pair02 = mul_pair<T>(bits02, kE4m3BiasPair<T>);
  pair13 = mul_pair<T>(bits13, kE4m3BiasPair<T>);
}

// The eight nibbles of an INT4 word (nibble i = element i) minus the zero point (0..15), as the four
// pairs (i, i + 4), i < 4, of T: the pairs one shift-and-mask leaves in the two halves.
template <typename T>
__device__ __forceinline__ void int4x8_to_pairs(uint32_t word, uint32_t zero, uint32_t* pairs) {
  constexpr uint32_t bias = kNibbleBias<T> * 0x00010001u;
  const uint32_t zero_pair = (kNibbleBias<T> | zero) * 0x00010001u;
#pragma unroll
  for (int i = 0; i < 4; ++i) pairs[i] = sub_pair<T>(((word >> (4 * i)) & 0x000f000fu) | bias, zero_pair);
}

// kBytes of global memory into shared memory; valid = false writes zeros and reads nothing (a piece
// past N or K). 16-byte copies bypass L1 (.cg: W is read once); narrower ones cannot (.ca).
template <int kBytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
  const uint32_t dst_shared = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? kBytes : 0;
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_shared), "l"(src), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst_shared), "l"(src), "n"(kBytes),
                 "r"(src_bytes)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Lets `kernel` take up to `bytes` of dynamic shared memory, once per device (`raised`: the caller's
// bit set of devices done, one per kernel). Not a stream operation: legal inside a graph capture
// (FlashAttention sets it on every launch under vLLM's graphs).
template <typename Kernel>
cudaError_t allow_dynamic_smem(Kernel kernel, int64_t bytes, std::atomic<uint64_t>& raised) {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((raised.load() & bit) != 0) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess) raised.fetch_or(bit);
  return e;
}

}  // namespace pagellm::cuda
