// The MoE ops on the device (backend.h moe_route, moe_group, moe_expert_gemm, moe_combine; CPU twins
// in cpu/moe.cpp). Nothing here reads back to the host, and every grid depends on T alone, so a
// decode step's MoE layers are captured in its CUDA graph.
//
// moe_expert_gemm has two tensor-core kernels with one arithmetic (read "The arithmetic both
// tensor-core kernels share" below), so a pair's output is the same bits alone or in any batch:
// moe_gemv_kernel for decode-sized batches (a warp streams 16 weight rows of one expert over all of
// K, or at batch 1 over one of K's two segments, as the mma's A operand, for one tile of up to 8
// pairs, or two tiles of one expert where the experts hold a tile of pairs on average: only the
// chosen experts are read, once per block) and
// moe_gemm_tiled_kernel above kSharedWeightsMinRows grouped rows (a persistent block an SM: 256
// weight rows of one expert times up to 16 of its tiles, both staged through shared memory with
// cp.async). With the activation fused (gate_up), both kernels' 16-row groups are 8 gate rows
// and the matching 8 up rows, so each epilogue has both halves of act(gate) * up.
// MXFP4 experts (bf16 activations): 16 bytes of e2m1 nibbles and one e8m0 scale per lane and super-step,
// converted exactly to bf16 in registers (table lookups with prmt and one bf16 multiply per pair).
// Other dtypes (f32, or f16 with MXFP4, whose range cannot hold every scaled value) and K % 32 != 0
// (a tensor-parallel shard of a small expert) take a plain f32 FMA kernel over the same layout.
#include <algorithm>
#include <atomic>
#include <cfloat>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/mma_16816.cuh"
#include "backend/cuda/moe.h"
#include "backend/cuda/quant_pairs.cuh"
#include "backend/cuda/row_norm.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kTileRows = 8;  // pairs per tile (backend.h kMoeTileRows) = weight rows per warp
// Above this many grouped rows the tiled kernel shares each weight load among a block's tiles.
constexpr int64_t kSharedWeightsMinRows = 2048;

// ----- moe_route: one warp per token --------------------------------------------------------------

constexpr int kRouteWarps = 4;
constexpr int kMaxRouteExperts = 32 * 64;  // a lane's chosen experts fit one 64-bit mask

// The better of two candidates (value, expert): larger value, ties to the lower expert; -1 = none.
__device__ __forceinline__ void better_of(float& value, int& expert, float other_value, int other_expert) {
  if (other_expert < 0) return;
  if (expert < 0 || other_value > value || (other_value == value && other_expert < expert)) {
    value = other_value;
    expert = other_expert;
  }
}

// Lane 0's sum of v[0..n) in index order (the CPU twin's order): the loads four at a time and
// unrolled, so they are in flight together ahead of the chain of adds (one load waited for per element
// was ~2 us of a 128-expert route).
__device__ __forceinline__ float ordered_sum(const float* v, int n) {
  float sum = 0.0f;
  int i = 0;
  if (reinterpret_cast<uintptr_t>(v) % 16 == 0) {
#pragma unroll 8
    for (; i + 4 <= n; i += 4) {
      const float4 q = *reinterpret_cast<const float4*>(v + i);
      sum = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(sum, q.x), q.y), q.z), q.w);
    }
  }
  for (; i < n; ++i) sum = __fadd_rn(sum, v[i]);
  return sum;
}

// Shared memory per warp: the token's scores [E], then its chosen experts' values [k]. Rounded up to 16
// bytes, so every warp's scores are aligned for ordered_sum's vector loads.
__host__ __device__ constexpr int64_t route_warp_floats(int64_t num_experts, int64_t top_k) {
  return (num_experts + top_k + 3) / 4 * 4;
}

// A score as an unsigned key in the order better_of compares numbers: -0 and +0 one key. NaN gets the
// lowest key (a router that gives NaN logits has no meaningful top-k; the twins are not compared there).
__device__ __forceinline__ unsigned score_key(float v) {
  if (v != v) return 0u;
  const unsigned u = __float_as_uint(v + 0.0f);  // -0 + 0 = +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One token's routing by one warp: `row` its E logits, ids / weights its k slots in global memory
// (the ids also in shared_ids, when not null), `score` the warp's route_warp_floats of shared memory
// (16-byte aligned).
template <typename T>
__device__ void route_token(int32_t* __restrict__ ids, float* __restrict__ weights, int* shared_ids,
                            const T* __restrict__ row, float* score, int num_experts, int top_k, MoeRouting routing,
                            bool renormalize) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float* chosen_value = score + num_experts;
  for (int e = lane; e < num_experts; e += 32) score[e] = to_f32(row[e]);
  __syncwarp();
  if (routing == MoeRouting::kSoftmaxTopK) {
    float max_logit = -INFINITY;
    for (int e = lane; e < num_experts; e += 32) max_logit = fmaxf(max_logit, score[e]);
    max_logit = warp_max(max_logit);
    for (int e = lane; e < num_experts; e += 32) score[e] = expf(score[e] - max_logit);
    __syncwarp();
    float sum = 0.0f;  // in expert order, as the CPU twin sums
    if (lane == 0) sum = ordered_sum(score, num_experts);
    sum = __shfl_sync(kFullMask, sum, 0);
    for (int e = lane; e < num_experts; e += 32) score[e] = __fdiv_rn(score[e], sum);
    __syncwarp();
  }
  // Top-k: each lane keeps the best of its experts (e = lane + 32 i) not taken yet, the warp picks
  // the best of those with two reductions (the largest score key, then the lowest expert holding it:
  // better_of's order, larger value, then lower expert), and only the lane that owned the pick looks
  // for its next best. (A butterfly of better_of over shuffles was ~110 dependent instructions a pick.)
  uint64_t taken = 0;  // bit i: expert lane + 32 i
  auto lane_best = [&](float& value, int& expert) {
    value = 0.0f;
    expert = -1;
    for (int i = 0, e = lane; e < num_experts; ++i, e += 32)
      if (!(taken >> i & 1)) better_of(value, expert, score[e], e);
  };
  float mine_value;
  int mine_expert;
  lane_best(mine_value, mine_expert);
  for (int j = 0; j < top_k; ++j) {
    const unsigned key = mine_expert >= 0 ? score_key(mine_value) : 0u;
    const unsigned best_key = __reduce_max_sync(kFullMask, key);
    const int expert = static_cast<int>(
        __reduce_min_sync(kFullMask, mine_expert >= 0 && key == best_key ? static_cast<unsigned>(mine_expert) : ~0u));
    const float value = __shfl_sync(kFullMask, mine_value, expert % 32);
    if (expert % 32 == lane) {
      taken |= uint64_t{1} << (expert / 32);
      lane_best(mine_value, mine_expert);
    }
    if (lane == 0) {
      ids[j] = expert;
      if (shared_ids != nullptr) shared_ids[j] = expert;
      chosen_value[j] = value;  // p, or the logit (kTopKSoftmax)
    }
  }
  __syncwarp();
  // The weights: sums in slot order on lane 0, the rest a slot per lane.
  if (routing == MoeRouting::kTopKSoftmax) {
    const float max_logit = chosen_value[0];
    for (int j = lane; j < top_k; j += 32) chosen_value[j] = expf(chosen_value[j] - max_logit);
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
      for (int j = 0; j < top_k; ++j) sum = __fadd_rn(sum, chosen_value[j]);
    sum = __shfl_sync(kFullMask, sum, 0);
    for (int j = lane; j < top_k; j += 32) weights[j] = round_to<T>(__fdiv_rn(chosen_value[j], sum));
  } else {
    float top_sum = 0.0f;
    if (lane == 0)
      for (int j = 0; j < top_k; ++j) top_sum = __fadd_rn(top_sum, chosen_value[j]);
    top_sum = __shfl_sync(kFullMask, top_sum, 0);
    for (int j = lane; j < top_k; j += 32)
      weights[j] = round_to<T>(renormalize ? __fdiv_rn(chosen_value[j], top_sum) : chosen_value[j]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights, Rows logits, int num_experts,
                     int top_k, MoeRouting routing, bool renormalize) {
  extern __shared__ __align__(16) float route_smem[];  // [kRouteWarps][route_warp_floats]
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= logits.num_rows) return;  // no block-wide barrier in route_token
  route_token(topk_ids + t * top_k, topk_weights + t * top_k, nullptr, row_ptr<const T>(logits, t),
              route_smem + warp * route_warp_floats(num_experts, top_k), num_experts, top_k, routing, renormalize);
}

// ----- moe_group: one block ----------------------------------------------------------------------
//
// Warp w owns a contiguous range of pairs. Pass 1 counts each expert's pairs per warp (lanes that hold
// the same expert find each other with __match_any_sync; the lowest adds their number), a scan over
// warps then gives each warp its start within each expert, and pass 2 places every pair at
// expert start + its warp's start + the number of same-expert lanes below it: ascending pair order
// within each expert, deterministic.

constexpr int kGroupWarps = 16;
constexpr int kMaxGroupExperts = kGroupWarps * 32;  // a thread per expert

// Ints of shared memory the grouping takes (a multiple of 4: what follows stays 16-byte aligned).
__host__ __device__ constexpr int64_t group_smem_ints(int64_t num_experts) {
  return (kGroupWarps * num_experts + num_experts + 1 + 3) / 4 * 4;
}

// The whole block (kGroupWarps warps) groups the pairs; topk_ids may be in shared or global memory.
__device__ void group_pairs(int* group_smem, int32_t* __restrict__ tile_pairs, int32_t* __restrict__ tile_experts,
                            int num_tiles, const int32_t* topk_ids, int pairs, int num_experts) {
  int* counts = group_smem;                                  // [kGroupWarps][E]: pairs, then the warp's start
  int* first_tile = group_smem + kGroupWarps * num_experts;  // [E + 1]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  for (int i = tid; i < kGroupWarps * num_experts; i += threads) counts[i] = 0;
  __syncthreads();
  const int per_warp = ((pairs + kGroupWarps - 1) / kGroupWarps + 31) / 32 * 32;
  const int begin = warp * per_warp, end = min(pairs, begin + per_warp);
  int* mine = counts + warp * num_experts;
  for (int base = begin; base < end; base += 32) {
    const int p = base + lane;
    const int e = p < end ? topk_ids[p] : -1;
    if (e >= num_experts || e < -1) __trap();  // ids come from moe_route: a broken invariant
    const unsigned same = __match_any_sync(kFullMask, e);
    if (e >= 0 && lane == __ffs(same) - 1) mine[e] += __popc(same);
    __syncwarp();
  }
  __syncthreads();
  // Thread e (E <= the block's threads): the expert's start in each warp's range, its total and tiles,
  // then its first tile by an exclusive scan of the tiles over e (warp scans, then over the warps'
  // totals), where one thread walking all experts was ~2 us of a 128-expert step.
  __shared__ int warp_tiles[kGroupWarps];
  int tiles = 0;
  if (tid < num_experts) {
    int running = 0;
    for (int w = 0; w < kGroupWarps; ++w) {
      const int c = counts[w * num_experts + tid];
      counts[w * num_experts + tid] = running;
      running += c;
    }
    tiles = (running + kTileRows - 1) / kTileRows;
  }
  int total_tiles = 0;
  const int inclusive = block_inclusive_scan<kGroupWarps>(tiles, warp_tiles, total_tiles);
  if (tid < num_experts) first_tile[tid] = inclusive - tiles;
  if (tid == 0) first_tile[num_experts] = total_tiles;  // every expert's tiles
  __syncthreads();
  for (int tile = tid; tile < num_tiles; tile += threads) {
    int expert = -1;
    if (tile < first_tile[num_experts]) {  // the last e with first_tile[e] <= tile
      int lo = 0, hi = num_experts;        // first_tile[lo] <= tile < first_tile[hi]
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (first_tile[mid] <= tile) lo = mid; else hi = mid;
      }
      expert = lo;
    }
    tile_experts[tile] = expert;
  }
  for (int i = tid; i < num_tiles * kTileRows; i += threads) tile_pairs[i] = -1;
  __syncthreads();
  const unsigned below = (1u << lane) - 1u;
  for (int base = begin; base < end; base += 32) {
    const int p = base + lane;
    const int e = p < end ? topk_ids[p] : -1;
    const unsigned same = __match_any_sync(kFullMask, e);
    if (e >= 0) tile_pairs[first_tile[e] * kTileRows + mine[e] + __popc(same & below)] = p;
    __syncwarp();
    if (e >= 0 && lane == __ffs(same) - 1) mine[e] += __popc(same);
    __syncwarp();
  }
}

