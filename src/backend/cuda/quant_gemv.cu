// The decode-sized product with quantized weights (quant_gemv.h): out[M, N] = x[M, K] . W^T, M <= 16,
// x and out bf16/f16, W block-scaled FP8 (1 byte a weight) or group-quantized INT4 (half a byte).
//
// At decode the product is a stream of W through the SMs, so the kernel reads W once, in pieces of
// up to 16 bytes per lane, and dequantizes in registers; products run on the tensor cores as in
// gemv.cu (read that first), but with W as the mma's A operand: one mma.sync.m16n8k16 multiplies
// 16 rows of W by 8 rows of x (B, x^T) over 16 k, and M of 9..16 runs a second mma per converted
// piece of W for x rows 8..15. Every register of A carries weights (as the operand B of gemv.cu's
// mapping, half of A would be zero rows), so per weight there is half the mma, half the x loads and
// permutes, and no zero registers to rebuild. What is left per weight is
// its conversion, and the SM's issue slots are the limit: an earlier kernel with W as B, a 64-bit
// division per step and x addresses recomputed per load issued ~120 instructions per 512 bytes of W
// and streamed FP8 at 1.6-1.9 TB/s (as did the cp.async ring before it) where the bf16 GEMV streams
// 2.5-2.9 TB/s.
//
// Exact conversions, scales on the accumulators: the mma multiplies x by the *unscaled* quantized
// values, which T (bf16/f16) holds exactly, and each step's f32 sums are multiplied by the step's
// scale once (quant_pairs.cuh):
//   fp8:  e4m3 bits moved into T's fields, times 2^120 (bf16) / 2^8 (f16): exact, subnormals included
//   int4: T(128 + q) or T(1024 + q) by OR-ing the nibble into the bits of 128.0 (bf16) / 1024.0 (f16),
//         minus T(128 + zero): the integer q - zero in [-15, 15], exact in T.
// So a step must lie inside one scale block: a step is 4 lanes' pieces of k (lane t of a row reads
// piece t), 4 * kElems consecutive k, and the launcher only takes blocks/groups that are multiples
// of it (quant_gemv_lane_bytes). The result differs from the CPU's (dequantize in f32, then multiply)
// only in the order of the f32 sums: within the bf16 tolerance of the tests.
//
// Mapping (per warp, one "step" = 16 rows of W x 4 * kElems k), lane = 4 g + t:
//   the lane takes kLaneBytes of W rows n0 + g and n0 + g + 8 (kElems weights each, starting at
//   k0 + kElems t) and the same kElems elements of x row g (and g + 8 for M > 8; zeros past M). Per 16-byte piece of
//   x (8 elements) it forms 4 registers of two T each, "pairs", for x and for each of its two W rows,
//   all in the same order, and runs two mma: A = (row g pair p, row g + 8 pair p, row g pair p + 1,
//   row g + 8 pair p + 1), B = (x pair p, x pair p + 1). The mma wants logical k {2t, 2t + 1} in a0/a1/b0
//   and {2t + 8, 2t + 9} in a2/a3/b1; any bijection between a lane's elements and those logical k
//   works if A and B share it (gemv.cu). fp8 pairs of a word are (0, 2) and (1, 3); int4 pairs of a
//   word are (p, p + 4), p < 4 (what the bit tricks leave in the two halves), and x's pairs are
//   permuted to match with one byte_perm each.
//   C lane (g, t) holds out[m, n0 + g], out[m + 1, n0 + g], out[m, n0 + g + 8], out[m + 1, n0 + g + 8],
//   m = 2t (8 + 2t for the second group): the scales of rows g and g + 8 (int4: the lane reads them
//   with its pieces of those rows; fp8: the tile's).
//
// Split K and batch invariance as gemv.cu: a block owns one tile of 16 rows of W, its warps take
// contiguous ranges of steps (their number depends on N, K and the device only), partial sums are
// added in warp order. Column m of C depends only on row m of x.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/gemv.h"
#include "backend/cuda/mma_16816.cuh"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/quant_pairs.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kTileRows = 16;  // rows of W (columns of out) per block: the mma's M
constexpr int kXRows = 8;      // rows of x: the mma's N
constexpr int kMaxWarps = kGemvMaxWarps;
// Where the tiles are many (more than 8 blocks an SM), a warp runs at least kManyTilesRounds rounds:
// fewer, longer warps pay the prologue and the partial sums less often (H200, gate|up [24576, 4096]:
// fp8 31.8 -> 29.1 us, int4 32.6 -> 27.9 us); with few tiles that cost more than it saved (o [4096,
// 4096]: fp8 7.0 -> 7.6 us, int4 6.8 -> 9.6 us), so those keep gemv.cu's one round a warp.
constexpr int kManyTilesRounds = 4;

