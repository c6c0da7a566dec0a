// The decode-sized matrix product (gemv.h): out[M, N] = x[M, K] . w[N, K]^T, M <= 8, bf16/f16.
//
// Why tensor cores for a "GEMV": with plain FMAs every 16-byte piece of w costs 8 conversions plus
// 8 * M FMAs plus 8 * M conversions of x per lane, so at M = 8 the SM's issue rate, not HBM, is the
// limit (~4 TB/s at best on an H100/H200). One mma.sync.m16n8k16 instead multiplies 8 rows of w by
// all 8 rows of x over 16 k: per 512 bytes of w a warp issues one load instruction of w (16 bytes a
// lane), at most one of x and two mma. The cost is the same for every M <= 8, so the SM's issue slots
// go to keeping loads in flight.
//
// Mapping (per warp, one "step" = 8 rows of w x 32 k):
//   lane = 4 g + t (g = lane / 4 in 0..7, t = lane % 4)
//   the lane loads 8 consecutive elements w[n0 + g, k0 + 8t .. +8] and x[g, k0 + 8t .. +8] (x row g
//   only when g < M; zeros otherwise) as one uint4 each, and feeds them to two m16n8k16 mma:
//   A = x (16 x 16, rows 8..15 zero), B = w^T (16 x 8, column n = g), C (16 x 8 f32).
//   The mma's fragments want, for lane (g, t): A row g at logical k {2t, 2t+1, 2t+8, 2t+9}, B column g
//   at the same logical k. Logical k 2t + j and 2t + 8 + j are mapped to physical k0 + 8t + j and
//   k0 + 8t + 2 + j (first mma; + 4 for the second): a bijection that depends only on (t, logical k),
//   so A and B see the same permutation of k and the product is the plain sum over k. C lane (g, t)
//   holds out[m = g, n0 + 2t] and out[g, n0 + 2t + 1] (rows g + 8 are the zero padding of A).
//
// Split K: a block owns 8 output columns n (one tile) and its warps take contiguous ranges of steps;
// each warp chains its mma in ascending k, then the warps' partial sums are added in warp order
// through shared memory. The number of warps and their ranges depend on (N, K) and the device only,
// never on M, and the tensor core computes each element of C from its own row of A and column of B:
// row m's result is the same bits for every M (batch invariance), and does not depend on what the
// other rows of x hold.
//
// Launch geometry (measured on an H200 over Qwen3-0.6B / 8B / 8B-halved shapes, M = 1 and 8): a warp
// issues kUnroll = 4 steps of loads (64 bytes of w a lane) at once, then their 8 mma. Registers are
// capped at 64 so that two 16-warp blocks (or four 8-warp ones) share an SM: a block is one burst of
// loads, and with one resident block an SM sat idle between the burst's tail and the next block
// (measured 2.2-3.0 TB/s on the 8B shapes; now 3.1-4.1, and 4.47 TB/s on the head at the chip's read
// ceiling). Warps per tile: up to 16 with at most kUnroll steps a round; but where the tiles are few
// (<= a quarter of the resident warps), exactly one wave of warps, each with a longer range of at
// most 8 rounds, so that no second partial wave pays the ramp and the tail again (o [4096, 4096]:
// 10.7 -> 10.6 us, halved-8B q|k|v [3072, 4096]: 9.3 -> 8.5 us). One wave counts whole blocks: 384
// tiles on 132 SMs are 3 blocks an SM, so 10 warps a block (11 left only 2 blocks resident an SM).
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/gemv.h"
#include "backend/cuda/mma_16816.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kTileRows = 8;   // columns n of out per block: the mma's N
constexpr int kStepK = 32;     // k per warp step: 4 lanes x 8 elements
constexpr int kUnroll = kGemvRoundBytes / 16;  // steps (16 bytes a lane each) whose loads a warp has in flight
constexpr int kMaxWarps = kGemvMaxWarps;  // split-K warps per block
constexpr int kResidentWarps = 32;  // per SM at <= 64 registers a thread
constexpr int64_t kStreamingBlocksPerSm = 64;  // tiles an SM from which a product is a vocabulary head's
constexpr int kStreamingWarps = 6;

