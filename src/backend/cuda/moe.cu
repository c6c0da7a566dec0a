// The MoE ops on the device (backend.h moe_route, moe_group, moe_expert_gemm, moe_combine; CPU twins
// in cpu/moe.cpp). Nothing here reads back to the host, and every grid depends on T alone, so a
// decode step's MoE layers are captured in its CUDA graph.
//
// moe_expert_gemm is the decode GEMV of gemv.cu (read its header first) with the rows of x taken
// through the grouped layout: a block owns one tile (one expert, up to 8 pairs: the mma's 8 real
// rows of A; for large batches 16 consecutive tiles, sharing the weights it loaded) and 8 columns n
// of that expert's weight, its warps split K in ranges that depend on K
// alone and add their partial sums in warp order. So each output element is a fixed-order sum over
// its own x row and w row: batch invariant. Only the experts some token chose are read (a tile of an
// unchosen expert does not exist; the grid's spare tiles return at once), each once per tile.
// With the activation fused (gate_up), the block's 8 columns are 4 gate rows and the matching 4 up
// rows, so its epilogue has both halves of act(gate) * up.
// MXFP4 experts (bf16 activations): a lane's 8 elements of a step are 4 bytes of e2m1 nibbles under
// one e8m0 scale (k0 is a multiple of 32: one group), converted exactly to bf16 in registers.
// Other dtypes (f32, or f16 with MXFP4, whose range cannot hold every scaled value) and K % 32 != 0
// (a tensor-parallel shard of a small expert) take a plain f32 FMA kernel over the same layout.
#include <cfloat>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/mma_16816.cuh"
#include "backend/cuda/moe.h"

namespace pagellm::cuda {
namespace {

constexpr int kTileRows = 8;   // pairs per tile (backend.h kMoeTileRows) = columns n per block
constexpr int kStepK = 32;     // k per warp step: 4 lanes x 8 elements
constexpr int kUnroll = 8;     // steps whose loads a warp has in flight at once
constexpr int kMaxWarps = 16;  // split-K warps per block (the tensor-core path takes K <= 4096)
constexpr int kTilesPerBlock = 16;            // tiles a block runs once the batch is large
constexpr int64_t kSharedWeightsMinRows = 2048;  // ... i.e. above this many grouped rows

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

template <typename T>
__global__ void moe_route_kernel(int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights, Rows logits,
                                 int num_experts, int top_k, MoeRouting routing, bool renormalize) {
  extern __shared__ float scores_all[];  // [kRouteWarps][E]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= logits.num_rows) return;  // no block-wide barrier below
  float* score = scores_all + warp * num_experts;
  const T* row = row_ptr<const T>(logits, t);
  for (int e = lane; e < num_experts; e += 32) score[e] = to_f32(row[e]);
  __syncwarp();
  if (routing == MoeRouting::kSoftmaxTopK) {
    float max_logit = -INFINITY;
    for (int e = lane; e < num_experts; e += 32) max_logit = fmaxf(max_logit, score[e]);
    max_logit = warp_max(max_logit);
    for (int e = lane; e < num_experts; e += 32) score[e] = expf(score[e] - max_logit);
    __syncwarp();
    float sum = 0.0f;  // in expert order, as the CPU twin sums
    if (lane == 0)
      for (int e = 0; e < num_experts; ++e) sum = __fadd_rn(sum, score[e]);
    sum = __shfl_sync(kFullMask, sum, 0);
    for (int e = lane; e < num_experts; e += 32) score[e] = __fdiv_rn(score[e], sum);
    __syncwarp();
  }
  int32_t* ids = topk_ids + t * top_k;
  float* weights = topk_weights + t * top_k;
  uint64_t chosen = 0;  // bit i: expert lane + 32 i
  for (int j = 0; j < top_k; ++j) {
    float value = 0.0f;
    int expert = -1;
    for (int i = 0, e = lane; e < num_experts; ++i, e += 32)
      if (!(chosen >> i & 1)) better_of(value, expert, score[e], e);
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other_value = __shfl_xor_sync(kFullMask, value, offset);
      const int other_expert = __shfl_xor_sync(kFullMask, expert, offset);
      better_of(value, expert, other_value, other_expert);
    }
    if (expert % 32 == lane) chosen |= uint64_t{1} << (expert / 32);
    if (lane == 0) {
      ids[j] = expert;
      weights[j] = value;  // p, or the logit (kTopKSoftmax); finished below
    }
  }
  if (lane != 0) return;
  if (routing == MoeRouting::kTopKSoftmax) {
    const float max_logit = weights[0];
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) sum = __fadd_rn(sum, weights[j] = expf(weights[j] - max_logit));
    for (int j = 0; j < top_k; ++j) weights[j] = round_to<T>(__fdiv_rn(weights[j], sum));
  } else {
    float top_sum = 0.0f;
    for (int j = 0; j < top_k; ++j) top_sum = __fadd_rn(top_sum, weights[j]);
    for (int j = 0; j < top_k; ++j) weights[j] = round_to<T>(renormalize ? __fdiv_rn(weights[j], top_sum) : weights[j]);
  }
}