__global__ void __launch_bounds__(kGroupWarps * 32)
    moe_group_kernel(int32_t* __restrict__ tile_pairs, int32_t* __restrict__ tile_experts, int num_tiles,
                     const int32_t* __restrict__ topk_ids, int pairs, int num_experts) {
  extern __shared__ __align__(16) int group_smem[];
  group_pairs(group_smem, tile_pairs, tile_experts, num_tiles, topk_ids, pairs, num_experts);
}

// ----- moe_route_group: both in one block, for up to kGroupWarps tokens ---------------------------
//
// Warp t routes token t (route_token, as moe_route_kernel), writing its ids to shared memory too, and
// the block then groups them (group_pairs, as moe_group_kernel): the same results, in one launch and
// without the ids' round trip through global memory between two (decode steps of a few tokens, where
// each launch is a few microseconds of latency for microseconds of work).
constexpr int kRouteGroupMaxTokens = kGroupWarps;

template <typename T>
__global__ void __launch_bounds__(kGroupWarps * 32)
    moe_route_group_kernel(int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights,
                           int32_t* __restrict__ tile_pairs, int32_t* __restrict__ tile_experts, int num_tiles,
                           Rows logits, int num_experts, int top_k, MoeRouting routing, bool renormalize) {
  // [group_smem_ints(E)] ints | the ids [T * k, rounded up to 4] ints | [kGroupWarps][route_warp_floats] floats
  extern __shared__ __align__(16) int route_group_smem[];
  const int tokens = static_cast<int>(logits.num_rows), pairs = tokens * top_k;
  int* ids_s = route_group_smem + group_smem_ints(num_experts);
  float* route_s = reinterpret_cast<float*>(ids_s + (pairs + 3) / 4 * 4);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (warp < tokens)
    route_token(topk_ids + warp * top_k, topk_weights + warp * top_k, ids_s + warp * top_k,
                row_ptr<const T>(logits, warp), route_s + warp * route_warp_floats(num_experts, top_k), num_experts,
                top_k, routing, renormalize);
  __syncthreads();
  group_pairs(route_group_smem, tile_pairs, tile_experts, num_tiles, ids_s, pairs, num_experts);
}

// ----- moe_expert_gemm ----------------------------------------------------------------------------

// e2m1 code (sign bit 3) as f32: 0, 0.5, 1, 1.5, 2, 3, 4, 6 (core/dtype.h kE2m1Values).
__device__ __forceinline__ float e2m1_f32(uint32_t code) {
  const uint32_t magnitude = code & 7u;
  const uint32_t bits = magnitude == 0u   ? 0u
                        : magnitude == 1u ? 0x3F000000u
                                          : (((magnitude >> 1) + 126u) << 23) | ((magnitude & 1u) << 22);
  return __uint_as_float(bits | ((code & 8u) << 28));
}
// 2^(e - 127), as core/dtype.h e8m0_to_f32 (e = 0 is the subnormal 2^-127, 255 is inf).
__device__ __forceinline__ float e8m0_f32(uint32_t e) { return __uint_as_float(e == 0u ? 0x00400000u : e << 23); }

// Two codes (low nibble first) times `scale` as a bf16 pair: exact (at most 2 significant bits).
__device__ __forceinline__ uint32_t mxfp4_pair(uint32_t byte, float scale) {
  const __nv_bfloat162 pair =
      __floats2bfloat162_rn(__fmul_rn(e2m1_f32(byte & 15u), scale), __fmul_rn(e2m1_f32(byte >> 4 & 15u), scale));
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// 8 elements of one MXFP4 row (4 bytes of nibbles) under one scale, as the 16 bytes a dense lane loads.
__device__ __forceinline__ uint4 mxfp4_piece(uint32_t nibbles, uint32_t scale_bits) {
  const float scale = e8m0_f32(scale_bits);
  return make_uint4(mxfp4_pair(nibbles & 0xffu, scale), mxfp4_pair(nibbles >> 8 & 0xffu, scale),
                    mxfp4_pair(nibbles >> 16 & 0xffu, scale), mxfp4_pair(nibbles >> 24, scale));
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// The bf16 bits of e2m1 magnitude i (0..7) times 2^-125, all normal but 0: 0x0000 0x0080 0x0100
// 0x0140 0x0180 0x01C0 0x0200 0x0240, as byte tables for prmt (low bytes, high bytes; bytes 0..7).
constexpr uint32_t kE2m1LowBytes0 = 0x40008000u, kE2m1LowBytes1 = 0x4000C080u;
constexpr uint32_t kE2m1HighBytes0 = 0x01010000u, kE2m1HighBytes1 = 0x02020101u;

// The same 8 elements as mxfp4_piece, bit for bit, in ~19 integer ops instead of ~70: prmt looks each
// magnitude's two bytes up, the sign bits are replicated into place, and one bf16 multiply by
// 2^(e - 2) per pair scales the exact 2^-125 * value to value * 2^(e - 127). Exact (both factors are
// powers of two times <= 2 significant bits) while the result is a bf16 normal: the caller keeps
// 16 <= e <= 129 here (2^(e - 2) is a bf16 normal up to 129; real checkpoints' scales sit well below
// 2^2), and takes mxfp4_piece otherwise.
__device__ __forceinline__ uint4 mxfp4_piece_fast(uint32_t nibbles, uint32_t scale_bits) {
  const uint32_t magnitude = nibbles & 0x77777777u, magnitude_high = magnitude >> 16;
  const uint32_t shifted = nibbles << 4;  // the sign of an element in a low nibble at its byte's top bit
  // Bytes 0..3 from the sign bits of elements 0..3 (4..7), each replicated over its byte.
  const uint32_t signs0 = prmt(shifted, nibbles, 0xD9C8u), signs1 = prmt(shifted, nibbles, 0xFBEAu);
  const uint32_t low0 = prmt(kE2m1LowBytes0, kE2m1LowBytes1, magnitude);
  const uint32_t low1 = prmt(kE2m1LowBytes0, kE2m1LowBytes1, magnitude_high);
  const uint32_t high0 = prmt(kE2m1HighBytes0, kE2m1HighBytes1, magnitude) | (signs0 & 0x80808080u);
  const uint32_t high1 = prmt(kE2m1HighBytes0, kE2m1HighBytes1, magnitude_high) | (signs1 & 0x80808080u);
  const uint32_t multiplier = (scale_bits + 125u) * 0x00800080u;  // 2^(e - 2) in both halves (biased exponent)
  uint32_t pairs[4] = {prmt(low0, high0, 0x5140u), prmt(low0, high0, 0x7362u), prmt(low1, high1, 0x5140u),
                       prmt(low1, high1, 0x7362u)};
#pragma unroll
  for (int i = 0; i < 4; ++i)  // x * m + (-0): the product, signed zeros kept
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(pairs[i]) : "r"(pairs[i]), "r"(multiplier), "r"(0x80008000u));
  return make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
}
// The scales for which mxfp4_piece_fast is exact (moe.h).
__device__ __forceinline__ bool fast_scale(uint32_t e) { return e >= kMxfp4FastScaleMin && e <= kMxfp4FastScaleMax; }

// The arithmetic both tensor-core kernels share, so a pair's result is the same bits whichever runs
// and whatever else the batch holds: K is walked in super-steps of 128; in a warp, lane (g, t) holds
// the 32 k at k0 + 32 t (one MXFP4 scale group) of weight row g of the warp's 8 and of x row g of a
// tile, as four pieces of 8 elements; piece u feeds two m16n8k16 mma (its elements 0..3, then 4..7:
// the same permutation of k for A and B, see gemv.cu). Each output is one f32 chain over each segment
// of K, super-steps ascending, pieces in order; the tensor core computes each row from its own A row,
// so the other rows of a tile (or a second tile in rows 8..15) do not change it.
// K may be cut in two segments of at most MoeGemmArgs::k_segment_steps super-steps (a multiple of 4,
// so that no batch of the decode kernel's loads straddles both): each segment's chain starts from zero
// and the output is first + second; the decode kernel then gives each segment a warp of its own at
// small batches (twice the warps for the same weights: at batch 1 a launch had ~11 warps an SM, each a
// chain of 23 dependent super-steps), the tiled kernel keeps the first segment's sums in a per-thread
// scratch until the second's are done (fold_gemm_sums; prefill of gpt-oss-20b 8 layers, 16 x 256 and
// 4 x 2,048 tokens, 3-4% slower for it).
constexpr int kSuperK = 128;
constexpr int kSuperPieces = 16;  // 16-byte pieces of an x row per super-step

__device__ __forceinline__ int segment_steps(const MoeGemmArgs& a, int steps) {
  return a.k_segment_steps > 0 ? a.k_segment_steps : steps;
}

// One lane's weights of one super-step as loaded: 4 pieces of T, or 16 bytes of nibbles + a scale.
template <typename T, bool kMxfp4>
struct WeightStep {
  uint4 v[kMxfp4 ? 1 : 4];
  uint32_t scale;
};

// A sum as every expert-GEMM kernel turns it into an output: rounded to T, then (with a bias) the bias
// added and rounded again. One function, so the kernels' outputs stay the same bits.
template <typename T>
__device__ __forceinline__ float rounded_output(float sum, bool has_bias, float bias) {
  const float y = round_to<T>(sum);
  return has_bias ? round_to<T>(__fadd_rn(y, bias)) : y;
}

template <typename T>
__device__ __forceinline__ T apply_act(Activation act, float gate, float up) {
  switch (act) {
    case Activation::kGeluTanh: return act_times<T, Activation::kGeluTanh>(gate, up);
    case Activation::kClampedSwiglu: return act_times<T, Activation::kClampedSwiglu>(gate, up);
    default: return act_times<T, Activation::kSilu>(gate, up);
  }
}

// The FMA kernel's layout: the weight row of lane group g in column group `group` (8 columns n, or with
// the activation fused 4 gate rows then the matching 4 up rows), within one expert.
__device__ __forceinline__ int64_t group_weight_row(const MoeGemmArgs& a, int64_t group, int g, bool& ok) {
  if (!a.fuse_act) {
    const int64_t n = group * kTileRows + g;
    ok = n < a.n;
    return ok ? n : 0;
  }
  const int64_t half = a.n / 2, n = group * (kTileRows / 2) + (g & 3);
  ok = n < half;
  return ok ? (g < 4 ? n : half + n) : 0;
}

// x piece (super-step s, lane t, piece u) lives at s * 16 + u * 4 + t of its row in shared memory, so
// the 4 lanes of a row read 64 contiguous bytes; rows are (16 s + 4) pieces apart (64 mod 128 bytes),
// so a quarter warp's two rows fall on different banks.
__device__ __forceinline__ int staged_piece(int piece_in_row) {
  const int q = piece_in_row % kSuperPieces;
  return piece_in_row - q + (q % 4) * 4 + q / 4;
}

// The FMA kernel's store: row g's two sums (columns 2t, 2t + 1 of the 8) of column group `group`:
// round, bias (rounded), then the store or act(gate) * up (gate columns 0..3 are in lanes t < 2, their
// up columns two lanes on). Every lane of the warp calls it (the shuffle).
template <typename T>
__device__ __forceinline__ void store_pair_row(const MoeGemmArgs& a, int expert, int64_t group, int pair, int t,
                                               float c0, float c1) {
  const float up0 = __shfl_down_sync(kFullMask, c0, 2), up1 = __shfl_down_sync(kFullMask, c1, 2);
  if (pair < 0) return;
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out) + pair * a.ld_out;
  const float sums[2] = {c0, c1}, ups[2] = {up0, up1};
  if (!a.fuse_act) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t n = group * kTileRows + 2 * t + j;
      if (n >= a.n) continue;
      const float b = bias != nullptr ? to_f32(bias[expert * a.n + n]) : 0.0f;
      out[n] = from_f32<T>(rounded_output<T>(sums[j], bias != nullptr, b));
    }
    return;
  }
  if (t >= 2) return;
  const int64_t half = a.n / 2;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int64_t n = group * (kTileRows / 2) + 2 * t + j;
    if (n >= half) continue;
    const float b_gate = bias != nullptr ? to_f32(bias[expert * a.n + n]) : 0.0f;
    const float b_up = bias != nullptr ? to_f32(bias[expert * a.n + half + n]) : 0.0f;
    out[n] = apply_act<T>(a.act, rounded_output<T>(sums[j], bias != nullptr, b_gate),
                          rounded_output<T>(ups[j], bias != nullptr, b_up));
  }
}

