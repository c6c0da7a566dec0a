// The decode-sized product with quantized weights (quant_gemv.h): out[M, N] = x[M, K] . W^T, M <= 8,
// x and out bf16/f16, W block-scaled FP8 (1 byte a weight) or group-quantized INT4 (half a byte).
//
// At decode the product is a stream of W through the SMs, so the kernel reads W once, in 16-byte
// pieces per lane, and dequantizes in registers; the arithmetic is gemv.cu's (read that first): one
// mma.sync.m16n8k16 multiplies 8 rows of W by all 8 rows of x over 16 k, so the cost per byte of W
// is the same for every M <= 8 and the SM's issue slots go to conversions and loads, not FMAs.
//
// Exact conversions, scales on the accumulators: the mma multiplies x by the *unscaled* quantized
// values, which T (bf16/f16) holds exactly, and each step's f32 sums are multiplied by the step's
// scale once:
//   fp8:  e4m3 -> f16 (cvt.rn.f16x2.e4m3x2, exact) -> T (exact: e4m3 has 3 mantissa bits, all normal in f16)
//   int4: T(128 + q) or T(1024 + q) by OR-ing the nibble into the bits of 128.0 (bf16) / 1024.0 (f16),
//         minus T(128 + zero): the integer q - zero in [-15, 15], exact in T.
// So a step must lie inside one scale block: a step is 4 lanes' pieces of k (lane t of a row reads
// piece t), 4 * kElems consecutive k, and the launcher only takes blocks/groups that are multiples
// of it (quant_gemv_lane_bytes). The result differs from the CPU's (dequantize in f32, then multiply)
// only in the order of the f32 sums: within the bf16 tolerance of the tests.
//
// Mapping (per warp, one "step" = 8 rows of W x 4 * kElems k), lane = 4 g + t:
//   the lane loads kLaneBytes of W row n0 + g (kElems weights starting at k0 + kElems t) and the
//   same kElems elements of x row g (zeros when g >= M), and turns both into kElems / 2 registers of
//   two T each, "pairs" p, with x and W in the same order; mma r takes pairs 2r and 2r + 1 as its
//   A/B fragments (gemv.cu: any bijection between a lane's elements and the mma's logical k works if
//   A and B share it). fp8 pairs are (2p, 2p + 1); int4 pairs of word u are (8u + p, 8u + p + 4),
//   p < 4 (the nibbles one shift-and-mask leaves in the two halves), and x's pairs are permuted to
//   match with one byte_perm each.
//   C lane (g, t) holds out[g, n0 + 2t] and out[g, n0 + 2t + 1]: the scales of those two columns.
//
// Split K, launch geometry and batch invariance as gemv.cu: a block owns kTiles tiles of 8 rows of W
// (grid = ceil(N / (8 kTiles))), warps take contiguous ranges of steps (their number depends on K
// only), partial sums added in warp order. A warp's kTiles W pieces of a step share the step's x
// (the x bytes a lane loads are 2x (fp8) or 4x (int4) its W bytes per tile, so sharing them is what
// leaves registers for more W in flight). Each batch of kSteps steps issues all its loads (W, x,
// scales, zero points) before the first conversion: one memory latency per batch, where loading x
// and the scales inside the conversion loop made each step wait for its own.
#include <cuda_fp8.h>

#include <cstring>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/mma_16816.cuh"
#include "backend/cuda/quant_gemv.h"

namespace pagellm::cuda {
namespace {

constexpr int kTileRows = 8;         // rows of W (columns of out) per block: the mma's N
constexpr int kMaxWarps = 16;        // split-K warps per block

template <QuantFormat F>
constexpr int kElemsPerByte = F == QuantFormat::kInt4 ? 2 : 1;

// kBytes of W, read once: no L1 allocation, so x (reused by every block) keeps the L1.
template <int kBytes>
__device__ __forceinline__ void load_piece(const uint8_t* p, uint32_t (&r)[kBytes / 4]);
template <>
__device__ __forceinline__ void load_piece<16>(const uint8_t* p, uint32_t (&r)[4]) {
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "l"(p));
}
template <>
__device__ __forceinline__ void load_piece<8>(const uint8_t* p, uint32_t (&r)[2]) {
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
}
template <>
__device__ __forceinline__ void load_piece<4>(const uint8_t* p, uint32_t (&r)[1]) {
  asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r[0]) : "l"(p));
}