// ----- moe_group: one block ----------------------------------------------------------------------
//
// Warp w owns a contiguous range of pairs. Pass 1 counts each expert's pairs per warp (lanes that hold
// the same expert find each other with __match_any_sync; the lowest adds their number), a scan over
// warps then gives each warp its start within each expert, and pass 2 places every pair at
// expert start + its warp's start + the number of same-expert lanes below it: ascending pair order
// within each expert, deterministic.

constexpr int kGroupWarps = 16;
constexpr int kMaxGroupExperts = 512;

__global__ void __launch_bounds__(kGroupWarps * 32)
    moe_group_kernel(int32_t* __restrict__ tile_pairs, int32_t* __restrict__ tile_experts, int num_tiles,
                     const int32_t* __restrict__ topk_ids, int pairs, int num_experts) {
  extern __shared__ int group_smem[];
  int* counts = group_smem;                             // [kGroupWarps][E]: pairs, then the warp's start
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
  for (int e = tid; e < num_experts; e += threads) {
    int running = 0;
    for (int w = 0; w < kGroupWarps; ++w) {
      const int c = counts[w * num_experts + e];
      counts[w * num_experts + e] = running;
      running += c;
    }
    first_tile[e] = running;  // the expert's total, turned into its first tile below
  }
  __syncthreads();
  if (tid == 0) {
    int tile = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int total = first_tile[e];
      first_tile[e] = tile;
      tile += (total + kTileRows - 1) / kTileRows;
    }
    first_tile[num_experts] = tile;
  }
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

// The weight row a lane reads: its column n, or (fused) gate rows for g < 4 and up rows after.
__device__ __forceinline__ int64_t weight_row(const MoeGemmArgs& a, int g, bool& ok) {
  if (!a.fuse_act) {
    const int64_t n = static_cast<int64_t>(blockIdx.y) * kTileRows + g;
    ok = n < a.n;
    return ok ? n : 0;
  }
  const int64_t half = a.n / 2, n = static_cast<int64_t>(blockIdx.y) * (kTileRows / 2) + (g & 3);
  ok = n < half;
  return ok ? (g < 4 ? n : half + n) : 0;
}

template <typename T>
__device__ __forceinline__ T apply_act(Activation act, float gate, float up) {
  switch (act) {
    case Activation::kGeluTanh: return act_times<T, Activation::kGeluTanh>(gate, up);
    case Activation::kClampedSwiglu: return act_times<T, Activation::kClampedSwiglu>(gate, up);
    default: return act_times<T, Activation::kSilu>(gate, up);
  }
}