// Decode-sized batches: grid (tiles, row groups / the block's warps); a warp owns one tile (or, in the
// two-tile form below, two consecutive tiles of one expert) and 16 weight rows over all of K. The
// weights are the mma's A operand (rows g and g + 8 of lane (g, t): all 16 rows do work) and the
// tile's x rows its B operand (x row g in lane (g, t)), so each 16-byte piece of x feeds two weight
// rows and no operand holds zero padding (with x as A, half of A was zero rows: twice the mma per
// weight byte, and ~6 register moves per mma to place the zeros; ncu counted 211 instructions per
// 512 bytes of MXFP4 weights, 17% of them moves, and the kernel ran at 0.9 TB/s). Each product is the
// tiled kernel's, element for element: the same k of every piece meet in the same mma in the same
// order, only the roles of A and B are swapped.
// The block stages its tile's x rows (all of K) in shared memory once, after issuing its first
// weight loads: only the first staged_rows rows (a tile holds at most as many pairs as the step
// has), so that a batch of one stages one row and the blocks fit the SM by registers, not by x.
// Each warp then streams its weights in batches of kGemvBatch super-steps, one batch in flight
// while the other is multiplied, through per-lane pointers advanced by a super-step's bytes (the
// 64-bit row and scale-block arithmetic of every load was ~25 instructions a step).
constexpr int kGemvWarps = 4;
constexpr int kGemvRows = 16;  // weight rows per warp
// K in two segments from this many super-steps on (moe_k_segment_steps' rule); at most kMaxKSegments;
// a warp a segment where that makes at most kSplitWarpsPerSm warps an SM.
constexpr int64_t kSplitKMinSteps = 16;
constexpr int kMaxKSegments = 2;
constexpr int kSplitWarpsPerSm = 32;
template <bool kMxfp4>
constexpr int kGemvBatch = kMxfp4 ? 2 : 1;  // super-steps a batch: 64 / 128 bytes a lane

// The decode kernel's weight rows of lane group g in row group `group`: 16 rows n (lo = group * 16 + g,
// hi = lo + 8), or with the activation fused gate row n = group * 8 + g (lo) and its up row (hi);
// ok: the row exists (the last group of an N that is not a multiple of 16).
struct GemvRows {
  int64_t lo, hi;
  bool ok_lo, ok_hi;
};
__device__ __forceinline__ GemvRows gemv_weight_rows(const MoeGemmArgs& a, int64_t group, int g) {
  if (!a.fuse_act) {
    const int64_t lo = group * kGemvRows + g;
    return {lo, lo + 8, lo < a.n, lo + 8 < a.n};
  }
  const int64_t half = a.n / 2, n = group * (kGemvRows / 2) + g;
  return {n, half + n, n < half, n < half};
}

// Lane (g, t)'s two weight rows of one super-step (row g: lo, row g + 8: hi).
template <typename T, bool kMxfp4>
struct RowPairStep {
  WeightStep<T, kMxfp4> lo, hi;
};

// The lane's weight rows g and g + 8 of its warp's group, as byte pointers at the lane's first k.
template <typename T, bool kMxfp4>
struct RowPairStream {
  static constexpr int kStepBytes = kMxfp4 ? kSuperK / 2 : kSuperK * static_cast<int>(sizeof(T));
  const uint8_t* lo;
  const uint8_t* hi;
  const uint8_t* scale_lo;  // MXFP4: the lane's e8m0 scale of the super-step (one group of 32 k)
  const uint8_t* scale_hi;
  bool ok_lo, ok_hi;  // the row exists (the last group of an N that is not a multiple of 16)
  int lane_k, k;

  __device__ __forceinline__ RowPairStream(const MoeGemmArgs& a, int expert, const GemvRows& rows, int t)
      : ok_lo(rows.ok_lo), ok_hi(rows.ok_hi), lane_k(32 * t), k(static_cast<int>(a.k)) {
    // Rows out of range read row 0 of the expert, never loaded (ok is false).
    const int64_t row_lo = static_cast<int64_t>(expert) * a.n + (ok_lo ? rows.lo : 0);
    const int64_t row_hi = static_cast<int64_t>(expert) * a.n + (ok_hi ? rows.hi : 0);
    const int64_t row_bytes = kMxfp4 ? a.k / 2 : a.k * static_cast<int64_t>(sizeof(T));
    const uint8_t* base = static_cast<const uint8_t*>(a.weight) + (kMxfp4 ? 16 * t : 64 * t);
    lo = base + row_lo * row_bytes;
    hi = base + row_hi * row_bytes;
    scale_lo = scale_hi = nullptr;
    if constexpr (kMxfp4) {
      scale_lo = a.scales + row_lo * (a.k / 32) + t;
      scale_hi = a.scales + row_hi * (a.k / 32) + t;
    }
  }

  __device__ __forceinline__ static void load_row(WeightStep<T, kMxfp4>& w, const uint8_t* p, const uint8_t* scale,
                                                  bool in, int step) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    w.scale = 127;
    if constexpr (kMxfp4) {
      w.v[0] = in ? load_streaming(p + step * kStepBytes) : zero;
      if (in) w.scale = __ldg(scale + step * (kSuperK / 32));
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u) w.v[u] = in ? load_streaming(p + step * kStepBytes + 16 * u) : zero;
    }
  }

  // Super-step `step` (rows out of range, or k past K, load zeros).
  __device__ __forceinline__ void load(RowPairStep<T, kMxfp4>& w, int step) const {
    const bool in_k = step * kSuperK + lane_k < k;
    load_row(w.lo, lo, scale_lo, ok_lo && in_k, step);
    load_row(w.hi, hi, scale_hi, ok_hi && in_k, step);
  }
  // A super-step wholly inside K, unpredicated: a row out of range reads row 0 of the expert (valid
  // memory; its sums are never stored), so no per-load test is issued.
  __device__ __forceinline__ void load_inside(RowPairStep<T, kMxfp4>& w, int step) const {
    load_row(w.lo, lo, scale_lo, true, step);
    load_row(w.hi, hi, scale_hi, true, step);
  }
};

// The batch's super-steps; those of a batch wholly inside K (a warp-uniform test) unpredicated.
// From end_step on zeros, not loads (the warp's range ends there: a later segment is another warp's);
// assigned all the same, so the registers' old values are not kept live across the call.
template <typename T, bool kMxfp4, int kBatch>
__device__ __forceinline__ void load_row_pair_batch(RowPairStep<T, kMxfp4> (&w)[kBatch],
                                                    const RowPairStream<T, kMxfp4>& stream, int first_step,
                                                    int end_step) {
  if (first_step >= end_step) {  // warp-uniform
    w[0] = {};
#pragma unroll
    for (int b = 1; b < kBatch; ++b) w[b] = w[0];
    return;
  }
  if ((first_step + kBatch) * kSuperK <= stream.k) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) stream.load_inside(w[b], first_step + b);
  } else {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) stream.load(w[b], first_step + b);
  }
}

// c[j] += the batch's super-steps (those below `steps`) for the warp's first `tiles` tiles: weight rows
// g, g + 8 times x_rows[j]'s pieces (nullptr: a row without a pair, whose B column is zero). Each piece
// of weights is converted once and feeds every tile's two mma.
template <typename T, bool kMxfp4, bool kFastScales, int kBatch, int kTiles>
__device__ __forceinline__ void multiply_row_pair_batch(float (&c)[kTiles][4],
                                                        const RowPairStep<T, kMxfp4> (&w)[kBatch],
                                                        const uint4* const (&x_rows)[kTiles], int tiles,
                                                        int first_step, int steps, int t) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const int s = first_step + b;
    if (s >= steps) break;  // warp-uniform
    // Piece by piece (two pieces of weights live at a time, not eight); MXFP4 takes the fast
    // conversion when every lane's scales allow it (always, for real checkpoints), a warp-uniform test,
    // or (kFastScales: every scale of the weights does) only it.
    auto multiply = [&](auto piece) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const uint4 lo = piece(w[b].lo, u), hi = piece(w[b].hi, u);
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          if (j >= tiles) break;  // warp-uniform
          const uint4 xv = x_rows[j] != nullptr ? x_rows[j][s * kSuperPieces + u * 4 + t] : zero;
          mma_16816_rows16<T>(c[j], lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
          mma_16816_rows16<T>(c[j], lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
        }
      }
    };
    if constexpr (kMxfp4) {
      auto fast_piece = [](const WeightStep<T, kMxfp4>& r, int u) {
        const uint32_t words[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
        return mxfp4_piece_fast(words[u], r.scale);
      };
      if constexpr (kFastScales) {
        multiply(fast_piece);
      } else if (__all_sync(kFullMask, fast_scale(w[b].lo.scale) && fast_scale(w[b].hi.scale))) {
        multiply(fast_piece);
      } else {
        multiply([](const WeightStep<T, kMxfp4>& r, int u) {
          const uint32_t words[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
          return mxfp4_piece(words[u], r.scale);
        });
      }
    } else {
      multiply([](const WeightStep<T, kMxfp4>& r, int u) { return r.v[u]; });
    }
  }
}

// The bias of rows lo and hi of expert `expert` (0 where the row or the bias is absent), loaded once
// for all the tiles a warp stores.
struct RowBias {
  float lo = 0.0f, hi = 0.0f;
};
template <typename T>
__device__ __forceinline__ RowBias row_bias(const MoeGemmArgs& a, int expert, const GemvRows& rows) {
  RowBias b;
  const T* bias = static_cast<const T*>(a.bias);
  if (bias == nullptr) return b;
  if (rows.ok_lo) b.lo = to_f32(__ldg(bias + expert * a.n + rows.lo));
  if (rows.ok_hi) b.hi = to_f32(__ldg(bias + expert * a.n + rows.hi));
  return b;
}

// Lane (g, t)'s sums: c0, c1 = row lo for pairs[0], pairs[1] (the tile's pairs 2t, 2t + 1; -1 = none);
// c2, c3 = row hi for the same pairs. Each is rounded, the bias added (rounded), then stored, or
// act(gate) * up with the gate in lo and the up in hi.
template <typename T>
__device__ __forceinline__ void store_row_pair(const MoeGemmArgs& a, const GemvRows& rows, const RowBias& bias,
                                               const int (&pairs)[2], const float (&c)[4]) {
  const bool has_bias = a.bias != nullptr;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int pair = pairs[j];
    if (pair < 0) continue;
    T* out = static_cast<T*>(a.out) + pair * a.ld_out;
    const float y_lo = rounded_output<T>(c[j], has_bias, bias.lo);
    const float y_hi = rounded_output<T>(c[j + 2], has_bias, bias.hi);
    if (a.fuse_act) {
      if (rows.ok_lo) out[rows.lo] = apply_act<T>(a.act, y_lo, y_hi);
      continue;
    }
    if (rows.ok_lo) out[rows.lo] = from_f32<T>(y_lo);
    if (rows.ok_hi) out[rows.hi] = from_f32<T>(y_hi);
  }
}