template <QuantFormat F>
constexpr int kElemsPerByte = F == QuantFormat::kInt4 ? 2 : 1;

// Steps a warp loads at once: two rows of kLaneBytes each per step (64 bytes a lane), but at most 2
// for int4 pieces under 16 bytes (their scales and zero points per step spilled past 64 registers).
template <QuantFormat F, int kLaneBytes>
constexpr int kUnroll = F == QuantFormat::kInt4 && kLaneBytes < 16 ? 2 : kGemvRoundBytes / (2 * kLaneBytes);

// One lane's piece of W for one step, as loaded: kBytes / 4 words, read once, past L1.
template <int kBytes>
struct Words {
  uint32_t v[kBytes / 4];
};
template <int kBytes>
__device__ __forceinline__ Words<kBytes> load_words(const uint8_t* p) {
  Words<kBytes> r;
  if constexpr (kBytes == 16) {
    const uint4 q = load_streaming(p);
    r.v[0] = q.x, r.v[1] = q.y, r.v[2] = q.z, r.v[3] = q.w;
  } else if constexpr (kBytes == 8) {
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.v[0]), "=r"(r.v[1]) : "l"(p));
  } else {
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r.v[0]) : "l"(p));
  }
  return r;
}

// The pairs of 8 elements of x (one 16-byte piece), in the order F's conversion leaves W's pairs.
template <QuantFormat F>
__device__ __forceinline__ void x_pairs(const uint4& v, uint32_t (&p)[4]) {
  if constexpr (F == QuantFormat::kFp8Block) {  // per 4 elements, pairs (0, 2) and (1, 3)
    p[0] = __byte_perm(v.x, v.y, 0x5410);
    p[1] = __byte_perm(v.x, v.y, 0x7632);
    p[2] = __byte_perm(v.z, v.w, 0x5410);
    p[3] = __byte_perm(v.z, v.w, 0x7632);
  } else {  // pairs (p, p + 4): low halves of (v.x, v.z), high halves, then (v.y, v.w)
    p[0] = __byte_perm(v.x, v.z, 0x5410);
    p[1] = __byte_perm(v.x, v.z, 0x7632);
    p[2] = __byte_perm(v.y, v.w, 0x5410);
    p[3] = __byte_perm(v.y, v.w, 0x7632);
  }
}

// The pairs of W's 8 elements that meet x's piece q: fp8 words 2q and 2q + 1, int4 word q (minus the
// zero point, 0..15).
template <typename T, QuantFormat F, int kBytes>
__device__ __forceinline__ void w_pairs(const Words<kBytes>& w, int q, uint32_t zero, uint32_t (&p)[4]) {
  if constexpr (F == QuantFormat::kFp8Block) {
    e4m3x4_to_pairs<T>(w.v[2 * q], p[0], p[1]);
    e4m3x4_to_pairs<T>(w.v[2 * q + 1], p[2], p[3]);
  } else {
    int4x8_to_pairs<T>(w.v[q], zero, p);
  }
}