// The epilogue of one tile and column block from its f32 sums sum(row, column) (column: 0..7 of the
// block): round, bias (rounded), then the store or act(gate) * up.
template <typename T, typename Sum>
__device__ __forceinline__ void store_tile(const MoeGemmArgs& a, int expert, int64_t tile, Sum sum) {
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out);
  for (int i = static_cast<int>(threadIdx.x); i < kTileRows * kTileRows; i += static_cast<int>(blockDim.x)) {
    const int row = i / kTileRows, col = i % kTileRows;
    const int pair = a.tile_pairs[tile * kTileRows + row];
    if (pair < 0) continue;
    if (!a.fuse_act) {
      const int64_t n = static_cast<int64_t>(blockIdx.y) * kTileRows + col;
      if (n >= a.n) continue;
      float y = round_to<T>(sum(row, col));
      if (bias != nullptr) y = round_to<T>(__fadd_rn(y, to_f32(bias[expert * a.n + n])));
      out[pair * a.ld_out + n] = from_f32<T>(y);
      continue;
    }
    const int64_t half = a.n / 2, n = static_cast<int64_t>(blockIdx.y) * (kTileRows / 2) + col;
    if (col >= kTileRows / 2 || n >= half) continue;
    float gate = round_to<T>(sum(row, col)), up = round_to<T>(sum(row, col + kTileRows / 2));
    if (bias != nullptr) {
      gate = round_to<T>(__fadd_rn(gate, to_f32(bias[expert * a.n + n])));
      up = round_to<T>(__fadd_rn(up, to_f32(bias[expert * a.n + half + n])));
    }
    out[pair * a.ld_out + n] = apply_act<T>(a.act, gate, up);
  }
}

// Tensor cores: grid (tile groups, column blocks), blockDim = warps * 32 (gemv.cu's split K, with
// steps_per_warp <= kUnroll: a warp's whole range of w stays in registers). A block runs
// tiles_per_block consecutive tiles and loads w again only when the expert changes, so a prefill's
// many tiles of one expert read its weights (and convert MXFP4) once per block, not once per tile.
template <typename T, bool kMxfp4>
__global__ void __launch_bounds__(kMaxWarps * 32)
    moe_gemm_mma_kernel(MoeGemmArgs a, int steps_per_warp, int tiles_per_block) {
  __shared__ float partial[kMaxWarps][kTileRows][kTileRows];  // [warp][row][column]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  bool w_row_ok = false;
  const int64_t w_row = weight_row(a, g, w_row_ok);
  const int64_t first_step = static_cast<int64_t>(warp) * steps_per_warp;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 wv[kUnroll];
  int loaded_expert = -1;
  for (int i = 0; i < tiles_per_block; ++i) {
    const int64_t tile = static_cast<int64_t>(blockIdx.x) * tiles_per_block + i;
    if (tile >= a.num_tiles) break;
    const int expert = a.tile_experts[tile];
    if (expert < 0) break;  // used tiles come first: the rest are spare (block-uniform)
    if (expert != loaded_expert) {
      loaded_expert = expert;
      const int64_t n_row = static_cast<int64_t>(expert) * a.n + w_row;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t step = first_step + u, k0 = step * kStepK;
        const bool in_range = u < steps_per_warp && k0 < a.k && w_row_ok;
        if constexpr (kMxfp4) {
          const uint8_t* blocks = static_cast<const uint8_t*>(a.weight) + n_row * (a.k / 2) + k0 / 2 + 4 * t;
          wv[u] = in_range ? mxfp4_piece(__ldg(reinterpret_cast<const uint32_t*>(blocks)),
                                         __ldg(a.scales + n_row * (a.k / 32) + step))
                           : zero;
        } else {
          const T* w = static_cast<const T*>(a.weight) + n_row * a.k + k0 + 8 * t;
          wv[u] = in_range ? __ldg(reinterpret_cast<const uint4*>(w)) : zero;
        }
      }
    }
    const int pair = a.tile_pairs[tile * kTileRows + g];
    const T* x_lane = static_cast<const T*>(a.x) + (pair >= 0 ? pair / a.pairs_per_x_row * a.ld_x : 0) + 8 * t;
    uint4 xv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k0 = (first_step + u) * kStepK;
      xv[u] = u < steps_per_warp && k0 < a.k && pair >= 0 ? __ldg(reinterpret_cast<const uint4*>(x_lane + k0)) : zero;
    }
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (u >= steps_per_warp) break;  // warp-uniform
      mma_16816<T>(c, xv[u].x, xv[u].y, wv[u].x, wv[u].y);
      mma_16816<T>(c, xv[u].z, xv[u].w, wv[u].z, wv[u].w);
    }
    partial[warp][g][2 * t] = c[0];
    partial[warp][g][2 * t + 1] = c[1];
    __syncthreads();
    store_tile<T>(a, expert, tile, [&](int row, int col) {
      float sum = partial[0][row][col];
      for (int v = 1; v < num_warps; ++v) sum += partial[v][row][col];  // warp order: fixed by K alone
      return sum;
    });
    __syncthreads();  // partial is rewritten by the next tile
  }
}