// The first tile of `expert`'s run of consecutive tiles that holds `tile` (moe_group puts an expert's
// tiles side by side). Each warp of the block finds it on its own: lane l reads tile - 1 - l, 32 tiles
// a round.
__device__ __forceinline__ int expert_run_start(const int32_t* __restrict__ tile_experts, int tile, int expert) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int end = tile;; end -= 32) {
    const int i = end - 1 - lane;
    const unsigned other = __ballot_sync(kFullMask, i < 0 || __ldg(tile_experts + i) != expert);
    if (other != 0u) return end - (__ffs(static_cast<int>(other)) - 1);
  }
}

// kTiles > 1: the block whose tile is at a multiple of kTiles in its expert's run multiplies up to
// kTiles tiles of that run, converting each piece of weights once for all of them and reading the
// expert's rows once (the blocks of the run's other tiles return at once). Its warps then number
// kGemvWarps x kTiles, so that a block's x rows per warp stay the 1-tile kernel's.
template <int kTiles>
constexpr int kGemvBlockWarps = kGemvWarps * kTiles;

// K in segments, split_warps > 1 (launches of few warps: batch 1): a row group's segments go to that
// many consecutive warps of the block, whose sums the group's first warp adds in segment order
// through shared memory (twice the warps for the same weights; gpt-oss-20b at batch 1, H200: gate_up
// 23.9 -> 22.6 us, down 16.0 -> 14.9 us). split_warps = 1: each warp walks its segments one after
// another, adding their sums as it goes. The same bits either way.
template <typename T, bool kMxfp4, int kTiles, bool kFastScales>
__device__ __forceinline__ void moe_gemv(const MoeGemmArgs& a, int row_pieces, int staged_rows, int split_warps) {
  extern __shared__ uint4 x_rows[];  // [staged_rows][row_pieces], then the segments' sums
  const int tile = static_cast<int>(blockIdx.x);
  const int expert = a.tile_experts[tile];
  if (expert < 0) return;  // block-uniform: used tiles come first
  int tiles = 1;
  if constexpr (kTiles > 1) {
    if ((tile - expert_run_start(a.tile_experts, tile, expert)) % kTiles != 0) return;  // block-uniform
    while (tiles < kTiles && tile + tiles < a.num_tiles && a.tile_experts[tile + tiles] == expert) ++tiles;
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int steps = static_cast<int>((a.k + kSuperK - 1) / kSuperK), segment = segment_steps(a, steps);
  const int part = warp % split_warps;
  const int64_t group = static_cast<int64_t>(blockIdx.y) * kGemvBlockWarps<kTiles> + warp / split_warps;
  const GemvRows rows = gemv_weight_rows(a, group, g);
  const RowPairStream<T, kMxfp4> stream(a, expert, rows, t);
  const int begin = split_warps > 1 ? part * segment : 0;  // the warp's super-steps [begin, end)
  const int end = split_warps > 1 ? min(steps, begin + segment) : steps;
  constexpr int kBatch = kGemvBatch<kMxfp4>;
  // Two batches of weights in registers: the next one is in flight while this one is multiplied
  // (at batch 1 a launch has ~6-12 warps an SM, too few to cover the memory latency by turns).
  RowPairStep<T, kMxfp4> w0[kBatch], w1[kBatch];
  load_row_pair_batch(w0, stream, begin, end);

  // A tile's pairs fill its rows from the first (moe_group), and there are at most as many as the
  // step's pairs: rows from staged_rows on are empty. 32-bit index math (a 64-bit division per piece
  // cost more than the weights' stream at batch 1). The block's tiles are consecutive, so their rows
  // are too.
  // The two-tile blocks copy with cp.async, all of a thread's ~45 pieces in flight at once (loads into
  // registers then stores waited on each load in turn: 16% of the stall samples at batch 64; gpt-oss-20b
  // batch 64 3.57 -> 3.48 ms a step, 8 layers, H200). At a few pieces a thread (one row at batch 1) the
  // register path was faster (1.12 vs 1.15 ms).
  const int32_t* tile_pairs = a.tile_pairs + static_cast<int64_t>(tile) * kTileRows;
  const int pieces = steps * kSuperPieces, k_pieces = static_cast<int>(a.k / 8);
  for (int r = 0; r < tiles * kTileRows; ++r) {
    const int pair = tile_pairs[r];
    if (pair < 0) continue;  // block-uniform
    if (r >= staged_rows) __trap();  // more pairs in a tile than in the step: a broken moe_group invariant
    const uint4* x = reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + pair / a.pairs_per_x_row * a.ld_x);
    for (int q = static_cast<int>(threadIdx.x); q < pieces; q += static_cast<int>(blockDim.x)) {
      uint4* staged = x_rows + r * row_pieces + staged_piece(q);
      if constexpr (kTiles > 1)
        cp_async<16>(staged, q < k_pieces ? x + q : x, q < k_pieces);
      else
        *staged = q < k_pieces ? __ldg(x + q) : make_uint4(0, 0, 0, 0);
    }
  }
  if constexpr (kTiles > 1) {
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();

  const uint4* tile_x[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int r = j * kTileRows + g;
    tile_x[j] = j < tiles && tile_pairs[r] >= 0 ? x_rows + r * row_pieces : nullptr;
  }
  // No shared memory beyond the x rows (with a slot of sums a warp after them, the launches at batch 16
  // and 64 needed the next shared-memory carveout, whose smaller L1 made them 20-40% slower): a walking
  // warp keeps the running sum of its segments in registers, and the split warps hand theirs over
  // through the x rows once every warp is done with them.
  float c[kTiles][4] = {}, sum[kTiles][4];
  for (int first = begin; first < end; first += segment) {
    // A segment is a whole number of iterations (moe_k_segment_steps): the loads run on into the next.
    const int last = min(end, first + segment);
    for (int s0 = first; s0 < last; s0 += 2 * kBatch) {
      load_row_pair_batch(w1, stream, s0 + kBatch, end);
      multiply_row_pair_batch<T, kMxfp4, kFastScales>(c, w0, tile_x, tiles, s0, last, t);
      load_row_pair_batch(w0, stream, s0 + 2 * kBatch, end);
      multiply_row_pair_batch<T, kMxfp4, kFastScales>(c, w1, tile_x, tiles, s0 + kBatch, last, t);
    }
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sum[j][i] = first == begin ? c[j][i] : __fadd_rn(sum[j][i], c[j][i]);
        c[j][i] = 0.0f;
      }
  }
  if (split_warps > 1) {  // block-uniform: the row group's first warp adds the later segments in order
    float* slots = reinterpret_cast<float*>(x_rows) + lane;  // [warp][kTiles * 4][32 lanes]
    __syncthreads();                                          // every warp is done with the x rows
    if (part > 0)
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) slots[(warp * kTiles * 4 + j * 4 + i) * 32] = sum[j][i];
    __syncthreads();
    if (part > 0) return;
    for (int p = 1; p < split_warps; ++p)
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          sum[j][i] = __fadd_rn(sum[j][i], slots[((warp + p) * kTiles * 4 + j * 4 + i) * 32]);
  }
  const RowBias bias = row_bias<T>(a, expert, rows);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    if (j >= tiles) break;
    const int pairs[2] = {tile_pairs[j * kTileRows + 2 * t], tile_pairs[j * kTileRows + 2 * t + 1]};
    store_row_pair<T>(a, rows, bias, pairs, sum[j]);
  }
}

// At most kMaxKSegments segments, so a block has at most 2 x kGemvBlockWarps warps.
template <typename T, bool kMxfp4, bool kFastScales = false>
__global__ void __launch_bounds__(kGemvBlockWarps<1> * kMaxKSegments * 32)
    moe_gemv_kernel(MoeGemmArgs a, int row_pieces, int staged_rows, int split_warps) {
  moe_gemv<T, kMxfp4, 1, kFastScales>(a, row_pieces, staged_rows, split_warps);
}
template <typename T, bool kMxfp4, bool kFastScales = false>
__global__ void __launch_bounds__(kGemvBlockWarps<2> * kMaxKSegments * 32)
    moe_gemv2_kernel(MoeGemmArgs a, int row_pieces, int staged_rows, int split_warps) {
  moe_gemv<T, kMxfp4, 2, kFastScales>(a, row_pieces, staged_rows, split_warps);
}

// Larger batches: a persistent grid, one block an SM, walks work items (chunk, row block). A chunk is
// up to kGemmTiles tiles of one expert (each expert's tiles cut into chunks from its first tile, so a
// block never holds two experts' weights); a row block is kGemmGroups of the decode kernel's 16-row
// groups (gemv_weight_rows: the same rows, so with the activation fused each group holds 8 gate rows
// and their 8 up rows). For each super-step the block stages the row block's weights and the chunk's
// x rows in shared memory with cp.async, kGemmStages deep, and its warps (GemmWarpLayout) each multiply
// 16-row weight groups (each two 8-row halves: the mma's B) by 16-pair groups (the mma's A): 128 sums a
// lane. Dense weights: a warp 4 row groups x 4 pair groups, so each 16-byte piece of weights read from
// shared memory feeds 8 mma and each quad of x 8. MXFP4: 2 row groups x all 8 pair groups, so each word
// of nibbles converted feeds 16 mma (the conversion's ~24 instructions a word were 3 an mma at 8) and no
// two warps convert the same word.
// Each product is the decode kernel's: the same pieces meet in the same mma, in the same order, with
// the roles of A and B swapped (as between the two kernels before: the tensor core's sum of a row and
// column does not depend on which operand holds which).
constexpr int kGemmWarps = 8;
constexpr int kGemmGroups = 16;                         // a row block: 16 groups of 16 weight rows
constexpr int kGemmTiles = 16;                          // a chunk: 16 tiles of 8 pairs
constexpr int kGemmMGroups = kGemmTiles * kTileRows / 16;  // the chunk's 16-pair groups (the mma's M)
constexpr int kGemmWeightRows = kGemmGroups * 16;
constexpr int kGemmXRows = kGemmTiles * kTileRows;
template <bool kMxfp4>
struct GemmWarpLayout {
  static constexpr int kWarpsN = kMxfp4 ? 8 : 4;                 // warps over the row groups
  static constexpr int kWarpsM = kGemmWarps / kWarpsN;           // warps over the pair groups
  static constexpr int kGroups = kGemmGroups / kWarpsN;          // row groups a warp: 2 / 4
  static constexpr int kMGroups = kGemmMGroups / kWarpsM;        // pair groups a warp: 8 / 4
  static constexpr int kRows = kGroups * 16;                     // weight rows a warp
  // A warp's sums: weight rows (row group j, half h: the group's rows 0..7 or 8..15, the mma's N) times
  // its 16-pair groups m (the mma's M): c[j][h][m] = {(pair g, row 2t), (pair g, row 2t + 1),
  // (pair g + 8, row 2t), (pair g + 8, row 2t + 1)} of lane (g, t).
  using Sums = float[kGroups][2][kMGroups][4];
};
static_assert(kGemmMGroups == kGemmWarps, "a warp stages one 16-pair group of x");
// Shared memory the launcher leaves to the kernel's static arrays (the item's rows, row addresses and
// pairs, the schedule's scan: 4,640 bytes).
constexpr int64_t kGemmStaticSmemRoom = 8192;

// One stage (one super-step) in shared memory, in 16-byte pieces: the weight rows (dense: 16 pieces a
// row; MXFP4: 4 pieces of nibbles a row, then a word of the row's 4 scales), then the x rows as the
// mma's quads (x_quad_unit: 16 pieces a row too).
template <bool kMxfp4>
struct GemmStage {
  static constexpr int kWeightPieces = kGemmWeightRows * (kMxfp4 ? 4 : kSuperPieces);
  static constexpr int kScaleWords = kMxfp4 ? kGemmWeightRows : 0;
  static constexpr int kXPieces = kGemmXRows * kSuperPieces;
  static constexpr int kXOffset = kWeightPieces + kScaleWords / 4;  // where the x quads start
  static constexpr int kPieces = kXOffset + kXPieces;
};
template <bool kMxfp4>
constexpr int kGemmStages = kMxfp4 ? 3 : 2;  // 147 / 192 KiB