// One block per tile of 8 columns n; blockDim.x / 32 warps split K into ranges of steps_per_warp steps.
template <typename T>
__global__ void __launch_bounds__(kMaxWarps * 32, 2)
    gemv_kernel(T* __restrict__ out, int64_t ld_out, const T* __restrict__ x, int64_t ld_x,
                const T* __restrict__ w, int64_t ld_w, int m, int64_t n, int64_t k, int64_t steps_per_warp,
                const T* __restrict__ bias) {
  __shared__ float partial[kMaxWarps][kTileRows][kTileRows];  // [warp][m][n - n0]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const bool w_row_ok = n0 + g < n;  // the last tile of an N that is not a multiple of 8
  const bool x_row_ok = g < m;
  const T* w_lane = w + (w_row_ok ? (n0 + g) * ld_w : 0) + 8 * t;
  const T* x_lane = x + (x_row_ok ? g * ld_x : 0) + 8 * t;
  const int64_t first_step = warp * steps_per_warp;

  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t i = 0; i < steps_per_warp; i += kUnroll) {
    uint4 wv[kUnroll], xv[kUnroll];
    // All loads first: kUnroll x 16 bytes of w per lane in flight before the first mma waits.
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k0 = (first_step + i + u) * kStepK;
      const bool in_range = i + u < steps_per_warp && k0 + 8 * t < k;  // k % 8 == 0: a piece is all in or out
      wv[u] = in_range && w_row_ok ? load_streaming(w_lane + k0) : zero;
      xv[u] = in_range && x_row_ok ? __ldg(reinterpret_cast<const uint4*>(x_lane + k0)) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u >= steps_per_warp) break;  // warp-uniform: every lane agrees, as mma.sync requires
      mma_16816<T>(c, xv[u].x, xv[u].y, wv[u].x, wv[u].y);
      mma_16816<T>(c, xv[u].z, xv[u].w, wv[u].z, wv[u].w);
    }
  }

  partial[warp][g][2 * t] = c[0];
  partial[warp][g][2 * t + 1] = c[1];
  __syncthreads();
  // 64 outputs per tile; a one-warp block writes two each.
  for (int i = static_cast<int>(threadIdx.x); i < kTileRows * kTileRows; i += static_cast<int>(blockDim.x)) {
    const int row = i / kTileRows, col = i % kTileRows;
    if (row < m && n0 + col < n) {
      const int num_warps = static_cast<int>(blockDim.x) / 32;
      float sum = partial[0][row][col];
      for (int v = 1; v < num_warps; ++v) sum += partial[v][row][col];  // warp order: fixed by (N, K)
      // With a bias: rounded, then the bias added and rounded again (add_bias's bits, without its launch).
      if (bias != nullptr) sum = __fadd_rn(round_to<T>(sum), to_f32(bias[n0 + col]));
      out[row * ld_out + n0 + col] = from_f32<T>(sum);
    }
  }
}

// The bf16 / f16 GEMV's warps a tile (the quantized GEMV keeps gemv_warps_per_tile's rule alone).
// Vocabulary heads (many tiles an SM, streamed block after block): 16 warps only where each runs
// whole rounds, two or more (a partial round, or one round a block, left the SMs between bursts);
// else 6, whose 5 blocks keep 30 of an SM's 32 warps busy. H200, N = 151,936, M = 1, TB/s of the
// general rule -> 6 warps: K 1,536 3.30 -> 4.32, 2,048 3.69 -> 4.31, 2,560 3.24 -> 4.13, 2,880
// 3.63 -> 4.31 (gpt-oss-20b's head, N = 201,088: 3.65 -> 4.33), 3,072 3.71 -> 4.25, 3,584
// 4.07 -> 4.27, 5,120 3.99 -> 4.23; K 4,096 keeps 16 (4.39; 6: 4.25). 12 and 14 warps leave 8 and 4
// warps of an SM idle (2.9-3.9 TB/s). Below 12 rounds (K <= 1,024) the general rule was within 2% of
// the best warps count.
int64_t warps_per_tile(int64_t num_tiles, int64_t steps, int num_sms) {
  const int64_t blocks_per_sm = (num_tiles + num_sms - 1) / num_sms;
  const int64_t rounds = (steps + kUnroll - 1) / kUnroll;
  if (blocks_per_sm >= kStreamingBlocksPerSm && rounds >= 12)
    return rounds % (2 * kMaxWarps) == 0 && steps % kUnroll == 0 ? kMaxWarps : kStreamingWarps;
  return gemv_warps_per_tile(num_tiles, steps, kUnroll, num_sms);
}

}  // namespace

int64_t gemv_warps_per_tile(int64_t num_tiles, int64_t steps, int steps_per_round, int num_sms) {
  int64_t most = (steps + steps_per_round - 1) / steps_per_round;
  most = most < 1 ? 1 : (most > kMaxWarps ? kMaxWarps : most);
  // The most warps a block may have for all blocks to be resident at once (whole blocks fill an SM).
  const int64_t blocks_per_sm = (num_tiles + num_sms - 1) / num_sms;
  const int64_t one_wave = kResidentWarps / blocks_per_sm;
  // Past ~8 rounds a warp, a range's own latency chain costs more than the second wave (K = 12288).
  const bool few_tiles = one_wave >= 4 && one_wave < most && steps <= 8 * steps_per_round * one_wave;
  return few_tiles ? one_wave : most;
}

bool gemv_device_supported(int device) {
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 8;
}

cudaError_t launch_gemv(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x, const void* w,
                        int64_t ld_w, int64_t m, int64_t n, int64_t k, const void* bias, int num_sms,
                        cudaStream_t stream) {
  if (!gemv_applies(dtype, x, ld_x, w, ld_w, m, k) || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const int64_t num_tiles = (n + kTileRows - 1) / kTileRows;
  if (num_tiles > 0x7fffffff) return cudaErrorInvalidValue;
  const int64_t steps = (k + kStepK - 1) / kStepK;
  const int64_t warps = warps_per_tile(num_tiles, steps, num_sms);
  const int64_t steps_per_warp = (steps + warps - 1) / warps;
  const dim3 grid(static_cast<unsigned>(num_tiles)), block(static_cast<unsigned>(warps * 32));
  const int rows = static_cast<int>(m);
  switch (dtype) {
    case DType::kBF16:
      gemv_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(
          static_cast<__nv_bfloat16*>(out), ld_out, static_cast<const __nv_bfloat16*>(x), ld_x,
          static_cast<const __nv_bfloat16*>(w), ld_w, rows, n, k, steps_per_warp,
          static_cast<const __nv_bfloat16*>(bias));
      break;
    case DType::kF16:
      gemv_kernel<__half><<<grid, block, 0, stream>>>(static_cast<__half*>(out), ld_out,
                                                      static_cast<const __half*>(x), ld_x,
                                                      static_cast<const __half*>(w), ld_w, rows, n, k,
                                                      steps_per_warp, static_cast<const __half*>(bias));
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace pagellm::cuda