// Any dtype: one thread per (row, column) of the block's 8 x 8, an f32 FMA chain in ascending k.
template <typename T>
__global__ void moe_gemm_fma_kernel(MoeGemmArgs a) {
  __shared__ float sums[kTileRows][kTileRows];
  const int64_t tile = blockIdx.x;
  const int expert = a.tile_experts[tile];
  if (expert < 0) return;
  const int row = static_cast<int>(threadIdx.x) / kTileRows, col = static_cast<int>(threadIdx.x) % kTileRows;
  const int pair = a.tile_pairs[tile * kTileRows + row];
  bool w_row_ok = false;
  const int64_t n_row = static_cast<int64_t>(expert) * a.n + weight_row(a, col, w_row_ok);
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
  store_tile<T>(a, expert, tile, [&](int r, int c) { return sums[r][c]; });
}

// ----- moe_combine: grid (tokens, column blocks) ------------------------------------------------

constexpr int kCombineThreads = 256;
constexpr int kMaxCombineSlots = 32;

template <typename T>
__global__ void moe_combine_kernel(Rows out, Rows y, const int32_t* __restrict__ topk_ids,
                                   const float* __restrict__ topk_weights, int top_k) {
  __shared__ int order[kMaxCombineSlots];  // the token's slots in ascending expert order
  const int64_t t = blockIdx.x;
  const int32_t* ids = topk_ids + t * top_k;
  if (threadIdx.x == 0) {
    for (int j = 0; j < top_k; ++j) {  // insertion sort, stable
      int i = j;
      for (; i > 0 && ids[order[i - 1]] > ids[j]; --i) order[i] = order[i - 1];
      order[i] = j;
    }
  }
  __syncthreads();
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x;
  if (c >= out.row_size) return;
  T* dst = row_ptr<T>(out, t);
  float acc = to_f32(dst[c]);
  for (int i = 0; i < top_k; ++i) {
    const int j = order[i];
    const float scaled = round_to<T>(__fmul_rn(topk_weights[t * top_k + j], to_f32(row_ptr<const T>(y, t * top_k + j)[c])));
    acc = round_to<T>(__fadd_rn(acc, scaled));
  }
  dst[c] = from_f32<T>(acc);
}

}  // namespace