// Where piece q (k 8q..8q+7 of the super-step) of a 16-piece row r sits: lane t's pieces u = 0..3
// (k 32t + 8u) at u * 4 + t, so the 4 lanes of a row read 64 contiguous bytes; odd rows swap their
// halves, so the two rows a quarter warp reads fall on different banks.
__device__ __forceinline__ int gemm_piece(int q, int r) { return ((q % 4) * 4 + q / 4) ^ ((r & 1) << 2); }

// x as the mma's A operand, staged so that one 16-byte read is one mma's quad a0..a3: the chunk's
// 16-pair group M (pairs 16 M + g and 16 M + g + 8 in lane group g) has kXQuadUnitsPerRow 16-byte units
// a row g, unit (P, h) = {x(g, w), x(g + 8, w), x(g, w + 1), x(g + 8, w + 1)} for the words w = 4 P + 2 h
// of piece P (k 8 P .. 8 P + 7 of the super-step): h = 0 holds the piece's elements 0..3, the first
// mma of the piece, h = 1 elements 4..7. Unit (P, h) sits at 2 P + h with its low three bits
// swapped by 2 (P / 4) and g % 2, so a quarter warp's 16-byte reads (rows g, g + 1, lanes t = P / 4)
// fall on 8 different bank groups, and a copy's 32 words (rows g, g + 8, 16 words of each) on 32 banks.
constexpr int kXQuadUnitsPerRow = 2 * kSuperPieces;
constexpr int kXQuadUnitsPerGroup = kTileRows * kXQuadUnitsPerRow;
__device__ __forceinline__ int x_quad_unit(int g, int piece, int h) {
  return g * kXQuadUnitsPerRow + ((2 * piece + h) ^ (2 * (piece / 4)) ^ (g & 1));
}

// Where lane t's 16 bytes of MXFP4 nibbles (k 32t..32t+31 of the super-step) sit in their 64-byte row
// r: swapped by r / 2, so that the 32-bit word u of each lane's piece, as a warp reads it (rows g
// and g + 8 of lane (g, t)), falls on 32 different banks.
__device__ __forceinline__ int nibble_piece(int t, int r) { return t ^ ((r >> 1) & 3); }

// Each expert's tiles [first, end) and its chunks' first index, from tile_experts (used tiles first,
// ascending experts): shared memory of 3 (E + 1) ints.
struct GemmSchedule {
  int* first;        // [E]
  int* end;          // [E]
  int* chunk_start;  // [E + 1]: exclusive scan of ceil(tiles / kGemmTiles)
};

__device__ int build_gemm_schedule(const MoeGemmArgs& a, const GemmSchedule& s) {
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int num_experts = a.num_experts, num_tiles = static_cast<int>(a.num_tiles);
  for (int e = tid; e < num_experts; e += threads) s.first[e] = s.end[e] = 0;
  __syncthreads();
  for (int i = tid; i < num_tiles; i += threads) {
    const int e = a.tile_experts[i];
    if (e < 0) continue;
    if (e >= num_experts) __trap();  // tiles from moe_group over other weights: a broken invariant
    if (i == 0 || a.tile_experts[i - 1] != e) s.first[e] = i;
    if (i + 1 == num_tiles || a.tile_experts[i + 1] != e) s.end[e] = i + 1;
  }
  __syncthreads();
  // Thread i sums the chunks of experts [i * per, (i + 1) * per), then one block scan.
  const int per = (num_experts + threads - 1) / threads, lo = min(num_experts, tid * per),
            hi = min(num_experts, lo + per);
  int mine = 0;
  for (int e = lo; e < hi; ++e) mine += (s.end[e] - s.first[e] + kGemmTiles - 1) / kGemmTiles;
  __shared__ int warp_totals[kGemmWarps];
  int total = 0;
  int before = block_inclusive_scan<kGemmWarps>(mine, warp_totals, total) - mine;
  for (int e = lo; e < hi; ++e) {
    s.chunk_start[e] = before;
    before += (s.end[e] - s.first[e] + kGemmTiles - 1) / kGemmTiles;
  }
  if (tid == 0) s.chunk_start[num_experts] = total;
  __syncthreads();
  return total;
}

// The expert e of chunk c: chunk_start[e] <= c < chunk_start[e + 1] (experts without a chunk have an
// empty range).
__device__ __forceinline__ int chunk_expert(const GemmSchedule& s, int num_experts, int c) {
  int lo = 0, hi = num_experts;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (s.chunk_start[mid] <= c) lo = mid; else hi = mid;
  }
  return lo;
}

// The copies of one super-step of the item into its stage, issued in kGemmCopyParts parts between the
// parts of the previous super-step's multiplication (all at once, the warps stalled on the load/store
// queue while the tensor cores idled: ncu put 40% of the stall samples there). The item's row
// addresses come from tables the prologue fills (row_source), so a copy is a shared load, an add
// and the cp.async. Weights: thread tid copies piece tid % 16 of rows tid / 16 + 16 i (dense), or
// nibble piece tid % 4 of rows tid / 4 + 64 i (MXFP4). x: warp w copies 16-pair group w word by word
// into its quads (x_quad_unit), a copy being rows g and g + 8 of the group, 16 words (64 bytes) of
// each: two 64-byte runs read, one 128-byte run written. k past K, and rows without weights or pairs,
// read zeros. Each part reads its table entries before its copies (a cp.async is a compiler barrier
// for shared loads: interleaved, they waited one by one). MXFP4 scales are not cp.async-able (a row's
// 4 bytes need not be 4-byte aligned): part 0 loads this thread's row's 4 scales, which the caller
// stores once the stage's multiplication is done (store_scales; assembled there, so the loads' latency
// is the multiplication's, not a stall inside it).
constexpr int kGemmCopyParts = 4;

// A row's address at k = 0 with bit 0 set when the row exists (row addresses are 16-byte aligned);
// rows that do not exist hold the tensor's base address (read with a source size of 0).
__device__ __forceinline__ uint64_t row_source(const void* row, bool exists) {
  return reinterpret_cast<uint64_t>(row) | (exists ? 1u : 0u);
}
__device__ __forceinline__ const uint8_t* source_address(uint64_t source, int offset_bytes) {
  return reinterpret_cast<const uint8_t*>(source & ~uint64_t{1}) + offset_bytes;
}

template <typename T, bool kMxfp4>
struct GemmStageCopier {
  static constexpr int kThreads = kGemmWarps * 32;
  static constexpr int kWeightPasses = kGemmWeightRows * (kMxfp4 ? 4 : kSuperPieces) / kThreads;  // 4 / 16
  static constexpr int kWeightPassesPerPart = kWeightPasses / kGemmCopyParts;
  static constexpr int kXRowsPerPart = kTileRows / kGemmCopyParts;
  static constexpr int kWeightStepBytes = kMxfp4 ? kSuperK / 2 : kSuperK * static_cast<int>(sizeof(T));
  static_assert(kWeightPasses % kGemmCopyParts == 0 && kTileRows % kGemmCopyParts == 0, "whole parts");

  const MoeGemmArgs& a;
  uint4* stage;
  const uint64_t* w_source;  // [kGemmWeightRows] row_source of the block's weight rows
  const uint64_t* x_source;  // [kGemmXRows] row_source of the chunk's x rows
  const int* w_rows;         // [kGemmWeightRows] MXFP4 scales: the row in the stacked [E * n] rows, -1 = none
  int x_rows, step;
  bool active;  // the step exists (block-uniform)
  uint32_t scale_bytes[4] = {127u, 127u, 127u, 127u};  // MXFP4: e8m0 1.0 where the row or group is absent

  __device__ __forceinline__ void part(int p) {
    if (!active) return;
    const int tid = static_cast<int>(threadIdx.x), k = static_cast<int>(a.k);
    constexpr int kPieces = kMxfp4 ? 4 : kSuperPieces, kRowsPerPass = kThreads / kPieces;
    const int q = tid % kPieces;
    const bool w_in_k = step * kSuperK + (kMxfp4 ? 32 : 8) * q < k;
    uint64_t w_src[kWeightPassesPerPart];
#pragma unroll
    for (int i = 0; i < kWeightPassesPerPart; ++i)
      w_src[i] = w_source[tid / kPieces + kRowsPerPass * (p * kWeightPassesPerPart + i)];
    if (kMxfp4 && p == 0) {
      const int row = w_rows[tid % kGemmWeightRows], groups = k / 32;
      if (row >= 0) {
        const uint8_t* s = a.scales + static_cast<int64_t>(row) * groups + step * 4;
#pragma unroll
        for (int t = 0; t < 4; ++t)
          if (step * 4 + t < groups) scale_bytes[t] = __ldg(s + t);
      }
    }
    const int w_offset = step * kWeightStepBytes + 16 * q;
#pragma unroll
    for (int i = 0; i < kWeightPassesPerPart; ++i) {
      const int r = tid / kPieces + kRowsPerPass * (p * kWeightPassesPerPart + i);
      uint4* dst = kMxfp4 ? stage + r * 4 + nibble_piece(q, r) : stage + r * kSuperPieces + gemm_piece(q, r);
      cp_async<16>(dst, source_address(w_src[i], w_offset), (w_src[i] & 1) != 0 && w_in_k);
    }
    // x: rows g = p * kXRowsPerPart .. of the warp's group.
    const int m_group = tid / 32, lane = tid % 32;
    if (16 * m_group >= x_rows) return;  // the group holds no pair of the chunk (warp-uniform)
    uint32_t* x_words =
        reinterpret_cast<uint32_t*>(stage + GemmStage<kMxfp4>::kXOffset) + m_group * (kXQuadUnitsPerGroup * 4);
    const int half = lane / 16, w = lane % 16;  // row g + 8 half; word w of each run of 16
    const int place = (w % 2) * 2 + half;       // the word's register in its quad
    uint64_t x_src[kXRowsPerPart];
#pragma unroll
    for (int i = 0; i < kXRowsPerPart; ++i) x_src[i] = x_source[16 * m_group + 8 * half + p * kXRowsPerPart + i];
    const int x_offset = step * kSuperK * static_cast<int>(sizeof(T)) + 4 * w;
#pragma unroll
    for (int i = 0; i < kXRowsPerPart; ++i) {
      const int g = p * kXRowsPerPart + i;
#pragma unroll
      for (int run = 0; run < 4; ++run) {  // 32 k each; K % 32 == 0, so a run is all in K or all past it
        const bool valid = (x_src[i] & 1) != 0 && step * kSuperK + 32 * run < k;
        cp_async<4>(x_words + x_quad_unit(g, 4 * run + w / 4, (w % 4) / 2) * 4 + place,
                    source_address(x_src[i], x_offset + 64 * run), valid);
      }
    }
  }

  __device__ __forceinline__ void all_parts() {
#pragma unroll
    for (int p = 0; p < kGemmCopyParts; ++p) part(p);
  }

  // After the stage's last reader is done (the step before), before the barrier that publishes it.
  __device__ __forceinline__ void store_scales() const {
    if constexpr (kMxfp4) {
      if (active && threadIdx.x < kGemmWeightRows)
        reinterpret_cast<uint32_t*>(stage + GemmStage<kMxfp4>::kWeightPieces)[threadIdx.x] =
            scale_bytes[0] | scale_bytes[1] << 8 | scale_bytes[2] << 16 | scale_bytes[3] << 24;
    }
  }
};