// What the launcher derives from the weight's shape, so that the kernel's prologue has no 64-bit
// division (each one is ~100 instructions; a warp runs only a few rounds).
struct GemvGeometry {
  int steps_per_warp = 0;
  int block_shift = 0;          // log2(block_k / step_k)
  int k_blocks = 0;             // scale blocks along K
  int tiles_per_scale_row = 1;  // fp8: block_n / 16
};

// One block per tile of 16 rows of W; blockDim.x / 32 warps split K into ranges of steps_per_warp
// steps. A step's scale block is step >> block_shift (block_k / step_k is a power of two: no
// division in the loop). K < 2^31.
// kGroups: 8-row groups of x (M <= 8 or M <= 16); the second group reuses every converted weight.
// Two groups load half the steps a round (at 64 registers their accumulators spilled otherwise); a
// round's size changes when loads are issued, not the order of any sum (batch invariance holds).
template <typename T, QuantFormat F, int kLaneBytes, int kGroups>
__global__ void __launch_bounds__(kMaxWarps * 32, 2)
    quant_gemv_kernel(T* __restrict__ out, int64_t ld_out, const T* __restrict__ x, int64_t ld_x, QuantWeight wq,
                      int m, GemvGeometry geo) {
  const int steps_per_warp = geo.steps_per_warp, block_shift = geo.block_shift, k_blocks = geo.k_blocks;
  constexpr int kElems = kLaneBytes * kElemsPerByte<F>;
  constexpr int kXVecs = kElems / 8;  // 16-byte pieces of x per lane and step
  constexpr int kStepK = 4 * kElems;
  constexpr int kSteps = kGroups == 1 ? kUnroll<F, kLaneBytes> : (kUnroll<F, kLaneBytes> + 1) / 2;
  __shared__ float partial[kMaxWarps][kGroups * kXRows][kTileRows];  // [warp][m][n - n0]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int k = static_cast<int>(wq.k);
  const int64_t row_bytes = wq.k / kElemsPerByte<F>;
  // This lane's two W rows (null past N: the last tile of an N that is not a multiple of 16).
  const bool ok_a = n0 + g < wq.n, ok_b = n0 + g + 8 < wq.n;
  const uint8_t* w_a = static_cast<const uint8_t*>(wq.data) + (n0 + g) * row_bytes + t * kLaneBytes;
  // x rows g and g + 8 (the second group's): B's column g of each group's mma. (Scalars, not arrays:
  // with an array the compiler rebuilt the address from the parameters for every load, 15-20% of the
  // fp8 GEMV's time.)
  const bool x_row_ok0 = g < m, x_row_ok1 = kGroups > 1 && g + kXRows < m;
  const T* x_lane0 = x + (x_row_ok0 ? g * ld_x : 0) + t * kElems;
  const T* x_lane1 = x + (x_row_ok1 ? (g + kXRows) * ld_x : 0) + t * kElems;
  // Scales and zero points of this lane's two rows (rows past N read row n0's): fp8 one per tile and
  // step (the launcher takes block_n % 16 == 0: a tile lies in one block row; a second scale load per
  // step cost 5-15% of the fp8 GEMV's time), int4 one per row and group (block_n = 1).
  // (Offsets from the kernel's parameters rather than pointers: two registers fewer each, and at 64
  // registers the pointers spilled.)
  const int row_a = static_cast<int>(ok_a ? n0 + g : n0), row_b = static_cast<int>(ok_b ? n0 + g + 8 : n0);
  const int scale_row_a =
      F == QuantFormat::kFp8Block ? static_cast<int>(blockIdx.x) / geo.tiles_per_scale_row : row_a;
  const int scales_a = scale_row_a * k_blocks;
  const int scales_b = row_b * k_blocks;  // int4 only
  const int zeros_a = row_a * k_blocks, zeros_b = row_b * k_blocks;
  const int first_step = warp * steps_per_warp;
  // This warp's steps, and those of them whose four pieces all lie inside K (the rounds of those need
  // no bounds checks: every warp but the last has only such steps).
  const int total_steps = (k + kStepK - 1) / kStepK, full_steps = k / kStepK;
  const int my_steps = max(0, min(steps_per_warp, total_steps - first_step));
  const int my_full = max(0, min(my_steps, full_steps - first_step));
  constexpr int kRowStepBytes = kStepK / kElemsPerByte<F>;  // bytes of one W row per step
  const uint8_t* w_a_warp = w_a + static_cast<int64_t>(first_step) * kRowStepBytes;
  const int64_t w_b_delta = 8 * row_bytes;  // row g + 8 from row g
  const T* x_warp0 = x_lane0 + static_cast<int64_t>(first_step) * kStepK;
  const T* x_warp1 = x_lane1 + static_cast<int64_t>(first_step) * kStepK;

  float c[kGroups][4] = {};
  // One round: the loads of kN steps from step first_step + i, then their conversions and mma.
  // kChecked: pieces past K read nothing and add nothing.
  auto round = [&](int i, auto num_steps, auto checked) {
    constexpr int kN = decltype(num_steps)::value;
    constexpr bool kChecked = decltype(checked)::value;
    Words<kLaneBytes> wa[kN], wb[kN];
    float sa[kN], sb[kN];
    uint32_t za[kN], zb[kN];
    bool x_ok[kN][kGroups];
    // All loads first: kN pieces of each W row per lane (and their scales) in flight before a
    // conversion.
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const int step = first_step + i + u;
      const bool piece_ok = !kChecked || step * kStepK + kElems * t < k;  // k % kElems == 0: all in or out
      x_ok[u][0] = piece_ok && x_row_ok0;
      if constexpr (kGroups > 1) x_ok[u][1] = piece_ok && x_row_ok1;
      const int block = step >> block_shift;  // the step's scale block (one)
      const int offset = (i + u) * kRowStepBytes;
      wa[u] = piece_ok && ok_a ? load_words<kLaneBytes>(w_a_warp + offset) : Words<kLaneBytes>{};
      wb[u] = piece_ok && ok_b ? load_words<kLaneBytes>(w_a_warp + w_b_delta + offset) : Words<kLaneBytes>{};
      sa[u] = __ldg(wq.scales + scales_a + block);
      if constexpr (F == QuantFormat::kInt4) {
        sb[u] = __ldg(wq.scales + scales_b + block);
        za[u] = __ldg(wq.zeros + zeros_a + block);
        zb[u] = __ldg(wq.zeros + zeros_b + block);
      } else {
        sb[u] = sa[u];
        za[u] = zb[u] = 0;
      }
    }
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      float sums[kGroups][4] = {};
#pragma unroll
      for (int q = 0; q < kXVecs; ++q) {
        uint32_t xp[kGroups][4], pa[4], pb[4];
#pragma unroll
        for (int grp = 0; grp < kGroups; ++grp) {
          const T* x_row = grp == 0 ? x_warp0 : x_warp1;
          const uint4 xv = x_ok[u][grp] ? __ldg(reinterpret_cast<const uint4*>(x_row + (i + u) * kStepK + 8 * q))
                                        : make_uint4(0, 0, 0, 0);
          x_pairs<F>(xv, xp[grp]);
        }
        w_pairs<T, F>(wa[u], q, za[u], pa);
        w_pairs<T, F>(wb[u], q, zb[u], pb);
#pragma unroll
        for (int grp = 0; grp < kGroups; ++grp) {
          mma_16816_rows16<T>(sums[grp], pa[0], pb[0], pa[1], pb[1], xp[grp][0], xp[grp][1]);
          mma_16816_rows16<T>(sums[grp], pa[2], pb[2], pa[3], pb[3], xp[grp][2], xp[grp][3]);
        }
      }
      // sums[grp]: out[m, n0 + g], out[m + 1, n0 + g], out[m, n0 + g + 8], out[m + 1, n0 + g + 8] of this
      // step, m = 8 grp + 2t.
#pragma unroll
      for (int grp = 0; grp < kGroups; ++grp) {
        c[grp][0] = fmaf(sums[grp][0], sa[u], c[grp][0]);
        c[grp][1] = fmaf(sums[grp][1], sa[u], c[grp][1]);
        c[grp][2] = fmaf(sums[grp][2], sb[u], c[grp][2]);
        c[grp][3] = fmaf(sums[grp][3], sb[u], c[grp][3]);
      }
    }
  };
  int i = 0;
  for (; i + kSteps <= my_full; i += kSteps) round(i, std::integral_constant<int, kSteps>{}, std::false_type{});
  // The rest one step a round (fewer registers than the full rounds, which keep 64 for their loads).
  for (; i < my_steps; ++i) round(i, std::integral_constant<int, 1>{}, std::true_type{});