// Two e4m3 bytes (low byte first) as two T (low half first), exactly.
template <typename T>
__device__ __forceinline__ uint32_t e4m3x2_to_pair(uint32_t two_bytes);
template <>
__device__ __forceinline__ uint32_t e4m3x2_to_pair<__half>(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}
template <>
__device__ __forceinline__ uint32_t e4m3x2_to_pair<__nv_bfloat16>(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);  // exact: 3 mantissa bits fit bf16's 7
  uint32_t bits;
  memcpy(&bits, &b, 4);
  return bits;
}

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

// One lane's piece of one step as pairs (kElems / 2 registers each of x and W, the same order).
template <typename T, QuantFormat F, int kLaneBytes>
struct Piece {
  static constexpr int kElems = kLaneBytes * kElemsPerByte<F>;
  static constexpr int kWords = kLaneBytes / 4;
  static constexpr int kPairs = kElems / 2;
  uint32_t x[kPairs];
  uint32_t w[kPairs];

  // v: kElems elements of x as loaded (zeros outside the product).
  __device__ __forceinline__ void set_x(const uint4 (&v)[kElems / 8]) {
#pragma unroll
    for (int j = 0; j < kElems / 8; ++j) {
      if constexpr (F == QuantFormat::kFp8Block) {  // pairs (2p, 2p + 1): as loaded
        x[4 * j] = v[j].x;
        x[4 * j + 1] = v[j].y;
        x[4 * j + 2] = v[j].z;
        x[4 * j + 3] = v[j].w;
      } else {  // pairs (8j + p, 8j + p + 4): low halves of (v.x, v.z), high halves, then (v.y, v.w)
        x[4 * j] = __byte_perm(v[j].x, v[j].z, 0x5410);
        x[4 * j + 1] = __byte_perm(v[j].x, v[j].z, 0x7632);
        x[4 * j + 2] = __byte_perm(v[j].y, v[j].w, 0x5410);
        x[4 * j + 3] = __byte_perm(v[j].y, v[j].w, 0x7632);
      }
    }
  }

  // raw: the piece's bytes as loaded; zero: the int4 zero point of this row and step (0..15).
  __device__ __forceinline__ void convert_w(const uint32_t (&raw)[kWords], uint32_t zero) {
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      if constexpr (F == QuantFormat::kFp8Block) {
        w[2 * j] = e4m3x2_to_pair<T>(raw[j]);
        w[2 * j + 1] = e4m3x2_to_pair<T>(raw[j] >> 16);
      } else {
        constexpr uint32_t bias = kNibbleBias<T> * 0x00010001u;
        const uint32_t zero_pair = (kNibbleBias<T> | zero) * 0x00010001u;
#pragma unroll
        for (int p = 0; p < 4; ++p) w[4 * j + p] = sub_pair<T>(((raw[j] >> (4 * p)) & 0x000f000fu) | bias, zero_pair);
      }
    }
  }
};