// The warp's first kM 16-pair groups (all, or half: a branch inside the unrolled loop made the compiler
// move every accumulator through the same registers around each mma); groups past the chunk's multiply
// whatever their rows hold, into sums that are never stored. x is A (its quads read whole from shared
// memory, x_quad_unit) and the weights B (a 16-byte piece of a row is the B registers of two mma), so no
// operand is assembled in registers: with the weights as A, each mma's quad took ~4 register moves.
// Part u of the next stage's copies is issued after piece u's weights are read.
template <typename T, bool kMxfp4, bool kFastScales, int kM>
__device__ __forceinline__ void multiply_gemm_stage(typename GemmWarpLayout<kMxfp4>::Sums& c, const uint4* stage,
                                                    int warp_n, int warp_m, int g, int t,
                                                    GemmStageCopier<T, kMxfp4>& copier) {
  using L = GemmWarpLayout<kMxfp4>;
  const uint4* x_stage = stage + GemmStage<kMxfp4>::kXOffset + warp_m * L::kMGroups * kXQuadUnitsPerGroup;
  const int swap = (g & 1) << 2;
  uint32_t scale[L::kGroups][2];  // MXFP4: the lane's scale of rows g, g + 8 of each group
  bool fast = true;
  if constexpr (kMxfp4) {
    const uint32_t* scales = reinterpret_cast<const uint32_t*>(stage + GemmStage<kMxfp4>::kWeightPieces);
#pragma unroll
    for (int j = 0; j < L::kGroups; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        scale[j][h] = scales[warp_n * L::kRows + j * 16 + h * 8 + g] >> (8 * t) & 0xffu;
        fast = fast && fast_scale(scale[j][h]);
      }
    if constexpr (!kFastScales) fast = __all_sync(kFullMask, fast);
  }
  static_assert(kGemmCopyParts == 4, "a part a piece");
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    if constexpr (kMxfp4) {
      // The piece's words of nibbles, converted once; then x a pair group at a time.
      uint32_t nibbles[L::kGroups][2];
#pragma unroll
      for (int j = 0; j < L::kGroups; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp_n * L::kRows + j * 16 + h * 8 + g;
          nibbles[j][h] = reinterpret_cast<const uint32_t*>(stage)[(r * 4 + nibble_piece(t, r)) * 4 + u];
        }
      copier.part(u);
      uint4 w[L::kGroups][2];
#pragma unroll
      for (int j = 0; j < L::kGroups; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          w[j][h] = kFastScales || fast ? mxfp4_piece_fast(nibbles[j][h], scale[j][h])
                                        : mxfp4_piece(nibbles[j][h], scale[j][h]);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const uint4 xq0 = x_stage[m * kXQuadUnitsPerGroup + x_quad_unit(g, 4 * t + u, 0)];
        const uint4 xq1 = x_stage[m * kXQuadUnitsPerGroup + x_quad_unit(g, 4 * t + u, 1)];
#pragma unroll
        for (int j = 0; j < L::kGroups; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            mma_16816_rows16<T>(c[j][h][m], xq0.x, xq0.y, xq0.z, xq0.w, w[j][h].x, w[j][h].y);
            mma_16816_rows16<T>(c[j][h][m], xq1.x, xq1.y, xq1.z, xq1.w, w[j][h].z, w[j][h].w);
          }
      }
    } else {
      // The pair groups' quads first, then the weights' pieces a row half at a time.
      uint4 xq[kM][2];
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) xq[m][h] = x_stage[m * kXQuadUnitsPerGroup + x_quad_unit(g, 4 * t + u, h)];
      uint4 w[L::kGroups][2];
#pragma unroll
      for (int j = 0; j < L::kGroups; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          w[j][h] = stage[(warp_n * L::kRows + j * 16 + h * 8 + g) * kSuperPieces + ((u * 4 + t) ^ swap)];
      copier.part(u);
#pragma unroll
      for (int j = 0; j < L::kGroups; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int m = 0; m < kM; ++m) {
            mma_16816_rows16<T>(c[j][h][m], xq[m][0].x, xq[m][0].y, xq[m][0].z, xq[m][0].w, w[j][h].x, w[j][h].y);
            mma_16816_rows16<T>(c[j][h][m], xq[m][1].x, xq[m][1].y, xq[m][1].z, xq[m][1].w, w[j][h].z, w[j][h].w);
          }
    }
  }
}

// The epilogue's sums in shared memory (over the stages, which are free by then): [pair slot][block
// row], f32, rows padded to a stride of 8 mod 32 words so that a warp's 64-bit writes (slots g, rows 2t)
// take the two wavefronts their 256 bytes need.
constexpr int kGemmSumStride = kGemmWeightRows + 8;
static_assert(kGemmXRows * kGemmSumStride * 4 <= GemmStage<true>::kPieces * 16 * kGemmStages<true>, "sums fit");

// f(j, h, m) for each of a warp's sum quads c[j][h][m] (row group j, half h, pair group m), unrolled.
template <bool kMxfp4, typename F>
__device__ __forceinline__ void for_each_sum_quad(F&& f) {
  using L = GemmWarpLayout<kMxfp4>;
#pragma unroll
  for (int j = 0; j < L::kGroups; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int m = 0; m < L::kMGroups; ++m) f(j, h, m);
}

template <bool kMxfp4>
__device__ __forceinline__ void write_gemm_sums(float* sums, const typename GemmWarpLayout<kMxfp4>::Sums& c,
                                                int warp_n, int warp_m, int g, int t) {
  using L = GemmWarpLayout<kMxfp4>;
  for_each_sum_quad<kMxfp4>([&](int j, int h, int m) {
    const int slot = (warp_m * L::kMGroups + m) * 16 + g, row = warp_n * L::kRows + j * 16 + h * 8 + 2 * t;
    *reinterpret_cast<float2*>(sums + slot * kGemmSumStride + row) = make_float2(c[j][h][m][0], c[j][h][m][1]);
    *reinterpret_cast<float2*>(sums + (slot + 8) * kGemmSumStride + row) = make_float2(c[j][h][m][2], c[j][h][m][3]);
  });
}

// The item's outputs from the sums, 8 columns of one pair a thread at a time (one 16-byte store when
// aligned): each sum through rounded_output, then stored, or act(gate) * up with the gate in block
// row 16 G + i and its up in 16 G + 8 + i (gemv_weight_rows' groups), as store_row_pair does.
__device__ __forceinline__ uint16_t bits_of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ uint16_t bits_of(__half v) { return __half_as_ushort(v); }

template <typename T>
__device__ void store_gemm_sums(const MoeGemmArgs& a, const float* sums, const int* chunk_pairs, int expert,
                                int row_block) {
  const int units = a.fuse_act ? kGemmGroups : 2 * kGemmGroups;  // 8-column units a pair
  const int tid = static_cast<int>(threadIdx.x), unit = tid % units;
  const int group = unit / (a.fuse_act ? 1 : 2), half = a.fuse_act ? 0 : unit % 2;
  const int64_t n_out = a.fuse_act ? a.n / 2 : a.n;
  const int64_t col0 = (static_cast<int64_t>(row_block) * kGemmGroups + group) * (a.fuse_act ? 8 : 16) + 8 * half;
  if (col0 >= n_out) return;
  const int cols = static_cast<int>(n_out - col0 < 8 ? n_out - col0 : 8);
  const int row0 = group * 16 + 8 * half;  // the gate (or the output) rows; the up rows 8 on
  const T* bias = static_cast<const T*>(a.bias);
  float b[8], b_up[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    b[i] = b_up[i] = 0.0f;
    if (bias != nullptr && i < cols) {
      b[i] = to_f32(__ldg(bias + expert * a.n + col0 + i));
      if (a.fuse_act) b_up[i] = to_f32(__ldg(bias + expert * a.n + n_out + col0 + i));
    }
  }
  const bool vector = cols == 8 && a.ld_out % 8 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  for (int slot = tid / units; slot < kGemmXRows; slot += kGemmWarps * 32 / units) {
    const int pair = chunk_pairs[slot];
    if (pair < 0) continue;
    const float* s = sums + slot * kGemmSumStride + row0;
    T y[8];  // 8 outputs, then (aligned) one 16-byte store of their bits
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float v = rounded_output<T>(s[i], bias != nullptr, b[i]);
      y[i] = a.fuse_act ? apply_act<T>(a.act, v, rounded_output<T>(s[8 + i], bias != nullptr, b_up[i]))
                        : from_f32<T>(v);
    }
    T* out = static_cast<T*>(a.out) + static_cast<int64_t>(pair) * a.ld_out + col0;
    if (vector) {
      uint32_t words[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) words[i] = uint32_t{bits_of(y[2 * i])} | uint32_t{bits_of(y[2 * i + 1])} << 16;
      *reinterpret_cast<uint4*>(out) = make_uint4(words[0], words[1], words[2], words[3]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (i < cols) out[i] = y[i];
    }
  }
}

// An item's first-segment sums wait in the thread's slice of the scratch (kFoldVectors float4 a
// thread, a block's threads side by side, so each float4 of a warp is one 512-byte access): stored
// after the first segment (c then restarts from zero), added back after the second (first + second,
// the decode kernel's order). 128 sums a lane leave no registers for a second set; the scratch's
// traffic is 1 KB a thread an item against ~370 KB of weights.
constexpr int kFoldVectors = 32;
static_assert(sizeof(GemmWarpLayout<true>::Sums) == kFoldVectors * 16 &&
                  sizeof(GemmWarpLayout<false>::Sums) == kFoldVectors * 16,
              "a thread's sums fill its slice of the scratch");
static_assert(kMaxKSegments == 2, "one fold: the first segment's sums, then their sum with the second's");

template <bool kMxfp4>
__device__ __forceinline__ void fold_gemm_sums(typename GemmWarpLayout<kMxfp4>::Sums& c, float4* scratch,
                                               bool first_segment_done) {
  using L = GemmWarpLayout<kMxfp4>;
  for_each_sum_quad<kMxfp4>([&](int j, int h, int m) {
    float(&v)[4] = c[j][h][m];
    float4* slot = scratch + ((j * 2 + h) * L::kMGroups + m) * (kGemmWarps * 32);
    if (first_segment_done) {
      *slot = make_float4(v[0], v[1], v[2], v[3]);
      v[0] = v[1] = v[2] = v[3] = 0.0f;
    } else {
      const float4 first = *slot;
      v[0] = __fadd_rn(first.x, v[0]), v[1] = __fadd_rn(first.y, v[1]);
      v[2] = __fadd_rn(first.z, v[2]), v[3] = __fadd_rn(first.w, v[3]);
    }
  });
}

