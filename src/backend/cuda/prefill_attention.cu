// The prefill attention kernel: sequences with q_len >= 2 in bf16, on tensor cores.
// (Decode rows have their own kernel in attention.cu; f32, f16 and odd head dims keep the general
// one. f16 is left out because its narrow exponent range flushes the small parts of the P split
// below: measured 24 ulps off on an output near 1e-4.)
//
//   block  = (tile of 64 query rows of one sequence, query head); 4 warps, warp w owns rows
//            [16 w, 16 w + 16) of the tile.
//   keys   = tiles of 64 absolute positions, gathered from the paged cache into shared memory
//            (keys outside the block's visible range are zeros and masked).
//   per key tile, per warp:
//     S = Q K^T        wmma 16x16x16, bf16/f16 inputs (exact products), f32 accumulation;
//     online softmax   lanes (2 per row) mask by the row's own visible range, scale, softcap, and
//                      fold the tile into the running (m, l) of the row in f32;
//     O = O * alpha + P V   P is split into three 16-bit parts (P = hi + mid + lo to ~2^-24 relative),
//                      three wmma products, so the probabilities keep f32 accuracy although the tensor
//                      cores take 16-bit inputs (two parts, ~2^-16, left errors of ~1e-6 that failed
//                      the bf16 tolerance on outputs near zero); O lives in shared memory as f32.
//   A row's result depends only on its own q, its visible keys and the fixed key-tile order, not on
//   which rows share its tile: chunked prefill gives the same bits as prefill in one piece, and a
//   sequence alone the same as in a batch. Fully masked tiles are exact no-ops (alpha = 1, P = 0).
//
// The grid enumerates tiles sequence by sequence; a block finds its (sequence, tile) with a
// block-wide scan of ceil(q_len / 64) over the sequences (q_len == 1 sequences count 0 tiles).
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <mma.h>

#include <cfloat>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/quant_pairs.cuh"  // allow_dynamic_smem

namespace pagellm::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTileRows = 64;
constexpr int kTileKeys = 64;
constexpr int kTileWarps = 4;
constexpr int kTileThreads = kTileWarps * 32;
constexpr int kWarpRows = kTileRows / kTileWarps;  // 16: one wmma tile of rows
static_assert(kWarpRows == 16);

// Eight e4m3 bytes (lo: elements 0-3, hi: 4-7, low byte first) as eight T values, exactly.
template <typename T>
__device__ __forceinline__ uint4 widen_e4m3x8(uint32_t lo, uint32_t hi) {
  alignas(16) T out[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t word = j < 4 ? lo : hi;
    const auto bits = static_cast<__nv_fp8_storage_t>((word >> (8 * (j % 4))) & 0xffu);
    out[j] = from_f32<T>(__half2float(__half(__nv_cvt_fp8_to_halfraw(bits, __NV_E4M3))));
  }
  return *reinterpret_cast<const uint4*>(out);
}

// Shared memory of one block for head dim D. Row pitches keep wmma's rules (16-bit ldm a multiple
// of 8, f32 ldm a multiple of 4, fragment pointers 32-byte aligned) and skew rows across banks.
template <int D>
struct TileSmem {
  static constexpr int kLdh = D + 8;           // Q, K, V rows (16-bit elements)
  static constexpr int kLds = 3 * kTileKeys / 2 + 4;  // scores (f32); the same bytes then hold P hi | mid | lo
  static constexpr int kLdp = 2 * kLds;        // P rows in 16-bit elements
  static constexpr int kLdo = D + 4;           // output accumulators (f32)
  static constexpr int q_bytes = kTileRows * kLdh * 2;
  static constexpr int kv_bytes = kTileKeys * kLdh * 2;
  static constexpr int s_bytes = kTileRows * kLds * 4;
  static constexpr int o_bytes = kTileRows * kLdo * 4;
  static constexpr int row_bytes = kTileRows * 4;  // one float per row (alpha, then 1 / l)
  static constexpr int misc_bytes = 16 * 4;        // the scan's warp totals and the block's tile
  static constexpr int q_off = 0, k_off = q_bytes, v_off = k_off + kv_bytes, s_off = v_off + kv_bytes,
                       o_off = s_off + s_bytes, row_off = o_off + o_bytes, misc_off = row_off + row_bytes;
  static constexpr int total_bytes = misc_off + misc_bytes;
  static_assert(q_bytes % 128 == 0 && kv_bytes % 128 == 0 && s_bytes % 128 == 0 && o_bytes % 128 == 0);
  static_assert(3 * kTileKeys * 2 <= kLds * 4, "P hi | mid | lo must fit in a score row");
};