#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
    partial[warp][kXRows * grp + 2 * t][g] = c[grp][0];
    partial[warp][kXRows * grp + 2 * t + 1][g] = c[grp][1];
    partial[warp][kXRows * grp + 2 * t][g + 8] = c[grp][2];
    partial[warp][kXRows * grp + 2 * t + 1][g + 8] = c[grp][3];
  }
  __syncthreads();
  // 128 outputs per tile and group; a one-warp block writes four each.
  for (int i = static_cast<int>(threadIdx.x); i < kGroups * kXRows * kTileRows; i += static_cast<int>(blockDim.x)) {
    const int row = i / kTileRows, col = i % kTileRows;
    if (row < m && n0 + col < wq.n) {
      const int num_warps = static_cast<int>(blockDim.x) / 32;
      float sum = partial[0][row][col];
      for (int v = 1; v < num_warps; ++v) sum += partial[v][row][col];  // warp order: fixed by (N, K)
      out[row * ld_out + n0 + col] = from_f32<T>(sum);
    }
  }
}

template <typename T, QuantFormat F, int kLaneBytes>
cudaError_t launch_typed(void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w, int m,
                         int num_sms, cudaStream_t stream) {
  constexpr int64_t kStepK = 4 * kLaneBytes * kElemsPerByte<F>;
  const int64_t num_tiles = (w.n + kTileRows - 1) / kTileRows;
  if (num_tiles > 0x7fffffff) return cudaErrorInvalidValue;
  const int64_t steps = (w.k + kStepK - 1) / kStepK;
  const int rounds = (num_tiles + num_sms - 1) / num_sms > 8 ? kManyTilesRounds : 1;
  const int64_t warps = gemv_warps_per_tile(num_tiles, steps, kUnroll<F, kLaneBytes> * rounds, num_sms);
  GemvGeometry geo;
  geo.steps_per_warp = static_cast<int>((steps + warps - 1) / warps);
  while ((kStepK << geo.block_shift) < w.block_k) ++geo.block_shift;  // block_k / kStepK: a power of two
  geo.k_blocks = static_cast<int>((w.k + w.block_k - 1) / w.block_k);
  geo.tiles_per_scale_row = F == QuantFormat::kFp8Block ? static_cast<int>(w.block_n / kTileRows) : 1;
  const dim3 grid(static_cast<unsigned>(num_tiles)), block(static_cast<unsigned>(warps * 32));
  if (m <= kXRows) {
    quant_gemv_kernel<T, F, kLaneBytes, 1><<<grid, block, 0, stream>>>(static_cast<T*>(out), ld_out,
                                                                        static_cast<const T*>(x), ld_x, w, m, geo);
  } else {
    quant_gemv_kernel<T, F, kLaneBytes, 2><<<grid, block, 0, stream>>>(static_cast<T*>(out), ld_out,
                                                                        static_cast<const T*>(x), ld_x, w, m, geo);
  }
  return cudaGetLastError();
}