template <typename T, bool kMxfp4, bool kFastScales = false>
__global__ void __launch_bounds__(kGemmWarps * 32, 1)
    moe_gemm_tiled_kernel(MoeGemmArgs a, int row_blocks) {
  extern __shared__ uint4 smem[];  // [kGemmStages][GemmStage::kPieces], then the schedule
  constexpr int kStages = kGemmStages<kMxfp4>;
  constexpr int kStagePieces = GemmStage<kMxfp4>::kPieces;
  int* schedule_ints = reinterpret_cast<int*>(smem + kStages * kStagePieces);
  const GemmSchedule schedule{schedule_ints, schedule_ints + a.num_experts, schedule_ints + 2 * a.num_experts};
  __shared__ int w_rows[kGemmWeightRows];
  __shared__ uint64_t w_source[kGemmWeightRows];
  __shared__ uint64_t x_source[kGemmXRows];
  __shared__ int chunk_pairs[kGemmXRows];
  const int chunks = build_gemm_schedule(a, schedule);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  using L = GemmWarpLayout<kMxfp4>;
  const int warp_n = warp % L::kWarpsN, warp_m = warp / L::kWarpsN;
  const int steps = static_cast<int>((a.k + kSuperK - 1) / kSuperK), segment = segment_steps(a, steps);
  float4* fold_scratch = a.fold_scratch == nullptr ? nullptr
                                                   : reinterpret_cast<float4*>(a.fold_scratch) +
                                                         (static_cast<int64_t>(blockIdx.x) * kFoldVectors) *
                                                             (kGemmWarps * 32) + tid;
  const int items = chunks * row_blocks;
  for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
    const int chunk = item / row_blocks, row_block = item % row_blocks;
    const int expert = chunk_expert(schedule, a.num_experts, chunk);
    const int first_tile = schedule.first[expert] + (chunk - schedule.chunk_start[expert]) * kGemmTiles;
    const int tiles = min(kGemmTiles, schedule.end[expert] - first_tile);
    __syncthreads();  // the last item's epilogue has read chunk_pairs and the sums
    // The item's rows: weight row r of the block is row lo (r % 16 < 8) or hi of group r / 16.
    {
      const int r = tid % kGemmWeightRows;
      const GemvRows rows = gemv_weight_rows(a, static_cast<int64_t>(row_block) * kGemmGroups + r / 16, r % 8);
      const bool lo = r % 16 < 8, ok = lo ? rows.ok_lo : rows.ok_hi;
      const int64_t row = ok ? expert * a.n + (lo ? rows.lo : rows.hi) : 0;
      const int64_t row_bytes = kMxfp4 ? a.k / 2 : a.k * static_cast<int64_t>(sizeof(T));
      if (tid < kGemmWeightRows) {
        w_rows[r] = ok ? static_cast<int>(row) : -1;
        w_source[r] = row_source(static_cast<const uint8_t*>(a.weight) + row * row_bytes, ok);
      }
      if (tid < kGemmXRows) {
        const int64_t slot = static_cast<int64_t>(first_tile) * kTileRows + tid;
        const int pair = tid < tiles * kTileRows ? a.tile_pairs[slot] : -1;
        chunk_pairs[tid] = pair;
        const int64_t x_row = pair >= 0 ? pair / a.pairs_per_x_row : 0;
        x_source[tid] = row_source(static_cast<const T*>(a.x) + x_row * a.ld_x, pair >= 0);
      }
    }
    __syncthreads();
    const int x_rows = tiles * kTileRows;
    const int warp_groups = min(L::kMGroups, max(0, (tiles + 1) / 2 - warp_m * L::kMGroups));  // holding a pair
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      GemmStageCopier<T, kMxfp4> copier{a, smem + s * kStagePieces, w_source, x_source, w_rows, x_rows, s, s < steps};
      copier.all_parts();
      copier.store_scales();
      cp_async_commit();
    }
    typename L::Sums c = {};
    for (int s = 0; s < steps; ++s) {
      // Stage s has landed (this thread's copies, then everyone's), and every warp is done with stage
      // s - 1, which the copies of step s + kStages - 1 now fill while stage s is multiplied.
      cp_async_wait<kStages - 2>();
      __syncthreads();
      const int ahead = s + kStages - 1;
      GemmStageCopier<T, kMxfp4> copier{
          a, smem + (ahead % kStages) * kStagePieces, w_source, x_source, w_rows, x_rows, ahead, ahead < steps};
      const uint4* stage = smem + (s % kStages) * kStagePieces;
      if (warp_groups > L::kMGroups / 2)  // warp-uniform
        multiply_gemm_stage<T, kMxfp4, kFastScales, L::kMGroups>(c, stage, warp_n, warp_m, g, t, copier);
      else if (warp_groups > 0)
        multiply_gemm_stage<T, kMxfp4, kFastScales, L::kMGroups / 2>(c, stage, warp_n, warp_m, g, t, copier);
      else
        copier.all_parts();
      copier.store_scales();
      cp_async_commit();
      if (s + 1 == segment && segment < steps) fold_gemm_sums<kMxfp4>(c, fold_scratch, true);  // block-uniform
    }
    if (segment < steps) fold_gemm_sums<kMxfp4>(c, fold_scratch, false);
    cp_async_wait<0>();  // no copy in flight into the stages the sums take (steps past K issue none)
    __syncthreads();     // every warp is done with the last stage
    float* sums = reinterpret_cast<float*>(smem);
    write_gemm_sums<kMxfp4>(sums, c, warp_n, warp_m, g, t);
    __syncthreads();
    store_gemm_sums<T>(a, sums, chunk_pairs, expert, row_block);
  }
}

// Any dtype: one thread per (row, column) of the block's 8 x 8, an f32 FMA chain in ascending k;
// grid (tiles, column groups). The block's sums then go out as the tensor-core kernels store theirs
// (threads 0..31 as lanes g = row, t = column pair).
template <typename T>
__global__ void moe_gemm_fma_kernel(MoeGemmArgs a) {
  __shared__ float sums[kTileRows][kTileRows];
  const int64_t tile = blockIdx.x;
  const int expert = a.tile_experts[tile];
  if (expert < 0) return;
  const int row = static_cast<int>(threadIdx.x) / kTileRows, col = static_cast<int>(threadIdx.x) % kTileRows;
  const int pair = a.tile_pairs[tile * kTileRows + row];
  bool w_row_ok = false;
  const int64_t n_row = static_cast<int64_t>(expert) * a.n + group_weight_row(a, blockIdx.y, col, w_row_ok);
  float acc = 0.0f;
  if (pair >= 0 && w_row_ok) {
    const T* x = static_cast<const T*>(a.x) + pair / a.pairs_per_x_row * a.ld_x;
    for (int64_t k = 0; k < a.k; ++k) {
      float w;
      if (a.scales != nullptr) {
        const uint8_t byte = static_cast<const uint8_t*>(a.weight)[n_row * (a.k / 2) + k / 2];
        w = __fmul_rn(e2m1_f32(k % 2 == 0 ? byte & 15u : byte >> 4), e8m0_f32(a.scales[n_row * (a.k / 32) + k / 32]));
      } else {
        w = to_f32(static_cast<const T*>(a.weight)[n_row * a.k + k]);
      }
      acc = fmaf(to_f32(x[k]), w, acc);
    }
  }
  sums[row][col] = acc;
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int g = static_cast<int>(threadIdx.x) / 4, t = static_cast<int>(threadIdx.x) % 4;
  store_pair_row<T>(a, expert, blockIdx.y, a.tile_pairs[tile * kTileRows + g], t, sums[g][2 * t], sums[g][2 * t + 1]);
}

// ----- moe_combine: grid (tokens, column blocks) ------------------------------------------------

constexpr int kCombineThreads = 256;
constexpr int kMaxCombineSlots = 32;

// The token's slots in ascending expert order (insertion sort, stable), by thread 0 into order[top_k].
__device__ __forceinline__ void combine_order(const int32_t* __restrict__ ids, int top_k, int* order) {
  if (threadIdx.x != 0) return;
  for (int j = 0; j < top_k; ++j) {
    int i = j;
    for (; i > 0 && ids[order[i - 1]] > ids[j]; --i) order[i] = order[i - 1];
    order[i] = j;
  }
}

// One slot of the combine: acc + weight * y, the product and the sum each rounded to T.
template <typename T>
__device__ __forceinline__ float combine_step(float acc, float weight, float y) {
  return round_to<T>(__fadd_rn(acc, round_to<T>(__fmul_rn(weight, y))));
}

template <typename T>
__global__ void moe_combine_kernel(Rows out, Rows y, const int32_t* __restrict__ topk_ids,
                                   const float* __restrict__ topk_weights, int top_k, bool accumulate) {
  __shared__ int order[kMaxCombineSlots];
  const int64_t t = blockIdx.x;
  combine_order(topk_ids + t * top_k, top_k, order);
  __syncthreads();
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x;
  if (c >= out.row_size) return;
  T* dst = row_ptr<T>(out, t);
  float acc = accumulate ? to_f32(dst[c]) : 0.0f;
  for (int i = 0; i < top_k; ++i) {
    const int64_t pair = t * top_k + order[i];
    acc = combine_step<T>(acc, topk_weights[pair], to_f32(row_ptr<const T>(y, pair)[c]));
  }
  dst[c] = from_f32<T>(acc);
}

// The combine of one token, then the residual add and the norm of the next block (row_norm.cuh's
// register form, so the bits of moe_combine then add_rms_norm). A block a token: at a decode batch the
// two launches cost more than the work they split.
template <typename T, int kPerThread>
__global__ void __launch_bounds__(kNormThreads)
    moe_combine_norm_kernel(Rows out, Rows hidden, Rows normed, Rows y, const int32_t* __restrict__ topk_ids,
                            const float* __restrict__ topk_weights, int top_k, bool accumulate,
                            const T* __restrict__ w, float eps, NormForm form) {
  __shared__ int order[kMaxCombineSlots];
  const int64_t t = blockIdx.x;
  combine_order(topk_ids + t * top_k, top_k, order);
  __syncthreads();
  const int d = static_cast<int>(hidden.row_size);
  T* dst = row_ptr<T>(out, t);
  T* h = row_ptr<T>(hidden, t);
  // Slot by slot over all of a thread's elements, so each slot's loads are in flight together (element
  // by element, each slot's load waited for in turn, the kernel took longer than the two it replaces).
  float v[kPerThread], weight[kPerThread], delta[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kNormThreads;
    const bool in = i < d;
    delta[j] = in && accumulate ? to_f32(dst[i]) : 0.0f;
    v[j] = in ? to_f32(h[i]) : 0.0f;
    weight[j] = in ? to_f32(w[i]) : 0.0f;
  }
  for (int s = 0; s < top_k; ++s) {
    const int64_t pair = t * top_k + order[s];
    const float slot_weight = topk_weights[pair];
    const T* slot_y = row_ptr<const T>(y, pair);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kNormThreads;
      if (i < d) delta[j] = combine_step<T>(delta[j], slot_weight, to_f32(slot_y[i]));
    }
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kNormThreads;
    if (i < d) {
      dst[i] = from_f32<T>(delta[j]);
      v[j] = round_to<T>(__fadd_rn(v[j], delta[j]));
    }
  }
  store_normed_row<T>(v, weight, d, eps, form, h, row_ptr<T>(normed, t));
}

}  // namespace

cudaError_t launch_moe_route(DType dtype, int32_t* topk_ids, float* topk_weights, Rows logits, int64_t top_k,
                             MoeRouting routing, bool renormalize, cudaStream_t stream) {
  const int64_t num_experts = logits.row_size;
  if (num_experts > kMaxRouteExperts || top_k < 1 || top_k > num_experts) return cudaErrorInvalidValue;
  if (logits.num_rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((logits.num_rows + kRouteWarps - 1) / kRouteWarps));
  const size_t smem = sizeof(float) * kRouteWarps * static_cast<size_t>(route_warp_floats(num_experts, top_k));
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(moe_route_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    moe_route_kernel<T><<<grid, kRouteWarps * 32, smem, stream>>>(topk_ids, topk_weights, logits,
                                                                   static_cast<int>(num_experts),
                                                                   static_cast<int>(top_k), routing, renormalize);
    return cudaGetLastError();
  });
}

cudaError_t launch_moe_group(int32_t* tile_pairs, int32_t* tile_experts, int64_t num_tiles, const int32_t* topk_ids,
                             int64_t pairs, int64_t num_experts, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > kMaxGroupExperts || pairs > 0x3fffffff || num_tiles > 0x0fffffff)
    return cudaErrorInvalidValue;
  if (num_tiles == 0) return cudaSuccess;
  const size_t smem = sizeof(int) * static_cast<size_t>(group_smem_ints(num_experts));
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(moe_group_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  moe_group_kernel<<<1, kGroupWarps * 32, smem, stream>>>(tile_pairs, tile_experts, static_cast<int>(num_tiles),
                                                           topk_ids, static_cast<int>(pairs),
                                                           static_cast<int>(num_experts));
  return cudaGetLastError();
}

bool moe_route_group_fits(int64_t tokens, int64_t num_experts, int64_t top_k) {
  return tokens >= 1 && tokens <= kRouteGroupMaxTokens && num_experts >= 1 && num_experts <= kMaxGroupExperts &&
         top_k >= 1 && top_k <= num_experts;
}