// kTiles tiles of 8 rows of W per warp (and per block) share each x load; kSteps steps per batch.
template <typename T, QuantFormat F, int kLaneBytes, int kTiles, int kSteps>
__global__ void __launch_bounds__(kMaxWarps * 32)
    quant_gemv_kernel(T* __restrict__ out, int64_t ld_out, const T* __restrict__ x, int64_t ld_x, QuantWeight wq,
                      int m, int64_t steps_per_warp) {
  using P = Piece<T, F, kLaneBytes>;
  constexpr int kElems = P::kElems;
  constexpr int64_t kStepK = 4 * kElems;
  constexpr int kBlockRows = kTileRows * kTiles;
  __shared__ float partial[kMaxWarps][kTileRows][kBlockRows];  // [warp][m][n - n0]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const bool x_row_ok = g < m;
  const int64_t row_bytes = wq.k / kElemsPerByte<F>;
  const T* x_lane = x + (x_row_ok ? g * ld_x : 0) + t * kElems;
  const int64_t total_steps = (wq.k + kStepK - 1) / kStepK;
  const int64_t first_step = warp * steps_per_warp;
  const int64_t k_blocks = (wq.k + wq.block_k - 1) / wq.block_k;
  // Per tile j: this lane's W row n0 + 8 j + g (null past N), the scale rows of its two output
  // columns n0 + 8 j + 2 t (+ 1) (null past N) and its W row's zero points.
  const uint8_t* w_lane[kTiles];
  const float* scale0[kTiles];
  const float* scale1[kTiles];
  const uint8_t* zero_row[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int64_t row = n0 + kTileRows * j + g, col0 = n0 + kTileRows * j + 2 * t, col1 = col0 + 1;
    w_lane[j] = row < wq.n ? static_cast<const uint8_t*>(wq.data) + row * row_bytes + t * kLaneBytes : nullptr;
    scale0[j] = col0 < wq.n ? wq.scales + (col0 / wq.block_n) * k_blocks : nullptr;
    scale1[j] = col1 < wq.n ? wq.scales + (col1 / wq.block_n) * k_blocks : nullptr;
    zero_row[j] = (F == QuantFormat::kInt4 && row < wq.n) ? wq.zeros + row * k_blocks : nullptr;
  }

  float c0[kTiles], c1[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) c0[j] = c1[j] = 0.0f;
  for (int64_t i = 0; i < steps_per_warp; i += kSteps) {
    // Every load of the batch first (W, x, scales, zero points): one memory latency per batch, not a
    // dependent x / scale load per step. W is kSteps * kTiles * kLaneBytes bytes a lane.
    uint32_t raw[kSteps][kTiles][P::kWords];
    uint4 xv[kSteps][kElems / 8];
    float s0[kSteps][kTiles], s1[kSteps][kTiles];
    uint32_t zero[kSteps][kTiles];
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int64_t step = first_step + i + u;
      const bool step_ok = i + u < steps_per_warp && step < total_steps;
      const int64_t k0 = step * kStepK;
      const bool piece_ok = step_ok && k0 + kElems * t < wq.k;  // k % kElems == 0: all in or out
      const int64_t block = step_ok ? k0 / wq.block_k : 0;      // the step's scale block (one)
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        if (piece_ok && w_lane[j] != nullptr) {
          load_piece<kLaneBytes>(w_lane[j] + k0 / kElemsPerByte<F>, raw[u][j]);
        } else {
#pragma unroll
          for (int q = 0; q < P::kWords; ++q) raw[u][j][q] = 0u;
        }
        s0[u][j] = step_ok && scale0[j] != nullptr ? __ldg(scale0[j] + block) : 0.0f;
        s1[u][j] = step_ok && scale1[j] != nullptr ? __ldg(scale1[j] + block) : 0.0f;
        zero[u][j] = step_ok && zero_row[j] != nullptr ? static_cast<uint32_t>(__ldg(zero_row[j] + block)) : 0u;
      }
      // Zero x outside the product: W's converted zeros are (0 - zero) there, x = 0 cancels them.
#pragma unroll
      for (int v = 0; v < kElems / 8; ++v) {
        xv[u][v] = piece_ok && x_row_ok ? __ldg(reinterpret_cast<const uint4*>(x_lane + k0) + v)
                                        : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      if (i + u >= steps_per_warp || first_step + i + u >= total_steps) break;  // warp-uniform, as mma.sync requires
      P piece;
      piece.set_x(xv[u]);
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        piece.convert_w(raw[u][j], zero[u][j]);
        float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < kElems / 4; ++r)
          mma_16816<T>(sums, piece.x[2 * r], piece.x[2 * r + 1], piece.w[2 * r], piece.w[2 * r + 1]);
        // sums[0..1]: out[g, col0], out[g, col1] of this step; sums[2..3] are A's zero rows 8..15.
        c0[j] = fmaf(sums[0], s0[u][j], c0[j]);
        c1[j] = fmaf(sums[1], s1[u][j], c1[j]);
      }
    }
  }

#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    partial[warp][g][kTileRows * j + 2 * t] = c0[j];
    partial[warp][g][kTileRows * j + 2 * t + 1] = c1[j];
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < kTileRows * kBlockRows; i += static_cast<int>(blockDim.x)) {
    const int row = i / kBlockRows, col = i % kBlockRows;
    if (row < m && n0 + col < wq.n) {
      const int num_warps = static_cast<int>(blockDim.x) / 32;
      float sum = partial[0][row][col];
      for (int v = 1; v < num_warps; ++v) sum += partial[v][row][col];  // warp order: fixed by K alone
      out[row * ld_out + n0 + col] = from_f32<T>(sum);
    }
  }
}