// The one dispatch point: format and piece width, then dtype.
template <typename T>
cudaError_t launch_for(void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w, int m,
                       int lane_bytes, int num_sms, cudaStream_t stream) {
  if (w.format == QuantFormat::kFp8Block) {
    if (lane_bytes == 16)
      return launch_typed<T, QuantFormat::kFp8Block, 16>(out, ld_out, x, ld_x, w, m, num_sms, stream);
    if (lane_bytes == 8) return launch_typed<T, QuantFormat::kFp8Block, 8>(out, ld_out, x, ld_x, w, m, num_sms, stream);
  } else {
    if (lane_bytes == 16) return launch_typed<T, QuantFormat::kInt4, 16>(out, ld_out, x, ld_x, w, m, num_sms, stream);
    if (lane_bytes == 8) return launch_typed<T, QuantFormat::kInt4, 8>(out, ld_out, x, ld_x, w, m, num_sms, stream);
    if (lane_bytes == 4) return launch_typed<T, QuantFormat::kInt4, 4>(out, ld_out, x, ld_x, w, m, num_sms, stream);
  }
  return cudaErrorInvalidValue;
}

// The piece width whose layout the weight allows (widest first), 0 when none.
int layout_lane_bytes(const QuantWeight& w) {
  // fp8: one scale per tile of 16 rows (the kernel reads the tile's); x pieces stay whole 16-byte loads.
  if (w.format == QuantFormat::kFp8Block && w.block_n % kTileRows != 0) return 0;
  const int elems_per_byte = w.format == QuantFormat::kInt4 ? 2 : 1;
  for (int lane_bytes : {16, 8, 4}) {
    const int64_t elems = static_cast<int64_t>(lane_bytes) * elems_per_byte, step_k = 4 * elems;
    if (elems < 8 || w.block_k % step_k != 0) continue;
    const int64_t steps_per_block = w.block_k / step_k;
    if (w.k % elems == 0 && (steps_per_block & (steps_per_block - 1)) == 0) return lane_bytes;
  }
  return 0;
}

}  // namespace