cudaError_t launch_moe_route_group(DType dtype, int32_t* topk_ids, float* topk_weights, int32_t* tile_pairs,
                                   int32_t* tile_experts, int64_t num_tiles, Rows logits, int64_t top_k,
                                   MoeRouting routing, bool renormalize, cudaStream_t stream) {
  const int64_t num_experts = logits.row_size, pairs = logits.num_rows * top_k;
  if (!moe_route_group_fits(logits.num_rows, num_experts, top_k) || num_tiles < 1) return cudaErrorInvalidValue;
  const size_t smem = sizeof(int) * static_cast<size_t>(group_smem_ints(num_experts) + (pairs + 3) / 4 * 4 +
                                                        kGroupWarps * route_warp_floats(num_experts, top_k));
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(moe_route_group_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem));
    moe_route_group_kernel<T><<<1, kGroupWarps * 32, smem, stream>>>(
        topk_ids, topk_weights, tile_pairs, tile_experts, static_cast<int>(num_tiles), logits,
        static_cast<int>(num_experts), static_cast<int>(top_k), routing, renormalize);
    return cudaGetLastError();
  });
}

int moe_k_segment_steps(int64_t k, int64_t requested_segments) {
  const int64_t steps = (k + kSuperK - 1) / kSuperK;
  const int64_t segments = std::min<int64_t>(kMaxKSegments, requested_segments > 0 ? requested_segments
                                                                                   : steps >= kSplitKMinSteps ? 2 : 1);
  if (segments <= 1) return 0;
  // A multiple of 4: whole pairs of the decode kernel's load batches (2 super-steps each for MXFP4).
  const int64_t length = ((steps + segments - 1) / segments + 3) / 4 * 4;
  return length >= steps ? 0 : static_cast<int>(length);
}

int64_t moe_fold_scratch_bytes(int num_sms) {
  return int64_t{std::max(num_sms, 1)} * kGemmWarps * 32 * kFoldVectors * 16;
}

cudaError_t launch_moe_expert_gemm(DType dtype, const MoeGemmArgs& args, int num_sms, int64_t tiled_min_rows,
                                   cudaStream_t stream) {
  if (args.num_tiles == 0) return cudaSuccess;
  const int64_t out_columns = args.fuse_act ? args.n / 2 : args.n;
  const int64_t columns_per_group = args.fuse_act ? kTileRows / 2 : kTileRows;
  const int64_t groups = (out_columns + columns_per_group - 1) / columns_per_group;
  // The decode kernel's step and byte offsets are 32-bit.
  if (groups > 65535 * int64_t{kGemvWarps} || args.num_tiles > 0x7fffffff || args.k > (int64_t{1} << 29) ||
      (args.scales != nullptr && args.k % 32 != 0))
    return cudaErrorInvalidValue;
  const bool mxfp4 = args.scales != nullptr;
  // The tensor-core kernels need 16-byte aligned rows of x and w (K % 32 == 0: whole MXFP4 groups).
  const bool aligned = args.k % 32 == 0 && args.ld_x % 8 == 0 && reinterpret_cast<uintptr_t>(args.x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(args.weight) % 16 == 0;
  const bool mma = aligned && (dtype == DType::kBF16 || (dtype == DType::kF16 && !mxfp4));
  const int64_t steps = (args.k + kSuperK - 1) / kSuperK;
  const int row_pieces = static_cast<int>(steps * kSuperPieces + 4);
  // Two tiles a block where an expert holds a tile of pairs on average (then about one expert in two
  // has a second tile, whose weights are no longer read and converted again: gpt-oss-20b's batch-64
  // decode step 3.79 -> 3.58 ms, 8 layers, H200). At half a tile on average few experts have two, and
  // the larger blocks cost more than they save (gpt-oss-20b batch 32: 2.92 -> 3.00 ms).
  // A tile holds at most as many pairs as the step has: a batch of one stages one x row, not eight.
  // K in segments: a warp a segment (split_warps, at few warps) or each warp walking them all.
  const int64_t segments =
      args.k_segment_steps > 0 ? (steps + args.k_segment_steps - 1) / args.k_segment_steps : 1;
  const bool two_tiles = args.num_pairs >= int64_t{kTileRows} * args.num_experts &&
                         int64_t{2 * kTileRows} * row_pieces * 16 <= smem_optin_limit();
  const int gemv_tiles = two_tiles ? 2 : 1;
  const int staged_rows =
      static_cast<int>(std::min<int64_t>(int64_t{gemv_tiles} * kTileRows, std::max<int64_t>(args.num_pairs, 1)));
  const int64_t gemv_groups = args.fuse_act ? (args.n / 2 + kGemvRows / 2 - 1) / (kGemvRows / 2)
                                            : (args.n + kGemvRows - 1) / kGemvRows;
  const int split_warps =
      segments > 1 && args.num_tiles * gemv_groups * segments <= int64_t{kSplitWarpsPerSm} * std::max(num_sms, 1)
          ? static_cast<int>(segments)
          : 1;
  const int gemv_block_warps = split_warps * (two_tiles ? kGemvBlockWarps<2> : kGemvBlockWarps<1>);
  // The x rows; the split warps' sums (16 bytes a tile and lane) take their place after the loop.
  const int64_t split_sums_bytes = split_warps > 1 ? int64_t{gemv_block_warps} * gemv_tiles * 32 * 16 : 0;
  const int64_t gemv_smem = std::max(int64_t{staged_rows} * row_pieces * 16, split_sums_bytes);
  const int64_t gemm_row_blocks = (gemv_groups + kGemmGroups - 1) / kGemmGroups;
  const int64_t schedule_bytes = 3 * (int64_t{args.num_experts} + 1) * 4;
  const int64_t gemm_smem = (mxfp4 ? int64_t{kGemmStages<true>} * GemmStage<true>::kPieces
                                   : int64_t{kGemmStages<false>} * GemmStage<false>::kPieces) * 16 + schedule_bytes;
  // The tiled kernel's weight row indices (in the stacked [E * n] rows) and work items are 32-bit;
  // its dynamic shared memory leaves kGemmStaticSmemRoom of the limit to its static arrays.
  const int64_t gemm_smem_limit = smem_optin_limit() - kGemmStaticSmemRoom;
  const bool gemm_fits = gemm_smem <= gemm_smem_limit && args.num_experts * args.n < (int64_t{1} << 31) &&
                         (args.num_tiles + args.num_experts) * gemm_row_blocks < (int64_t{1} << 31) &&
                         (segments == 1 || args.fold_scratch != nullptr);
  if (mma && gemv_smem <= smem_optin_limit() && gemm_fits) {
    auto launch = [&](auto gemv_kernel, auto gemv2_kernel, auto gemm_kernel, std::atomic<uint64_t>* raised) {
      const bool tiled = tiled_min_rows > 0 ? args.num_tiles * kTileRows >= tiled_min_rows
                                            : args.num_tiles * kTileRows > kSharedWeightsMinRows;
      if (tiled) {
        // Raised once to the whole room (the schedule's size depends on E); if the kernel's static arrays
        // outgrew kGemmStaticSmemRoom, cudaFuncSetAttribute refuses it here, before any launch.
        cudaError_t e = allow_dynamic_smem(gemm_kernel, gemm_smem_limit, raised[2]);
        if (e != cudaSuccess) return e;
        // At most one chunk a tile in 16, plus one a used expert.
        const int64_t max_items =
            (args.num_tiles / kGemmTiles + std::min<int64_t>(args.num_experts, args.num_tiles) + 1) * gemm_row_blocks;
        const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(std::max(num_sms, 1), max_items));
        gemm_kernel<<<blocks, kGemmWarps * 32, gemm_smem, stream>>>(args, static_cast<int>(gemm_row_blocks));
      } else {
        // Raised once to the limit: each launch's size depends on K, and a smaller first K must not cap
        // the later ones.
        cudaError_t e = two_tiles ? allow_dynamic_smem(gemv2_kernel, smem_optin_limit(), raised[1])
                                  : allow_dynamic_smem(gemv_kernel, smem_optin_limit(), raised[0]);
        if (e != cudaSuccess) return e;
        const int block_groups = gemv_block_warps / split_warps;
        const dim3 grid(static_cast<unsigned>(args.num_tiles),
                        static_cast<unsigned>((gemv_groups + block_groups - 1) / block_groups));
        if (two_tiles)
          gemv2_kernel<<<grid, gemv_block_warps * 32, gemv_smem, stream>>>(args, row_pieces, staged_rows, split_warps);
        else
          gemv_kernel<<<grid, gemv_block_warps * 32, gemv_smem, stream>>>(args, row_pieces, staged_rows, split_warps);
      }
      return cudaGetLastError();
    };
    static std::atomic<uint64_t> raised[4][3];
    if (dtype == DType::kF16)
      return launch(moe_gemv_kernel<__half, false>, moe_gemv2_kernel<__half, false>,
                    moe_gemm_tiled_kernel<__half, false>, raised[0]);
    if (mxfp4 && args.mxfp4_fast_scales)
      return launch(moe_gemv_kernel<__nv_bfloat16, true, true>, moe_gemv2_kernel<__nv_bfloat16, true, true>,
                    moe_gemm_tiled_kernel<__nv_bfloat16, true, true>, raised[3]);
    if (mxfp4)
      return launch(moe_gemv_kernel<__nv_bfloat16, true>, moe_gemv2_kernel<__nv_bfloat16, true>,
                    moe_gemm_tiled_kernel<__nv_bfloat16, true>, raised[1]);
    return launch(moe_gemv_kernel<__nv_bfloat16, false>, moe_gemv2_kernel<__nv_bfloat16, false>,
                  moe_gemm_tiled_kernel<__nv_bfloat16, false>, raised[2]);
  }
  if (groups > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(args.num_tiles), static_cast<unsigned>(groups));
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    moe_gemm_fma_kernel<T><<<grid, kTileRows * kTileRows, 0, stream>>>(args);
    return cudaGetLastError();
  });
}

cudaError_t launch_moe_combine(DType dtype, Rows out, Rows y, const int32_t* topk_ids, const float* topk_weights,
                               int64_t top_k, bool accumulate, cudaStream_t stream) {
  const int64_t column_blocks = (out.row_size + kCombineThreads - 1) / kCombineThreads;
  if (top_k < 1 || top_k > kMaxCombineSlots || column_blocks > 65535 || out.num_rows > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (out.num_rows == 0 || out.row_size == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(out.num_rows), static_cast<unsigned>(column_blocks));
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    moe_combine_kernel<T><<<grid, kCombineThreads, 0, stream>>>(out, y, topk_ids, topk_weights,
                                                                 static_cast<int>(top_k), accumulate);
    return cudaGetLastError();
  });
}

cudaError_t launch_moe_combine_add_rms_norm(DType dtype, Rows out, Rows hidden, Rows normed, Rows y,
                                            const int32_t* topk_ids, const float* topk_weights, int64_t top_k,
                                            bool accumulate, const void* w, float eps, NormForm form,
                                            cudaStream_t stream) {
  if (top_k < 1 || top_k > kMaxCombineSlots || out.num_rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (out.num_rows == 0 || out.row_size == 0) return cudaSuccess;
  cudaError_t status = cudaSuccess;
  const bool fused = hidden.row_size >= kBlockRowMin && with_norm_registers(hidden.row_size, [&](auto per_thread) {
    status = dispatch_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      moe_combine_norm_kernel<T, decltype(per_thread)::value><<<static_cast<unsigned>(out.num_rows), kNormThreads, 0,
                                                                stream>>>(
          out, hidden, normed, y, topk_ids, topk_weights, static_cast<int>(top_k), accumulate, static_cast<const T*>(w),
          eps, form);
      return cudaGetLastError();
    });
  });
  if (fused) return status;
  status = launch_moe_combine(dtype, out, y, topk_ids, topk_weights, top_k, accumulate, stream);
  return status == cudaSuccess ? launch_add_rms_norm(dtype, hidden, normed, out, w, eps, form, stream) : status;
}

}  // namespace pagellm::cuda