cudaError_t launch_moe_route(DType dtype, int32_t* topk_ids, float* topk_weights, Rows logits, int64_t top_k,
                             MoeRouting routing, bool renormalize, cudaStream_t stream) {
  const int64_t num_experts = logits.row_size;
  if (num_experts > kMaxRouteExperts || top_k < 1 || top_k > num_experts) return cudaErrorInvalidValue;
  if (logits.num_rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((logits.num_rows + kRouteWarps - 1) / kRouteWarps));
  const size_t smem = sizeof(float) * kRouteWarps * static_cast<size_t>(num_experts);
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
  const size_t smem = sizeof(int) * (kGroupWarps * static_cast<size_t>(num_experts) + num_experts + 1);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(moe_group_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  moe_group_kernel<<<1, kGroupWarps * 32, smem, stream>>>(tile_pairs, tile_experts, static_cast<int>(num_tiles),
                                                           topk_ids, static_cast<int>(pairs),
                                                           static_cast<int>(num_experts));
  return cudaGetLastError();
}

cudaError_t launch_moe_expert_gemm(DType dtype, const MoeGemmArgs& args, cudaStream_t stream) {
  if (args.num_tiles == 0) return cudaSuccess;
  const int64_t out_columns = args.fuse_act ? args.n / 2 : args.n;
  const int64_t columns_per_block = args.fuse_act ? kTileRows / 2 : kTileRows;
  const int64_t column_blocks = (out_columns + columns_per_block - 1) / columns_per_block;
  if (column_blocks > 65535 || args.num_tiles > 0x7fffffff || (args.scales != nullptr && args.k % 32 != 0))
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(args.num_tiles), static_cast<unsigned>(column_blocks));
  const bool mxfp4 = args.scales != nullptr;
  // The tensor-core path needs 16-byte aligned rows of x (and of dense w).
  const bool aligned = args.k % kStepK == 0 && args.ld_x % 8 == 0 && reinterpret_cast<uintptr_t>(args.x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(args.weight) % 16 == 0;
  const bool mma = aligned && (dtype == DType::kBF16 || (dtype == DType::kF16 && !mxfp4));
  const int64_t steps = args.k / kStepK;
  if (mma && steps <= kMaxWarps * kUnroll) {
    const int64_t warps = (steps + kUnroll - 1) / kUnroll;
    const int steps_per_warp = static_cast<int>((steps + warps - 1) / warps);
    // Decode-sized batches: a block per tile, for parallelism; larger ones share each block's weights
    // among consecutive tiles.
    const int tiles_per_block = args.num_tiles * kTileRows <= kSharedWeightsMinRows ? 1 : kTilesPerBlock;
    const dim3 mma_grid(static_cast<unsigned>((args.num_tiles + tiles_per_block - 1) / tiles_per_block),
                        static_cast<unsigned>(column_blocks));
    const dim3 block(static_cast<unsigned>(warps * 32));
    if (dtype == DType::kF16)
      moe_gemm_mma_kernel<__half, false><<<mma_grid, block, 0, stream>>>(args, steps_per_warp, tiles_per_block);
    else if (mxfp4)
      moe_gemm_mma_kernel<__nv_bfloat16, true><<<mma_grid, block, 0, stream>>>(args, steps_per_warp, tiles_per_block);
    else
      moe_gemm_mma_kernel<__nv_bfloat16, false><<<mma_grid, block, 0, stream>>>(args, steps_per_warp, tiles_per_block);
    return cudaGetLastError();
  }
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    moe_gemm_fma_kernel<T><<<grid, kTileRows * kTileRows, 0, stream>>>(args);
    return cudaGetLastError();
  });
}

cudaError_t launch_moe_combine(DType dtype, Rows out, Rows y, const int32_t* topk_ids, const float* topk_weights,
                               int64_t top_k, cudaStream_t stream) {
  const int64_t column_blocks = (out.row_size + kCombineThreads - 1) / kCombineThreads;
  if (top_k < 1 || top_k > kMaxCombineSlots || column_blocks > 65535 || out.num_rows > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (out.num_rows == 0 || out.row_size == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(out.num_rows), static_cast<unsigned>(column_blocks));
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    moe_combine_kernel<T><<<grid, kCombineThreads, 0, stream>>>(out, y, topk_ids, topk_weights,
                                                                 static_cast<int>(top_k));
    return cudaGetLastError();
  });
}

}  // namespace pagellm::cuda