int quant_gemv_lane_bytes(DType dtype, const QuantWeight& w, const void* x, int64_t ld_x, int64_t m) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return 0;
  if (w.format == QuantFormat::kMxfp4) return 0;
  if (m < 1 || m > kQuantGemvMaxRows || w.n < 0 || w.k <= 0 || w.k > 0x7fffffff || w.block_n <= 0 || w.block_k <= 0)
    return 0;
  if (w.n * ((w.k + w.block_k - 1) / w.block_k) > 0x7fffffff) return 0;  // int offsets of scales / zero points
  if (w.data == nullptr || w.scales == nullptr || (w.format == QuantFormat::kInt4 && w.zeros == nullptr)) return 0;
  if ((m > 1 && ld_x % 8 != 0) || reinterpret_cast<uintptr_t>(x) % 16 != 0) return 0;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return 0;
  return layout_lane_bytes(w);
}

bool quant_gemv_device_supported(int device) {
  return gemv_device_supported(device);
}

cudaError_t launch_quant_gemv(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x,
                              const QuantWeight& w, int64_t m, int num_sms, cudaStream_t stream) {
  const int lane_bytes = quant_gemv_lane_bytes(dtype, w, x, ld_x, m);
  if (lane_bytes == 0) return cudaErrorInvalidValue;
  if (w.n == 0) return cudaSuccess;
  const int rows = static_cast<int>(m);
  switch (dtype) {
    case DType::kBF16: return launch_for<__nv_bfloat16>(out, ld_out, x, ld_x, w, rows, lane_bytes, num_sms, stream);
    case DType::kF16: return launch_for<__half>(out, ld_out, x, ld_x, w, rows, lane_bytes, num_sms, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pagellm::cuda