template <typename T, QuantFormat F, int kLaneBytes, int kTiles, int kSteps>
cudaError_t launch_config(void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w, int m,
                          cudaStream_t stream) {
  constexpr int64_t kStepK = 4 * kLaneBytes * kElemsPerByte<F>;
  const int64_t num_blocks = (w.n + kTileRows * kTiles - 1) / (kTileRows * kTiles);
  if (num_blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const int64_t steps = (w.k + kStepK - 1) / kStepK;
  int64_t warps = (steps + kSteps - 1) / kSteps;
  warps = warps < 1 ? 1 : (warps > kMaxWarps ? kMaxWarps : warps);
  const int64_t steps_per_warp = (steps + warps - 1) / warps;
  quant_gemv_kernel<T, F, kLaneBytes, kTiles, kSteps>
      <<<dim3(static_cast<unsigned>(num_blocks)), dim3(static_cast<unsigned>(warps * 32)), 0, stream>>>(
          static_cast<T*>(out), ld_out, static_cast<const T*>(x), ld_x, w, m, steps_per_warp);
  return cudaGetLastError();
}

// Tiles and steps per format, measured on an H100 with Qwen3-8B's MLP shapes (test_cuda_quant_gemm.cpp
// PrintsGemvBandwidth, bf16 x, M = 1 / 8). fp8 takes 4 tiles (32 rows a block, one x load for four W
// pieces) of 2 steps: [12288, 4096] 1530 -> 1630 GB/s, [4096, 12288] 1245 -> 1850 GB/s against
// 1 tile of 8 steps with x and scales loaded per step. int4, whose x is 4 bytes per byte of W, takes
// 2 tiles of 2 steps (120 registers; 4 tiles or 4 steps spill or halve occupancy): [4096, 12288]
// 950 -> 1370 GB/s, but [12288, 4096] 1160 -> 1020 GB/s (one batch a warp there, and less W in
// flight per lane than 8 steps of 1 tile gave). Converting e4m3 to bf16 by bits (one cvt and an
// exact multiply by 2^112 instead of the f32 round trip) measured 5% slower: the conversions are not
// the limit.
template <typename T, QuantFormat F, int kLaneBytes>
cudaError_t launch_typed(void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w, int m,
                         cudaStream_t stream) {
  constexpr int kTiles = F == QuantFormat::kFp8Block && kLaneBytes == 16 ? 4 : 2;
  constexpr int kSteps = kLaneBytes == 16 ? 2 : 4;
  return launch_config<T, F, kLaneBytes, kTiles, kSteps>(out, ld_out, x, ld_x, w, m, stream);
}

// The one dispatch point: format and piece width, then dtype.
template <typename T>
cudaError_t launch_for(void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w, int m,
                       int lane_bytes, cudaStream_t stream) {
  if (w.format == QuantFormat::kFp8Block) {
    if (lane_bytes == 16) return launch_typed<T, QuantFormat::kFp8Block, 16>(out, ld_out, x, ld_x, w, m, stream);
    if (lane_bytes == 8) return launch_typed<T, QuantFormat::kFp8Block, 8>(out, ld_out, x, ld_x, w, m, stream);
  } else {
    if (lane_bytes == 16) return launch_typed<T, QuantFormat::kInt4, 16>(out, ld_out, x, ld_x, w, m, stream);
    if (lane_bytes == 8) return launch_typed<T, QuantFormat::kInt4, 8>(out, ld_out, x, ld_x, w, m, stream);
    if (lane_bytes == 4) return launch_typed<T, QuantFormat::kInt4, 4>(out, ld_out, x, ld_x, w, m, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int quant_gemv_lane_bytes(DType dtype, const QuantWeight& w, const void* x, int64_t ld_x, int64_t m) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return 0;
  if (w.format == QuantFormat::kMxfp4) return 0;
  if (m < 1 || m > kQuantGemvMaxRows || w.n < 0 || w.k <= 0 || w.block_n <= 0 || w.block_k <= 0) return 0;
  if (w.data == nullptr || w.scales == nullptr || (w.format == QuantFormat::kInt4 && w.zeros == nullptr)) return 0;
  if ((m > 1 && ld_x % 8 != 0) || reinterpret_cast<uintptr_t>(x) % 16 != 0) return 0;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return 0;
  const int elems_per_byte = w.format == QuantFormat::kInt4 ? 2 : 1;
  for (int lane_bytes : {16, 8, 4}) {
    if (w.format == QuantFormat::kFp8Block && lane_bytes == 4) continue;  // x pieces stay whole 16-byte loads
    const int64_t elems = static_cast<int64_t>(lane_bytes) * elems_per_byte, step_k = 4 * elems;
    if (w.k % elems == 0 && w.block_k % step_k == 0) return lane_bytes;
  }
  return 0;
}

bool quant_gemv_device_supported(int device) {
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 8;
}

cudaError_t launch_quant_gemv(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x,
                              const QuantWeight& w, int64_t m, cudaStream_t stream) {
  const int lane_bytes = quant_gemv_lane_bytes(dtype, w, x, ld_x, m);
  if (lane_bytes == 0) return cudaErrorInvalidValue;
  if (w.n == 0) return cudaSuccess;
  const int rows = static_cast<int>(m);
  switch (dtype) {
    case DType::kBF16: return launch_for<__nv_bfloat16>(out, ld_out, x, ld_x, w, rows, lane_bytes, stream);
    case DType::kF16: return launch_for<__half>(out, ld_out, x, ld_x, w, rows, lane_bytes, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pagellm::cuda