// kFp8: the caches hold e4m3 bytes (kv_fp8.cuh). Their values go to shared memory as T unscaled
// (every e4m3 value is exact in bf16), and the scales multiply the scores (k_scale, with the softmax
// scale) and the output rows (v_scale): the same products as scaling each element, with the tensor
// cores' bf16 inputs still exact.
template <typename T, int D, bool kFp8>
__global__ void __launch_bounds__(kTileThreads) prefill_kernel(AttentionArgs a) {
  using L = TileSmem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem + L::q_off);
  T* k_s = reinterpret_cast<T*>(smem + L::k_off);
  T* v_s = reinterpret_cast<T*>(smem + L::v_off);
  float* s_s = reinterpret_cast<float*>(smem + L::s_off);
  float* o_s = reinterpret_cast<float*>(smem + L::o_off);
  float* row_s = reinterpret_cast<float*>(smem + L::row_off);
  // No static __shared__: the dynamic window then starts at the block's shared base (aligned).
  int* warp_totals = reinterpret_cast<int*>(smem + L::misc_off);  // [kTileWarps]
  int& found_seq = warp_totals[kTileWarps];
  int& found_tile = warp_totals[kTileWarps + 1];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t tile_id = blockIdx.x, head = blockIdx.y;

  // ----- which (sequence, tile) this block computes
  if (tid == 0) found_seq = -1;
  __syncthreads();
  int64_t tiles_before = 0;
  for (int64_t s0 = 0; s0 < a.num_seqs; s0 += kTileThreads) {
    const int64_t s = s0 + tid;
    int count = 0;
    if (s < a.num_seqs) {
      const int64_t q_len = a.cu_seqlens_q[s + 1] - a.cu_seqlens_q[s];
      count = q_len >= 2 ? static_cast<int>((q_len + kTileRows - 1) / kTileRows) : 0;
    }
    int total = 0;
    const int inclusive = block_inclusive_scan<kTileWarps>(count, warp_totals, total);
    const int64_t first = tiles_before + inclusive - count;
    if (count > 0 && tile_id >= first && tile_id < first + count) {
      found_seq = static_cast<int>(s);
      found_tile = static_cast<int>(tile_id - first);
    }
    tiles_before += total;
    __syncthreads();
    if (found_seq >= 0 || tile_id < tiles_before) break;
  }
  if (found_seq < 0) return;  // past the last tile (the grid is an upper bound)
  const int64_t seq = found_seq;
  const int64_t row_first = a.cu_seqlens_q[seq];
  const int64_t q_len = a.cu_seqlens_q[seq + 1] - row_first;
  const int64_t context_len = a.seq_lens_k[seq];
  const int64_t tile_row0 = static_cast<int64_t>(found_tile) * kTileRows;
  const int64_t rows_in_tile = min(int64_t{kTileRows}, q_len - tile_row0);
  const int64_t first_pos = context_len - q_len + tile_row0;  // absolute position of tile row 0
  const int64_t kv_head = head / (a.num_heads / a.k_layout.num_kv_heads);

  // The block's key range: the union of its rows' visible ranges (rows are consecutive positions).
  const KeyRange first_range = visible_keys(a, context_len, first_pos);
  const KeyRange last_range = visible_keys(a, context_len, first_pos + rows_in_tile - 1);
  const int64_t block_begin = first_range.begin, block_end = max(first_range.end, last_range.end);

  // ----- Q tile and zeroed accumulators
  constexpr int kPieces = D / 8;  // 16-byte pieces per head vector
  const T* q_base = static_cast<const T*>(a.q) + head * a.q_stride_head;
  for (int i = tid; i < kTileRows * kPieces; i += kTileThreads) {
    const int r = i / kPieces, piece = i % kPieces;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < rows_in_tile)
      value = *reinterpret_cast<const uint4*>(q_base + (row_first + tile_row0 + r) * a.q_stride_row + piece * 8);
    *reinterpret_cast<uint4*>(q_s + r * L::kLdh + piece * 8) = value;
  }
  for (int i = tid; i < kTileRows * L::kLdo; i += kTileThreads) o_s[i] = 0.0f;

  // This lane's row (two lanes per row: `half` picks 32 of the tile's 64 keys).
  const int local_row = warp * kWarpRows + lane / 2, half = lane % 2;
  const bool row_valid = local_row < rows_in_tile;
  const KeyRange row_range = visible_keys(a, context_len, first_pos + local_row);
  float run_m = -INFINITY, run_l = 0.0f;

  const int32_t* table = a.block_tables + seq * a.block_table_stride;
  const int64_t block_size = a.k_layout.block_size;
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);
  const uint8_t* k_cache8 = static_cast<const uint8_t*>(a.k_cache);  // kFp8: one byte an element
  const uint8_t* v_cache8 = static_cast<const uint8_t*>(a.v_cache);
  const float score_scale = kFp8 ? a.scale * a.kv_format.k_scale : a.scale;
  const float out_scale = kFp8 ? a.kv_format.v_scale : 1.0f;
  const int64_t key_tile_begin = block_end > block_begin ? block_begin / kTileKeys : 0;
  const int64_t key_tile_end = block_end > block_begin ? (block_end + kTileKeys - 1) / kTileKeys : 0;

  // K/V tiles go global -> registers -> shared memory. For head_dim <= 128 the next tile's loads are
  // issued before this tile's math (register prefetch: 2 x D / 16 16-byte pieces a thread), so their
  // latency hides behind the tensor-core work; head_dim 256 would need 64 more registers and loads
  // its tile at the top of each iteration.
  constexpr bool kPrefetch = D <= 128;
  constexpr int kLoads = kTileKeys * kPieces / kTileThreads;  // 16-byte pieces of K (and of V) a thread
  static_assert(kLoads * kTileThreads == kTileKeys * kPieces);
  uint4 k_regs[kLoads], v_regs[kLoads];
  auto fetch = [&](int64_t key_tile) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int i = tid + u * kTileThreads, j = i / kPieces, piece = i % kPieces;
      const int64_t key = key_tile * kTileKeys + j;
      k_regs[u] = v_regs[u] = make_uint4(0, 0, 0, 0);
      if (key >= block_begin && key < block_end) {
        const int64_t block = table[key / block_size], in_block = key % block_size;
        const int64_t k_off = block * a.k_layout.stride_block + in_block * a.k_layout.stride_slot +
                              kv_head * a.k_layout.stride_head + piece * 8;
        const int64_t v_off = block * a.v_layout.stride_block + in_block * a.v_layout.stride_slot +
                              kv_head * a.v_layout.stride_head + piece * 8;
        if constexpr (kFp8) {  // 8 e4m3 bytes in .x and .y; stash() widens them
          const uint2 k8 = *reinterpret_cast<const uint2*>(k_cache8 + k_off);
          const uint2 v8 = *reinterpret_cast<const uint2*>(v_cache8 + v_off);
          k_regs[u] = make_uint4(k8.x, k8.y, 0, 0);
          v_regs[u] = make_uint4(v8.x, v8.y, 0, 0);
        } else {
          k_regs[u] = *reinterpret_cast<const uint4*>(k_cache + k_off);
          v_regs[u] = *reinterpret_cast<const uint4*>(v_cache + v_off);
        }
      }
    }
  };
  auto stash = [&] {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int i = tid + u * kTileThreads, j = i / kPieces, piece = i % kPieces;
      if constexpr (kFp8) {
        *reinterpret_cast<uint4*>(k_s + j * L::kLdh + piece * 8) = widen_e4m3x8<T>(k_regs[u].x, k_regs[u].y);
        *reinterpret_cast<uint4*>(v_s + j * L::kLdh + piece * 8) = widen_e4m3x8<T>(v_regs[u].x, v_regs[u].y);
      } else {
        *reinterpret_cast<uint4*>(k_s + j * L::kLdh + piece * 8) = k_regs[u];
        *reinterpret_cast<uint4*>(v_s + j * L::kLdh + piece * 8) = v_regs[u];
      }
    }
  };
  if (kPrefetch && key_tile_begin < key_tile_end) fetch(key_tile_begin);

  for (int64_t key_tile = key_tile_begin; key_tile < key_tile_end; ++key_tile) {
    const int64_t key0 = key_tile * kTileKeys;
    if (!kPrefetch) fetch(key_tile);
    __syncthreads();  // every warp is done with the previous K/V tile (and Q / O are initialised)
    stash();
    __syncthreads();
    if (kPrefetch && key_tile + 1 < key_tile_end) fetch(key_tile + 1);  // in flight during the math below

    // S = Q K^T for this warp's 16 rows x 64 keys.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_frag[kTileKeys / 16];
#pragma unroll
      for (int n = 0; n < kTileKeys / 16; ++n) wmma::fill_fragment(s_frag[n], 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> q_frag;
        wmma::load_matrix_sync(q_frag, q_s + warp * kWarpRows * L::kLdh + kk * 16, L::kLdh);
#pragma unroll
        for (int n = 0; n < kTileKeys / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> k_frag;  // K^T: K rows are columns
          wmma::load_matrix_sync(k_frag, k_s + n * 16 * L::kLdh + kk * 16, L::kLdh);
          wmma::mma_sync(s_frag[n], q_frag, k_frag, s_frag[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kTileKeys / 16; ++n)
        wmma::store_matrix_sync(s_s + warp * kWarpRows * L::kLds + n * 16, s_frag[n], L::kLds, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of the row's 64 scores (this lane: keys half*32 .. half*32 + 31).
    float score[32];
    float tile_max = -INFINITY;
    const float* s_row = s_s + local_row * L::kLds + half * 32;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int64_t key = key0 + half * 32 + i;
      float x = -INFINITY;
      if (row_valid && key >= row_range.begin && key < row_range.end) {
        x = s_row[i] * score_scale;
        if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
      }
      score[i] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    const float m_new = fmaxf(run_m, tile_max);
    // alpha rescales what the row holds: 0 while it holds nothing, 1 when this tile adds nothing.
    const float alpha = run_m == -INFINITY ? 0.0f : (tile_max == -INFINITY ? 1.0f : expf(run_m - m_new));
    __syncwarp();  // every lane has read its scores before P overwrites them
    T* p_hi = reinterpret_cast<T*>(s_s + local_row * L::kLds);
    T* p_mid = p_hi + kTileKeys;
    T* p_lo = p_mid + kTileKeys;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const float p = score[i] == -INFINITY ? 0.0f : expf(score[i] - m_new);
      sum += p;
      const T hi = from_f32<T>(p);
      const float rest = p - to_f32(hi);  // exact in f32
      const T mid = from_f32<T>(rest);
      p_hi[half * 32 + i] = hi;
      p_mid[half * 32 + i] = mid;
      p_lo[half * 32 + i] = from_f32<T>(rest - to_f32(mid));
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    run_l = run_l * alpha + sum;
    if (tile_max != -INFINITY) run_m = m_new;
    if (half == 0) row_s[local_row] = alpha;
    __syncwarp();

    // O = O * alpha + (P_hi + P_mid + P_lo) V for the warp's rows.
    float* o_warp = o_s + warp * kWarpRows * L::kLdo;
    for (int i = lane; i < kWarpRows * D; i += 32) {
      const int r = i / D, d = i % D;
      o_warp[r * L::kLdo + d] *= row_s[warp * kWarpRows + r];
    }
    __syncwarp();
    {
      const T* p_warp = reinterpret_cast<const T*>(s_s + warp * kWarpRows * L::kLds);
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> p_frag[3][kTileKeys / 16];
#pragma unroll
      for (int part = 0; part < 3; ++part)
#pragma unroll
        for (int kk = 0; kk < kTileKeys / 16; ++kk)
          wmma::load_matrix_sync(p_frag[part][kk], p_warp + part * kTileKeys + kk * 16, L::kLdp);
#pragma unroll 2
      for (int n = 0; n < D / 16; ++n) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag;
        wmma::load_matrix_sync(o_frag, o_warp + n * 16, L::kLdo, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < kTileKeys / 16; ++kk) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> v_frag;
          wmma::load_matrix_sync(v_frag, v_s + kk * 16 * L::kLdh + n * 16, L::kLdh);
          wmma::mma_sync(o_frag, p_frag[0][kk], v_frag, o_frag);
          wmma::mma_sync(o_frag, p_frag[1][kk], v_frag, o_frag);
          wmma::mma_sync(o_frag, p_frag[2][kk], v_frag, o_frag);
        }
        wmma::store_matrix_sync(o_warp + n * 16, o_frag, L::kLdo, wmma::mem_row_major);
      }
    }
    __syncwarp();
  }

  // ----- out = O / l (a row that saw no key is written as zeros, as the other kernels do)
  __syncwarp();
  if (half == 0) row_s[local_row] = run_l > 0.0f ? row_output_scale(a, head, run_m, run_l) : 0.0f;
  __syncwarp();
  const float* o_warp = o_s + warp * kWarpRows * L::kLdo;
  for (int i = lane; i < kWarpRows * D; i += 32) {
    const int r = i / D, d = i % D;
    const int64_t tile_row = warp * kWarpRows + r;
    if (tile_row >= rows_in_tile) continue;
    const int64_t out_offset = (row_first + tile_row0 + tile_row) * a.out_stride_row + head * a.out_stride_head + d;
    const float inv_l = row_s[tile_row];
    const float value = inv_l > 0.0f ? o_warp[r * L::kLdo + d] * inv_l * out_scale : 0.0f;
    switch (a.out_dtype) {
      case DType::kBF16: static_cast<__nv_bfloat16*>(a.out)[out_offset] = __float2bfloat16_rn(value); break;
      case DType::kF16: static_cast<__half*>(a.out)[out_offset] = __float2half_rn(value); break;
      default: static_cast<float*>(a.out)[out_offset] = value; break;
    }
  }
}

template <typename T, int D, bool kFp8>
cudaError_t run_prefill(const AttentionArgs& a, cudaStream_t stream) {
  constexpr int smem = TileSmem<D>::total_bytes;
  static std::atomic<uint64_t> raised{0};  // per device: each GPU of a process needs its own
  const cudaError_t attribute = allow_dynamic_smem(prefill_kernel<T, D, kFp8>, smem, raised);
  if (attribute != cudaSuccess) return attribute;
  // Tiles: sum over sequences of ceil(q_len / 64) <= num_tokens / 64 + num_seqs.
  const int64_t max_tiles = (a.num_tokens + kTileRows - 1) / kTileRows + a.num_seqs;
  const dim3 grid(static_cast<unsigned>(max_tiles), static_cast<unsigned>(a.num_heads));
  prefill_kernel<T, D, kFp8><<<grid, kTileThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, bool kFp8>
cudaError_t dispatch_head_dim(const AttentionArgs& a, cudaStream_t stream) {
  switch (a.k_layout.head_dim) {
    case 16: return run_prefill<T, 16, kFp8>(a, stream);
    case 32: return run_prefill<T, 32, kFp8>(a, stream);
    case 64: return run_prefill<T, 64, kFp8>(a, stream);
    case 128: return run_prefill<T, 128, kFp8>(a, stream);
    case 256: return run_prefill<T, 256, kFp8>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

int64_t prefill_attention_smem_bytes(int64_t head_dim) {
  switch (head_dim) {
    case 16: return TileSmem<16>::total_bytes;
    case 32: return TileSmem<32>::total_bytes;
    case 64: return TileSmem<64>::total_bytes;
    case 128: return TileSmem<128>::total_bytes;
    case 256: return TileSmem<256>::total_bytes;
    default: return 0;
  }
}

cudaError_t launch_prefill_attention(DType dtype, const AttentionArgs& args, cudaStream_t stream) {
  if (args.num_tokens == 0 || args.num_seqs == 0) return cudaSuccess;
  if (dtype != DType::kBF16) return cudaErrorInvalidValue;
  if (args.kv_format.cache_dtype == DType::kF8E4M3) return dispatch_head_dim<__nv_bfloat16, true>(args, stream);
  if (args.kv_format.cache_dtype != DType::kBF16) return cudaErrorInvalidValue;
  return dispatch_head_dim<__nv_bfloat16, false>(args, stream);
}

}  // namespace pagellm::cuda
