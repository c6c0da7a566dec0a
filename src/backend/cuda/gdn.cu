// The hybrid-model kernels (Qwen3.5 / Qwen3-Next): the Gated DeltaNet ops gdn_conv1d and
// gdn_delta_rule, the GDN output norm gated_rms_norm, the attention output gate sigmoid_mul and the
// MoE combine add_rows_scaled. CPU twins: backend/cpu/gdn.cpp and cpu_backend.cpp; same rounding
// points (products the CPU rounds separately use __fmul_rn / __fadd_rn so nvcc cannot fuse them).
//
// Varlen batches (GdnSeqs): sequence s owns token rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) and the
// state slot state_slots[s]; it reads the slot, then leaves its final state there. Padding rows of a
// graph bucket all name one scratch slot: what lands there is never read for a real request.
#include <cfloat>
#include <cstdlib>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/quant_pairs.cuh"  // allow_dynamic_smem, cp_async

namespace pagellm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The sequence owning token row t: the last s with cu[s] <= t (zero-length sequences skipped).
__device__ __forceinline__ int64_t sequence_of(const int32_t* cu, int64_t num_seqs, int64_t t) {
  int64_t lo = 0, hi = num_seqs;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (cu[mid] <= t) lo = mid;
    else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ int64_t checked_slot(const GdnSeqs& seqs, int64_t s) {
  const int32_t slot = seqs.state_slots[s];
  if (slot < 0 || slot >= seqs.num_slots) __trap();  // validated before it reaches the device
  return slot;
}

// The checkpoint slot of token row t, or -1 (none asked, or none for this row).
__device__ __forceinline__ int64_t checkpoint_slot(const GdnSeqs& seqs, int64_t t) {
  if (seqs.checkpoint_slots == nullptr) return -1;
  const int32_t slot = seqs.checkpoint_slots[t];
  if (slot >= seqs.num_slots) __trap();
  return slot;
}

// ----- gdn_conv1d -------------------------------------------------------------------------------
// Two kernels: the outputs (one thread per (kConvRows token rows, channel), reading the slot's old
// state for the first K-1 rows of a sequence), then the state update (one thread per (sequence,
// channel)), so no thread writes a state another still reads. Batches of as many rows as sequences
// (decode) take one kernel instead, one thread per (sequence, channel) walking its rows: a decode
// step's GDN layer launches one kernel less, with the same arithmetic in the same order.

// The rows a thread of the two-kernel form computes: the sequence lookup (a binary search of
// dependent loads) is paid once per run of rows instead of per row, and the rows' inputs are loaded
// together up front. (One row a thread ran ~100 waves of latency-bound blocks for 8 x 512 tokens of
// the Qwen3.5-0.8B shape: 288 us a layer on an H100.)
constexpr int kConvRows = 16;

// The sequence of token row t given the sequence s of an earlier row (cu[s] <= t): advanced past the
// sequences that end at or before t (zero-length ones included).
__device__ __forceinline__ int64_t advance_sequence(const int32_t* cu, int64_t s, int64_t t) {
  while (t >= cu[s + 1]) ++s;
  return s;
}

// Thread (kConvRows token rows from t0, channel): x rows [t0 - (K-1), t0 + kConvRows) in registers,
// then each row's sum w[j] * u[i + j] (j ascending, from 0) over u = [state | the sequence's x].
template <typename T>
__global__ void gdn_conv1d_out_kernel(Rows out, Rows x, const T* __restrict__ weight, const T* __restrict__ state,
                                      GdnSeqs seqs, int64_t channels, int kernel) {
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kConvRows;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const int64_t num_tokens = seqs.cu_seqlens_q[seqs.num_seqs];
  if (c >= channels || t0 >= num_tokens) return;
  const int history = kernel - 1;
  float w_f32[kMaxGdnConvKernel];
  T xs[kConvRows + kMaxGdnConvKernel - 1];  // xs[m] = x row t0 - history + m
#pragma unroll
  for (int j = 0; j < kMaxGdnConvKernel; ++j)
    if (j < kernel) w_f32[j] = to_f32(weight[c * kernel + j]);
#pragma unroll
  for (int m = 0; m < kConvRows + kMaxGdnConvKernel - 1; ++m) {
    const int64_t row = t0 - history + m;
    xs[m] = m < kConvRows + history && row >= 0 && row < num_tokens ? row_ptr<const T>(x, row)[c] : from_f32<T>(0.0f);
  }
  int64_t s = sequence_of(seqs.cu_seqlens_q, seqs.num_seqs, t0);
#pragma unroll
  for (int r = 0; r < kConvRows; ++r) {
    const int64_t t = t0 + r;
    if (t >= num_tokens) break;
    s = advance_sequence(seqs.cu_seqlens_q, s, t);
    const int64_t i = t - seqs.cu_seqlens_q[s];
    const T* st = i < history ? state + (checked_slot(seqs, s) * channels + c) * history : nullptr;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxGdnConvKernel; ++j) {
      if (j >= kernel) break;
      const float value = i + j < history ? to_f32(st[i + j]) : to_f32(xs[r + j]);  // x row t + j - history
      acc = __fadd_rn(acc, __fmul_rn(w_f32[j], value));
    }
    row_ptr<T>(out, t)[c] = from_f32<T>(silu(round_to<T>(acc)));
  }
}

// Prefix-cache checkpoints: thread (kConvRows token rows, channel) copies, for each of its rows t that
// has a checkpoint slot, the last K-1 of u after t to that slot. Runs between the output and state
// kernels (reads the old state, as the outputs do).
template <typename T>
__global__ void gdn_conv1d_checkpoint_kernel(Rows x, T* __restrict__ state, GdnSeqs seqs, int64_t channels,
                                             int kernel) {
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kConvRows;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const int64_t num_tokens = seqs.cu_seqlens_q[seqs.num_seqs];
  if (c >= channels || t0 >= num_tokens) return;
  const int64_t history = kernel - 1;
  int64_t s = -1;
  for (int r = 0; r < kConvRows; ++r) {
    const int64_t t = t0 + r;
    if (t >= num_tokens) break;
    const int64_t target = checkpoint_slot(seqs, t);
    if (target < 0) continue;
    s = s < 0 ? sequence_of(seqs.cu_seqlens_q, seqs.num_seqs, t) : advance_sequence(seqs.cu_seqlens_q, s, t);
    const int64_t first = seqs.cu_seqlens_q[s];
    const T* st = state + (checked_slot(seqs, s) * channels + c) * history;
    T* dst = state + (target * channels + c) * history;
    for (int64_t m = 0; m < history; ++m) {  // u[t - first + 1 + m]
      const int64_t u = t - first + 1 + m;
      dst[m] = u < history ? st[u] : row_ptr<const T>(x, first + u - history)[c];
    }
  }
}

// Thread (sequence, channel): the outputs of the sequence's rows in order, u's last K-1 in registers,
// then the state. Same sums as gdn_conv1d_out_kernel (w[j] * u[i + j], j ascending, from 0).
template <typename T>
__global__ void gdn_conv1d_rows_kernel(Rows out, Rows x, const T* __restrict__ weight, T* __restrict__ state,
                                       GdnSeqs seqs, int64_t channels, int kernel) {
  const int64_t s = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (c >= channels) return;
  const int64_t first = seqs.cu_seqlens_q[s], length = seqs.cu_seqlens_q[s + 1] - first;
  const int history = kernel - 1;
  if (length <= 0) return;
  T* st = state + (checked_slot(seqs, s) * channels + c) * history;
  const T* w = weight + c * kernel;
  float w_f32[kMaxGdnConvKernel];
  T window[kMaxGdnConvKernel];  // the last K-1 of u before the current row
#pragma unroll
  for (int j = 0; j < kMaxGdnConvKernel; ++j) {
    if (j < kernel) w_f32[j] = to_f32(w[j]);
    if (j < history) window[j] = st[j];
  }
  for (int64_t i = 0; i < length; ++i) {
    const T x_i = row_ptr<const T>(x, first + i)[c];
    // Indices known at compile time only (the arrays stay in registers): j < history reads the
    // window, j == history the row itself.
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxGdnConvKernel; ++j) {
      if (j < history) acc = __fadd_rn(acc, __fmul_rn(w_f32[j], to_f32(window[j])));
      else if (j == history) acc = __fadd_rn(acc, __fmul_rn(w_f32[j], to_f32(x_i)));
    }
    row_ptr<T>(out, first + i)[c] = from_f32<T>(silu(round_to<T>(acc)));
#pragma unroll
    for (int j = 0; j < kMaxGdnConvKernel - 1; ++j) {
      if (j + 1 < history) window[j] = window[j + 1];
      else if (j + 1 == history) window[j] = x_i;
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxGdnConvKernel - 1; ++j)
    if (j < history) st[j] = window[j];
}

template <typename T>
__global__ void gdn_conv1d_state_kernel(Rows x, T* __restrict__ state, GdnSeqs seqs, int64_t channels, int kernel) {
  const int64_t s = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (c >= channels) return;
  const int64_t first = seqs.cu_seqlens_q[s], length = seqs.cu_seqlens_q[s + 1] - first, history = kernel - 1;
  if (length <= 0) return;
  T* st = state + (checked_slot(seqs, s) * channels + c) * history;
  T kept[kMaxGdnConvKernel];  // the last K-1 of u = [state | x]: read all before writing any
#pragma unroll
  for (int m = 0; m < kMaxGdnConvKernel - 1; ++m) {
    if (m >= history) break;
    const int64_t u = length + m;
    kept[m] = u < history ? st[u] : row_ptr<const T>(x, first + u - history)[c];
  }
#pragma unroll
  for (int m = 0; m < kMaxGdnConvKernel - 1; ++m) {
    if (m >= history) break;
    st[m] = kept[m];
  }
}

// ----- gdn_delta_rule ---------------------------------------------------------------------------
// Two kernels share a varlen batch by sequence length: sequences shorter than `chunked_from` tokens
// take the recurrent kernel, the others the chunked one (each kernel's blocks of the other's
// sequences return at once).
//
// The recurrent form (B.9): block (sequence, value head, 32-column tile of dv), 4 warps. Lane l owns column j = tile * 32 + l of S [dk, dv]; warp w owns rows w, w + 4, ...
// of that column, R of them in registers (dk <= 4 R). Per token: S *= e^g; m = S^T k (a column dot,
// partial per warp, summed through shared memory); d = beta (v - m); S += k d^T; o = S^T q likewise.
// Tokens are prepared kDeltaTokens at a time: normalised q and k, e^g, beta and the tile of v in
// shared memory.

constexpr int kDeltaWarps = 4;
constexpr int kDeltaTokens = 16;

template <typename T, int R>
__global__ void __launch_bounds__(kDeltaWarps * 32) gdn_delta_rule_kernel(GdnDeltaArgs a, int64_t chunked_from) {
  extern __shared__ float qk_shared[];  // q [kDeltaTokens][dk], then k [kDeltaTokens][dk]
  __shared__ float decay_s[kDeltaTokens], beta_s[kDeltaTokens], v_s[kDeltaTokens][32];
  __shared__ float red_m[kDeltaWarps][32], red_o[kDeltaWarps][32];
  const int64_t s = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t dk = a.dk, dv = a.dv;
  const int64_t j = static_cast<int64_t>(blockIdx.z) * 32 + lane;
  const bool column = j < dv;
  const int64_t first = a.seqs.cu_seqlens_q[s], length = a.seqs.cu_seqlens_q[s + 1] - first;
  if (length <= 0 || length >= chunked_from) return;  // uniform over the block
  const int64_t kh = h / (a.num_v_heads / a.num_k_heads);
  float* S = a.state + (checked_slot(a.seqs, s) * a.num_v_heads + h) * dk * dv;
  float st[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int64_t r = warp + kDeltaWarps * i;
    st[i] = r < dk && column ? S[r * dv + j] : 0.0f;
  }
  float* qs = qk_shared;
  float* ks = qk_shared + kDeltaTokens * dk;
  const float neg_a = -expf(a.a_log[h]), dt_bias = a.dt_bias[h];
  for (int64_t c0 = 0; c0 < length; c0 += kDeltaTokens) {
    const int n = static_cast<int>(length - c0 < kDeltaTokens ? length - c0 : kDeltaTokens);
    __syncthreads();  // the previous pass has read the shared tokens
    for (int i = warp; i < n; i += kDeltaWarps) {
      const int64_t t = first + c0 + i;
      const T* q_row = row_ptr<const T>(a.q, t * a.num_k_heads + kh);
      const T* k_row = row_ptr<const T>(a.k, t * a.num_k_heads + kh);
      float sq = 0.0f, sk = 0.0f;
      for (int64_t d = lane; d < dk; d += 32) {
        const float qv = to_f32(q_row[d]), kv = to_f32(k_row[d]);
        qs[i * dk + d] = qv;
        ks[i * dk + d] = kv;
        sq += qv * qv;
        sk += kv * kv;
      }
      sq = warp_sum(sq);
      sk = warp_sum(sk);
      const float q_inv = 1.0f / sqrtf(sq + 1e-6f), k_inv = 1.0f / sqrtf(sk + 1e-6f);
      for (int64_t d = lane; d < dk; d += 32) {  // this lane's own elements
        qs[i * dk + d] = __fmul_rn(__fmul_rn(qs[i * dk + d], q_inv), a.q_scale);
        ks[i * dk + d] = __fmul_rn(ks[i * dk + d], k_inv);
      }
      v_s[i][lane] = column ? to_f32(row_ptr<const T>(a.v, t * a.num_v_heads + h)[j]) : 0.0f;
      if (lane == 0) {
        const float x = __fadd_rn(to_f32(row_ptr<const T>(a.a, t)[h]), dt_bias);
        const float softplus = x > 20.0f ? x : log1pf(expf(x));
        decay_s[i] = expf(__fmul_rn(neg_a, softplus));
        beta_s[i] = round_to<T>(sigmoid(to_f32(row_ptr<const T>(a.b, t)[h])));
      }
    }
    __syncthreads();
    for (int i = 0; i < n; ++i) {
      const float* kq = ks + i * dk;
      const float* qq = qs + i * dk;
      const float decay = decay_s[i];
      float m = 0.0f;
#pragma unroll
      for (int ii = 0; ii < R; ++ii) {
        const int64_t r = warp + kDeltaWarps * ii;
        if (r < dk) {
          st[ii] = __fmul_rn(st[ii], decay);
          m = fmaf(st[ii], kq[r], m);
        }
      }
      red_m[warp][lane] = m;
      __syncthreads();
      m = red_m[0][lane];
#pragma unroll
      for (int w = 1; w < kDeltaWarps; ++w) m += red_m[w][lane];
      const float delta = __fmul_rn(v_s[i][lane] - m, beta_s[i]);
      float o = 0.0f;
#pragma unroll
      for (int ii = 0; ii < R; ++ii) {
        const int64_t r = warp + kDeltaWarps * ii;
        if (r < dk) {
          st[ii] = fmaf(kq[r], delta, st[ii]);
          o = fmaf(st[ii], qq[r], o);
        }
      }
      red_o[warp][lane] = o;
      __syncthreads();
      if (warp == 0 && column) {
        o = red_o[0][lane];
#pragma unroll
        for (int w = 1; w < kDeltaWarps; ++w) o += red_o[w][lane];
        row_ptr<T>(a.out, (first + c0 + i) * a.num_v_heads + h)[j] = from_f32<T>(o);
      }
      const int64_t target = checkpoint_slot(a.seqs, first + c0 + i);  // uniform over the block
      if (target >= 0) {
        float* D = a.state + (target * a.num_v_heads + h) * dk * dv;
#pragma unroll
        for (int ii = 0; ii < R; ++ii) {
          const int64_t r = warp + kDeltaWarps * ii;
          if (r < dk && column) D[r * dv + j] = st[ii];
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int64_t r = warp + kDeltaWarps * i;
    if (r < dk && column) S[r * dv + j] = st[i];
  }
}

// The chunked form (B.10; formulas in backend/cpu/gdn.h) in two kernels. Per chunk of C = 64 tokens
// (the CPU's chunk boundaries) and value head, with gamma = cumsum(g) within the chunk:
//   A[t,s] = beta_t (k_t . k_s) e^(gamma_t - gamma_s)  (s < t)   P[t,s] = (q_t . k_s) e^(gamma_t - gamma_s)  (s <= t)
//   Tinv = (I + A)^-1
//   X = Tinv (diag(beta) V - diag(beta e^gamma) K S)       (V' of gdn.h: U - W S, grouped another way)
//   O = diag(e^gamma) Q S + P X
//   S <- e^gamma_L S + K^T diag(e^(gamma_L - gamma)) X
// Only X, O and S depend on the state S entering the chunk. So the prep kernel computes, for every
// chunk of every sequence at once (block per (chunk, value head)), what does not: Tinv (the
// triangular solve against the identity), P, e^gamma, e^(gamma_L - gamma), beta and the rows'
// inverse norms, into a scratch. The scan kernel then walks each sequence's chunks in order (block per
// (sequence, value head, 16-column tile of dv), the tile of S [dk, 16] f32 in shared memory) doing
// only products. (One kernel doing all of it per chunk in sequence ran the solve, the loads and the
// A/P products on the path of every chunk, and recomputed A and P for every column tile: 0.58 ms a
// layer for a 512-token prompt of the Qwen3.5-0.8B shape on an H200, with 64 blocks for 132 SMs.)
// Every exponent is <= 0 (g <= 0), so nothing overflows. Rows past the chunk's n tokens are zero in
// q, k, X, A and P, so the fixed 64-row loops need no other masking.
// Thread maps of the prep (lane = threadIdx % 32, warp = threadIdx / 32; the scan's are at its kernel):
//   token rows   t = warp + 8m (m < 8): q, k and a, b loads, A, P (the scan loads q and k as
//                t = warp + 16m over its 16 warps)
//   A, P         columns s = lane + 32i (i < 2)
//   solve        16-row blocks: the rows below the block from all warps, the block itself by warps 0, 1
// q and k rows are padded to dk + 4 floats: 16-byte rows for float4 reads, and the lanes' float4
// reads of 8 consecutive rows hit distinct banks when dk % 8 == 0.

constexpr int kChunkTokens = 64;  // C, as the CPU's kGdnChunkSize
constexpr int kScanCols = 16;     // value columns per scan block
constexpr int kScanWarps = 16;
constexpr int kScanThreads = kScanWarps * 32;
constexpr int kScanRowGroups = kScanThreads / kScanCols;      // threads per column: 32
constexpr int kScanRows = 64 / kScanRowGroups;                // token rows per thread: 2
constexpr int kChunkWarps = 8;
constexpr int kChunkThreads = kChunkWarps * 32;
constexpr int kChunkRowsPerWarp = kChunkTokens / kChunkWarps;  // 8
constexpr int kChunkMaxDk = 4 * 32;                             // the S update map covers 4 x 32 rows
constexpr int kLaneDims = kChunkMaxDk / 32;                     // q/k elements a lane loads per row
constexpr int kSolveBlock = 16;
constexpr int64_t kChunkedMinTokens = 16;  // default routing threshold (GdnDeltaArgs::auto_chunked_min_tokens)
static_assert(kChunkTokens % kChunkWarps == 0 && kChunkTokens % kSolveBlock == 0 && kChunkTokens == 2 * 32);
static_assert(kScanRowGroups * kScanCols == kScanThreads && kChunkMaxDk == 4 * kScanRowGroups, "the scan's maps");

// The prep kernel's output per (chunk, value head), floats, in this order (the scan copies it whole):
// Tinv [C][C] (rows past n: identity), P [C][C], e^gamma, e^(gamma_L - gamma), beta, q_inv, k_inv [C].
constexpr int kScratchTinv = 0, kScratchP = kChunkTokens * kChunkTokens, kScratchEg = 2 * kChunkTokens * kChunkTokens;
constexpr int kScratchTail = kScratchEg + kChunkTokens, kScratchBeta = kScratchTail + kChunkTokens;
constexpr int kScratchQinv = kScratchBeta + kChunkTokens, kScratchKinv = kScratchQinv + kChunkTokens;
constexpr int kScratchFloats = kScratchKinv + kChunkTokens;
static_assert(kScratchFloats % 4 == 0, "copied as 16-byte pieces");

// Shared memory (floats; every array starts 16-byte aligned when dk % 4 == 0).
// prep: q, k [C][dk + 4]; A [C][C]; the solve's columns [C][C]; gamma, beta [C].
// scan: two chunks' scratch (this one's, the next one's in flight); q, k [C][dk + 4]; S tile [dk][16];
// right-hand side and X [C][16] each.
__host__ __device__ constexpr int64_t chunk_prep_smem_floats(int64_t dk) {
  return 2 * kChunkTokens * (dk + 4) + 2 * kChunkTokens * kChunkTokens + 2 * kChunkTokens;
}
__host__ __device__ constexpr int64_t chunk_scan_smem_floats(int64_t dk) {
  return 2 * kScratchFloats + 2 * kChunkTokens * (dk + 4) + dk * kScanCols + 2 * kChunkTokens * kScanCols;
}

// 3xTF32 on the tensor cores (mma.sync m16n8k8): x = hi + lo with hi = tf32(x), lo = tf32(x - hi),
// and a b ~ a_lo b_hi + a_hi b_lo + a_hi b_hi (the small terms first), f32 accumulation: about
// f32's accuracy (the dropped a_lo b_lo is ~2^-22 of the product) at a fraction of the shared-memory
// reads of SIMT dot products.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
  const float rest = x - __uint_as_float(hi);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(rest));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One warp's 16 x 8 tile of A B, A rows [m0, m0 + 16) of a row-major [.][lda] array, B columns
// [n0, n0 + 8) of a row-major [depth][ldb] array, over depth (a multiple of 8), into c (the mma's
// accumulator map: rows g, g + 8 and columns 2 tig, 2 tig + 1, g = lane / 4, tig = lane % 4).
__device__ __forceinline__ void warp_tile_3xtf32(float (&c)[4], const float* A, int lda, int m0, const float* B, int ldb,
                                                 int n0, int depth, int lane) {
  const int g = lane >> 2, tig = lane & 3;
  const float* a_row0 = A + (m0 + g) * lda + tig;
  const float* a_row8 = a_row0 + 8 * lda;
  const float* b_col = B + tig * ldb + n0 + g;
  for (int k0 = 0; k0 < depth; k0 += 8) {
    uint32_t a_hi[4], a_lo[4], b_hi[2], b_lo[2];
    split_tf32(a_row0[k0], a_hi[0], a_lo[0]);
    split_tf32(a_row8[k0], a_hi[1], a_lo[1]);
    split_tf32(a_row0[k0 + 4], a_hi[2], a_lo[2]);
    split_tf32(a_row8[k0 + 4], a_hi[3], a_lo[3]);
    split_tf32(b_col[k0 * ldb], b_hi[0], b_lo[0]);
    split_tf32(b_col[(k0 + 4) * ldb], b_hi[1], b_lo[1]);
    mma_tf32(c, a_lo, b_hi);
    mma_tf32(c, a_hi, b_lo);
    mma_tf32(c, a_hi, b_hi);
  }
}

__device__ __forceinline__ float dot4(float4 x, float4 y, float acc) {
  acc = fmaf(x.x, y.x, acc);
  acc = fmaf(x.y, y.y, acc);
  acc = fmaf(x.z, y.z, acc);
  return fmaf(x.w, y.w, acc);
}

__device__ __forceinline__ bool takes_chunked(int64_t length, int64_t chunked_from) {
  return length > 0 && length >= chunked_from;
}
// Chunks of sequence i in the scratch (0 for a sequence left to the recurrent kernel).
__device__ __forceinline__ int64_t chunks_of(const GdnSeqs& seqs, int64_t i, int64_t chunked_from) {
  const int64_t length = seqs.cu_seqlens_q[i + 1] - seqs.cu_seqlens_q[i];
  return takes_chunked(length, chunked_from) ? (length + kChunkTokens - 1) / kChunkTokens : 0;
}
// Chunks of the sequences before s: s's first chunk in the scratch.
__device__ __forceinline__ int64_t chunks_before(const GdnSeqs& seqs, int64_t s, int64_t chunked_from) {
  int64_t total = 0;
  for (int64_t i = 0; i < s; ++i) total += chunks_of(seqs, i, chunked_from);
  return total;
}

// A chunk's raw q and k rows (n rows from token row `row0`, key head kh), this warp's rows t = warp + 8m,
// this lane's dims d = lane + 32e, all loads in flight at once; zeros past n and dk.
template <typename T, int kWarps>
__device__ __forceinline__ void load_chunk_qk(const GdnDeltaArgs& a, int64_t row0, int n, int64_t kh, int warp, int lane,
                                              float (&qv)[kChunkTokens / kWarps][kLaneDims],
                                              float (&kv)[kChunkTokens / kWarps][kLaneDims]) {
#pragma unroll
  for (int m = 0; m < kChunkTokens / kWarps; ++m) {
    const int t = warp + kWarps * m;
    const T* q_row = t < n ? row_ptr<const T>(a.q, (row0 + t) * a.num_k_heads + kh) : nullptr;
    const T* k_row = t < n ? row_ptr<const T>(a.k, (row0 + t) * a.num_k_heads + kh) : nullptr;
#pragma unroll
    for (int e = 0; e < kLaneDims; ++e) {
      const int d = lane + 32 * e;
      const bool ok = t < n && d < a.dk;
      qv[m][e] = ok ? to_f32(q_row[d]) : 0.0f;
      kv[m][e] = ok ? to_f32(k_row[d]) : 0.0f;
    }
  }
}

// q and k rows as the recurrent kernel prepares them: q * q_inv * q_scale, k * k_inv, into shared rows.
__device__ __forceinline__ void store_normalised_row(float* qi, float* ki, const float (&qv)[kLaneDims],
                                                     const float (&kv)[kLaneDims], float q_inv, float k_inv, float q_scale,
                                                     int dk, int lane) {
#pragma unroll
  for (int e = 0; e < kLaneDims; ++e) {
    const int d = lane + 32 * e;
    if (d < dk) {
      qi[d] = __fmul_rn(__fmul_rn(qv[e], q_inv), q_scale);
      ki[d] = __fmul_rn(kv[e], k_inv);
    }
  }
}

// Block (chunk of the batch, value head); blocks past the batch's chunks return.
template <typename T>
__global__ void __launch_bounds__(kChunkThreads, 1) gdn_chunk_prep_kernel(GdnDeltaArgs a, int64_t chunked_from) {
  extern __shared__ __align__(16) float chunk_shared[];
  constexpr int C = kChunkTokens;
  const int64_t h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int dk = static_cast<int>(a.dk);  // <= kChunkMaxDk and % 8 == 0: the launcher checks
  const int ks = dk + 4;                  // q, k row stride (floats)
  // This block's sequence and chunk (uniform over the block).
  int64_t seq = -1, c0 = 0, base = 0;
  for (int64_t i = 0; i < a.seqs.num_seqs; ++i) {
    const int64_t chunks = chunks_of(a.seqs, i, chunked_from);
    if (static_cast<int64_t>(blockIdx.x) < base + chunks) {
      seq = i;
      c0 = (blockIdx.x - base) * C;
      break;
    }
    base += chunks;
  }
  if (seq < 0) return;
  const int64_t first = a.seqs.cu_seqlens_q[seq], length = a.seqs.cu_seqlens_q[seq + 1] - first;
  const int n = static_cast<int>(length - c0 < C ? length - c0 : C);  // tokens in this chunk
  const int64_t kh = h / (a.num_v_heads / a.num_k_heads);
  float* out = a.chunk_scratch + (static_cast<int64_t>(blockIdx.x) * a.num_v_heads + h) * kScratchFloats;

  float* qs = chunk_shared;           // [C][ks] normalised, scaled q
  float* kks = qs + C * ks;           // [C][ks] normalised k
  float* attn = kks + C * ks;         // [C][C] A (strictly lower)
  float* xs = attn + C * C;           // [C][C] the solve's columns
  float* gamma_s = xs + C * C;        // [C] g, then its cumsum
  float* beta_s = gamma_s + C;        // [C]

  // (1) The chunk's tokens: every load of the warp's 8 rows at once, then the norms row by row.
  {
    float qv[kChunkRowsPerWarp][kLaneDims], kv[kChunkRowsPerWarp][kLaneDims], av[kChunkRowsPerWarp],
        bv[kChunkRowsPerWarp];
    load_chunk_qk<T, kChunkWarps>(a, first + c0, n, kh, warp, lane, qv, kv);
#pragma unroll
    for (int m = 0; m < kChunkRowsPerWarp; ++m) {
      const int t = warp + kChunkWarps * m;
      const bool ok = t < n && lane == 0;
      av[m] = ok ? to_f32(row_ptr<const T>(a.a, first + c0 + t)[h]) : 0.0f;
      bv[m] = ok ? to_f32(row_ptr<const T>(a.b, first + c0 + t)[h]) : 0.0f;
    }
    const float neg_a = -expf(a.a_log[h]), dt_bias = a.dt_bias[h];
#pragma unroll
    for (int m = 0; m < kChunkRowsPerWarp; ++m) {
      const int t = warp + kChunkWarps * m;
      float* qi = qs + t * ks;
      float* ki = kks + t * ks;
      float sq = 0.0f, sk = 0.0f;
#pragma unroll
      for (int e = 0; e < kLaneDims; ++e) {  // ascending d within the lane, as the recurrent kernel
        sq += qv[m][e] * qv[m][e];
        sk += kv[m][e] * kv[m][e];
      }
      sq = warp_sum(sq);
      sk = warp_sum(sk);
      const float q_inv = 1.0f / sqrtf(sq + 1e-6f), k_inv = 1.0f / sqrtf(sk + 1e-6f);
      store_normalised_row(qi, ki, qv[m], kv[m], q_inv, k_inv, a.q_scale, dk, lane);  // zeros past n
      if (lane == 0) {
        float g = 0.0f, beta = 0.0f;
        if (t < n) {
          const float x = __fadd_rn(av[m], dt_bias);
          const float softplus = x > 20.0f ? x : log1pf(expf(x));
          g = __fmul_rn(neg_a, softplus);  // g_t, summed below
          beta = round_to<T>(sigmoid(bv[m]));
        }
        gamma_s[t] = g;
        beta_s[t] = beta;
        out[kScratchBeta + t] = beta;
        out[kScratchQinv + t] = q_inv;
        out[kScratchKinv + t] = k_inv;
      }
    }
  }
  __syncthreads();
  // (2) gamma = cumsum(g) in token order (the CPU's running sum); padding rows repeat gamma_L.
  if (threadIdx.x == 0) {
    float running = 0.0f;
    for (int i = 0; i < C; ++i) {
      if (i < n) running = __fadd_rn(running, gamma_s[i]);
      gamma_s[i] = running;
    }
  }
  __syncthreads();
  if (threadIdx.x < C) {
    out[kScratchEg + threadIdx.x] = expf(gamma_s[threadIdx.x]);
    out[kScratchTail + threadIdx.x] = expf(gamma_s[n - 1] - gamma_s[threadIdx.x]);
  }

  // (3) A (shared) and P (scratch): 8 x 2 entries of each per thread; rows past n skipped (warp-uniform).
  {
    float acc_kk[kChunkRowsPerWarp][2], acc_qk[kChunkRowsPerWarp][2];
#pragma unroll
    for (int m = 0; m < kChunkRowsPerWarp; ++m) acc_kk[m][0] = acc_kk[m][1] = acc_qk[m][0] = acc_qk[m][1] = 0.0f;
    for (int d = 0; d < dk; d += 4) {
      const float4 k0 = *reinterpret_cast<const float4*>(kks + lane * ks + d);
      const float4 k1 = *reinterpret_cast<const float4*>(kks + (lane + 32) * ks + d);
#pragma unroll
      for (int m = 0; m < kChunkRowsPerWarp; ++m) {
        const int t = warp + kChunkWarps * m;
        if (t < n) {
          const float4 kt = *reinterpret_cast<const float4*>(kks + t * ks + d);
          const float4 qt = *reinterpret_cast<const float4*>(qs + t * ks + d);
          acc_kk[m][0] = dot4(kt, k0, acc_kk[m][0]);
          acc_kk[m][1] = dot4(kt, k1, acc_kk[m][1]);
          acc_qk[m][0] = dot4(qt, k0, acc_qk[m][0]);
          acc_qk[m][1] = dot4(qt, k1, acc_qk[m][1]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kChunkRowsPerWarp; ++m) {
      const int t = warp + kChunkWarps * m;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int c = lane + 32 * i;
        const bool causal = t < n && c <= t;
        const float decay = causal ? expf(gamma_s[t] - gamma_s[c]) : 0.0f;
        attn[t * C + c] = causal && c < t ? __fmul_rn(__fmul_rn(beta_s[t], acc_kk[m][i]), decay) : 0.0f;
        out[kScratchP + t * C + c] = causal ? __fmul_rn(acc_qk[m][i], decay) : 0.0f;
      }
    }
  }

  // (4) Tinv = (I + A)^-1: (I + A) X = the identity, in 16-row blocks, a lane owning columns lane and
  // lane + 32. Each X[t] subtracts A[t,s] X[s] for s = 0 .. t-1 in order.
#pragma unroll
  for (int m = 0; m < kChunkRowsPerWarp; ++m) {
    const int t = warp + kChunkWarps * m;
    xs[t * C + lane] = t == lane ? 1.0f : 0.0f;
    xs[t * C + 32 + lane] = t == 32 + lane ? 1.0f : 0.0f;
  }
  __syncthreads();  // A complete; the columns set
  for (int r0 = 0; r0 < n; r0 += kSolveBlock) {  // n is uniform: every thread takes every sync
    if (r0 > 0) {  // the finished rows [0, r0) out of rows [r0, r0 + 16), two rows per warp
      for (int row = warp; row < kSolveBlock; row += kChunkWarps) {
        const int t = r0 + row;  // < C: r0 < n <= C and r0 % 16 == 0
        float x0 = xs[t * C + lane], x1 = xs[t * C + 32 + lane];
        for (int c = 0; c < r0; ++c) {
          const float a_tc = attn[t * C + c];
          x0 = fmaf(-a_tc, xs[c * C + lane], x0);
          x1 = fmaf(-a_tc, xs[c * C + 32 + lane], x1);
        }
        xs[t * C + lane] = x0;
        xs[t * C + 32 + lane] = x1;
      }
      __syncthreads();
    }
    if (warp < 2) {  // the 16 x 16 diagonal block, warp w on columns 32w + lane: no sync inside
      const int end = r0 + kSolveBlock < n ? r0 + kSolveBlock : n;
      const int column = 32 * warp + lane;
      for (int t = r0 + 1; t < end; ++t) {
        float x = xs[t * C + column];
        for (int c = r0; c < t; ++c) x = fmaf(-attn[t * C + c], xs[c * C + column], x);
        xs[t * C + column] = x;
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int m = 0; m < kChunkRowsPerWarp; ++m) {
    const int t = warp + kChunkWarps * m;
    out[kScratchTinv + t * C + lane] = xs[t * C + lane];
    out[kScratchTinv + t * C + 32 + lane] = xs[t * C + 32 + lane];
  }
}

// Block (sequence, value head, 16-column tile of dv), 16 warps: the sequence's chunks in order.
// Thread (row group r = threadIdx / 16, column c = threadIdx % 16) owns value column j = tile * 16 + c
// and token rows t = r + 32m (m < 2); in the S update, rows d = 4r + q (q < 4) of the tile. q and k
// rows are loaded and normalised with the prep's warp map over 16 warps. (A 16-head layer fills 128
// SMs with 8 blocks a head; the products of a chunk are latency-bound, so each thread holds few rows
// and 16 warps share an SM.)
template <typename T>
__global__ void __launch_bounds__(kScanThreads, 1) gdn_chunk_scan_kernel(GdnDeltaArgs a, int64_t chunked_from) {
  extern __shared__ __align__(16) float chunk_shared[];
  constexpr int C = kChunkTokens, W = kScanCols;
  const int64_t s = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = threadIdx.x / W, col = threadIdx.x % W;
  const int dk = static_cast<int>(a.dk);
  const int ks = dk + 4;
  const int64_t dv = a.dv;
  const int64_t j = static_cast<int64_t>(blockIdx.z) * W + col;  // this thread's value column
  const bool column = j < dv;
  const int64_t first = a.seqs.cu_seqlens_q[s], length = a.seqs.cu_seqlens_q[s + 1] - first;
  if (!takes_chunked(length, chunked_from)) return;  // uniform over the block
  const int64_t first_chunk = chunks_before(a.seqs, s, chunked_from);

  // chunk_shared: two scratch buffers (chunks alternate), then:
  float* qs = chunk_shared + 2 * kScratchFloats;  // [C][ks] normalised, scaled q
  float* kks = qs + C * ks;              // [C][ks] normalised k
  float* Ss = kks + C * ks;              // [dk][W] the state tile
  float* rhs = Ss + dk * W;              // [C][W] right-hand side
  float* xs = rhs + C * W;               // [C][W] X = V'

  const int64_t kh = h / (a.num_v_heads / a.num_k_heads);
  float* S = a.state + (checked_slot(a.seqs, s) * a.num_v_heads + h) * a.dk * dv;
  for (int d = r; d < dk; d += kScanRowGroups) Ss[d * W + col] = column ? S[d * dv + j] : 0.0f;

  // A chunk's loads: its scratch into a buffer (cp.async), its q and k rows (the prep's warp map) and
  // this thread's v values into registers. The next chunk's are issued before this chunk's products,
  // so their latency hides under them.
  constexpr int kWarpRows = kChunkTokens / kScanWarps;
  float qv[kWarpRows][kLaneDims], kv[kWarpRows][kLaneDims], vv[kScanRows];
  auto issue_loads = [&](int64_t c0, int64_t chunk, float* buffer) {
    const int n = static_cast<int>(length - c0 < C ? length - c0 : C);
    const float* scratch = a.chunk_scratch + (chunk * a.num_v_heads + h) * kScratchFloats;
    for (int i = threadIdx.x; i < kScratchFloats / 4; i += kScanThreads) cp_async<16>(buffer + 4 * i, scratch + 4 * i, true);
    cp_async_commit();
    load_chunk_qk<T, kScanWarps>(a, first + c0, n, kh, warp, lane, qv, kv);
#pragma unroll
    for (int m = 0; m < kScanRows; ++m) {
      const int t = r + kScanRowGroups * m;
      vv[m] = t < n && column ? to_f32(row_ptr<const T>(a.v, (first + c0 + t) * a.num_v_heads + h)[j]) : 0.0f;
    }
  };
  issue_loads(0, first_chunk, chunk_shared);

  int parity = 0;
  for (int64_t c0 = 0, chunk = first_chunk; c0 < length; c0 += C, ++chunk, parity ^= 1) {
    const int n = static_cast<int>(length - c0 < C ? length - c0 : C);  // tokens in this chunk
    const float* sc = chunk_shared + parity * kScratchFloats;           // this chunk's scratch
    // (1) This chunk's loads landed (issued one chunk ahead); q and k normalised into shared rows.
    cp_async_wait<0>();
    __syncthreads();  // the scratch has landed for every thread; the previous chunk is done with q, k, X
#pragma unroll
    for (int m = 0; m < kWarpRows; ++m) {
      const int t = warp + kScanWarps * m;
      store_normalised_row(qs + t * ks, kks + t * ks, qv[m], kv[m], sc[kScratchQinv + t], sc[kScratchKinv + t],
                           a.q_scale, dk, lane);
    }
    float v_now[kScanRows];
#pragma unroll
    for (int m = 0; m < kScanRows; ++m) v_now[m] = vv[m];
    __syncthreads();  // q and k complete; the other buffer is free (the previous chunk is done with it)
    if (c0 + C < length) issue_loads(c0 + C, chunk + 1, chunk_shared + (parity ^ 1) * kScratchFloats);

    // (2) Q S and K S [C, W] on the tensor cores: warp w computes the 16 x 8 tile (rows 16 ((w / 2) % 4),
    // columns 8 (w % 2)) of Q S (w < 8) into rhs, or of K S into xs (both free until (3)). Then each
    // thread reads its own entries: the right-hand side beta (v - e^gamma S^T k) replaces them in rhs,
    // and the inter-chunk output e^gamma S^T q stays in registers for (4). Rows past n are zero in q
    // and k, so their products are zero.
    static_assert(kScanWarps == 2 * (kChunkTokens / 16) * (kScanCols / 8), "one 16 x 8 tile of Q S or K S a warp");
    {
      float tile[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const int m0 = 16 * ((warp / 2) % 4), n0 = 8 * (warp % 2);
      warp_tile_3xtf32(tile, warp < 8 ? qs : kks, ks, m0, Ss, W, n0, dk, lane);
      float* dst = warp < 8 ? rhs : xs;
      const int g = lane >> 2, tig = lane & 3;
      dst[(m0 + g) * W + n0 + 2 * tig] = tile[0];
      dst[(m0 + g) * W + n0 + 2 * tig + 1] = tile[1];
      dst[(m0 + g + 8) * W + n0 + 2 * tig] = tile[2];
      dst[(m0 + g + 8) * W + n0 + 2 * tig + 1] = tile[3];
    }
    __syncthreads();  // Q S and K S complete
    float o[kScanRows];
#pragma unroll
    for (int m = 0; m < kScanRows; ++m) {
      const int t = r + kScanRowGroups * m;
      float value = 0.0f;
      o[m] = 0.0f;
      if (t < n) {
        const float beta = sc[kScratchBeta + t], eg = sc[kScratchEg + t];
        value = __fsub_rn(__fmul_rn(beta, v_now[m]), __fmul_rn(__fmul_rn(beta, eg), xs[t * W + col]));
        o[m] = __fmul_rn(eg, rhs[t * W + col]);
      }
      rhs[t * W + col] = value;  // this thread's own entry (read just above)
    }
    __syncthreads();  // the right-hand side complete; xs is free for (3)

    // (3) X = Tinv rhs (Tinv's entries above the diagonal are zeros, its diagonal ones).
    const int n4 = (n + 3) & ~3;  // rows of the right-hand side in [n, n4) are zero
    {
      float x[kScanRows];
#pragma unroll
      for (int m = 0; m < kScanRows; ++m) x[m] = 0.0f;
      for (int c = 0; c < n4; c += 4) {
        const float4 rc = make_float4(rhs[c * W + col], rhs[(c + 1) * W + col], rhs[(c + 2) * W + col], rhs[(c + 3) * W + col]);
#pragma unroll
        for (int m = 0; m < kScanRows; ++m) {
          const int t = r + kScanRowGroups * m;
          if (t < n) x[m] = dot4(*reinterpret_cast<const float4*>(sc + kScratchTinv + t * C + c), rc, x[m]);
        }
      }
#pragma unroll
      for (int m = 0; m < kScanRows; ++m) xs[(r + kScanRowGroups * m) * W + col] = x[m];  // zeros past n
    }
    __syncthreads();  // X complete

    // (4) O = e^gamma S^T q (in o) + P X, written out.
    for (int c = 0; c < n4; c += 4) {
      const float4 xc = make_float4(xs[c * W + col], xs[(c + 1) * W + col], xs[(c + 2) * W + col], xs[(c + 3) * W + col]);
#pragma unroll
      for (int m = 0; m < kScanRows; ++m) {
        const int t = r + kScanRowGroups * m;
        if (t < n) o[m] = dot4(*reinterpret_cast<const float4*>(sc + kScratchP + t * C + c), xc, o[m]);
      }
    }
#pragma unroll
    for (int m = 0; m < kScanRows; ++m) {
      const int t = r + kScanRowGroups * m;
      if (t < n && column) row_ptr<T>(a.out, (first + c0 + t) * a.num_v_heads + h)[j] = from_f32<T>(o[m]);
    }

    // (5) S <- e^gamma_L S + sum_t k_t (e^(gamma_L - gamma_t) x_t)^T. Each thread owns its 4 entries
    // of the tile; (4) reads no S, and the next chunk's (2) reads it after the syncs of (1).
    {
      const float e_last = sc[kScratchEg + n - 1];
      const int d = 4 * r;
      float acc[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[q] = d < dk ? __fmul_rn(Ss[(d + q) * W + col], e_last) : 0.0f;
      if (d < dk) {
        for (int t = 0; t < n; ++t) {
          const float x = __fmul_rn(xs[t * W + col], sc[kScratchTail + t]);
          const float4 kt = *reinterpret_cast<const float4*>(kks + t * ks + d);
          acc[0] = fmaf(kt.x, x, acc[0]);
          acc[1] = fmaf(kt.y, x, acc[1]);
          acc[2] = fmaf(kt.z, x, acc[2]);
          acc[3] = fmaf(kt.w, x, acc[3]);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) Ss[(d + q) * W + col] = acc[q];
      }
    }
    // (6) A prefix-cache checkpoint at this chunk's end: the tile as it stands (uniform over the block).
    const int64_t target = checkpoint_slot(a.seqs, first + c0 + n - 1);
    if (target >= 0) {
      __syncthreads();  // the tile was written under (5)'s map
      float* D = a.state + (target * a.num_v_heads + h) * a.dk * dv;
      for (int d = r; d < dk; d += kScanRowGroups)
        if (column) D[d * dv + j] = Ss[d * W + col];
    }
  }
  __syncthreads();  // the tile was last written under (5)'s map
  for (int d = r; d < dk; d += kScanRowGroups)
    if (column) S[d * dv + j] = Ss[d * W + col];
}

// ----- gated_rms_norm: one warp per row ---------------------------------------------------------

template <typename T>
__global__ void gated_rms_norm_kernel(Rows out, Rows x, Rows z, const T* __restrict__ w, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= x.num_rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t d = x.row_size;
  const T* src = row_ptr<const T>(x, row);
  const T* gate = row_ptr<const T>(z, row);
  T* dst = row_ptr<T>(out, row);
  float sum_sq = 0.0f;
  for (int64_t i = lane; i < d; i += 32) {
    const float v = to_f32(src[i]);
    sum_sq += v * v;
  }
  sum_sq = warp_sum(sum_sq);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
  for (int64_t i = lane; i < d; i += 32) {  // in place is safe: each lane reads, then writes, its own
    const float normed = round_to<T>(__fmul_rn(to_f32(w[i]), round_to<T>(__fmul_rn(to_f32(src[i]), inv_rms))));
    dst[i] = from_f32<T>(__fmul_rn(normed, silu(to_f32(gate[i]))));
  }
}

// ----- sigmoid_mul: one warp per row --------------------------------------------------------------
// (A row's offsets, a division for views of heads, are computed once per warp, not per element.)

template <typename T>
__global__ void sigmoid_mul_kernel(Rows out, Rows x, Rows gate) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (r >= x.num_rows) return;
  const T* x_row = row_ptr<const T>(x, r);
  const T* gate_row = row_ptr<const T>(gate, r);
  T* out_row = row_ptr<T>(out, r);
  for (int64_t i = threadIdx.x % 32; i < x.row_size; i += 32) {
    const float g = to_f32(gate_row[gate.row_size == 1 ? 0 : i]);
    out_row[i] = from_f32<T>(__fmul_rn(to_f32(x_row[i]), round_to<T>(sigmoid(g))));
  }
}

// ----- add_rows_scaled: one thread per column, the rows in order (a row may be named twice) -----

template <typename T>
__global__ void add_rows_scaled_kernel(Rows out, Rows x, const int32_t* __restrict__ row_ids,
                                       const float* __restrict__ weights) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (col >= x.row_size) return;
  for (int64_t i = 0; i < x.num_rows; ++i) {
    const int32_t r = row_ids[i];
    if (r < 0 || r >= out.num_rows) __trap();  // validated before it reaches the device
    T* dst = row_ptr<T>(out, r) + col;
    const float add = round_to<T>(__fmul_rn(weights[i], to_f32(row_ptr<const T>(x, i)[col])));
    *dst = from_f32<T>(__fadd_rn(to_f32(*dst), add));
  }
}

template <typename T, int R>
cudaError_t launch_recurrent(const GdnDeltaArgs& args, int64_t chunked_from, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.seqs.num_seqs), static_cast<unsigned>(args.num_v_heads),
                  blocks_for(args.dv, 32));
  const size_t shared = 2 * kDeltaTokens * static_cast<size_t>(args.dk) * sizeof(float);
  gdn_delta_rule_kernel<T, R><<<grid, kDeltaWarps * 32, shared, stream>>>(args, chunked_from);
  return cudaGetLastError();
}


template <typename T>
cudaError_t launch_chunked(const GdnDeltaArgs& args, int64_t chunked_from, int64_t max_chunks, cudaStream_t stream) {
  const int64_t prep_smem = chunk_prep_smem_floats(args.dk) * static_cast<int64_t>(sizeof(float));
  const int64_t scan_smem = chunk_scan_smem_floats(args.dk) * static_cast<int64_t>(sizeof(float));
  static std::atomic<uint64_t> prep_raised{0}, scan_raised{0};  // per device: each GPU of a process needs its own
  if (prep_smem > 48 * 1024) {
    const cudaError_t attribute = allow_dynamic_smem(gdn_chunk_prep_kernel<T>, smem_optin_limit(), prep_raised);
    if (attribute != cudaSuccess) return attribute;
  }
  if (scan_smem > 48 * 1024) {
    const cudaError_t attribute = allow_dynamic_smem(gdn_chunk_scan_kernel<T>, smem_optin_limit(), scan_raised);
    if (attribute != cudaSuccess) return attribute;
  }
  const dim3 prep_grid(static_cast<unsigned>(max_chunks), static_cast<unsigned>(args.num_v_heads));
  gdn_chunk_prep_kernel<T><<<prep_grid, kChunkThreads, static_cast<size_t>(prep_smem), stream>>>(args, chunked_from);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  const dim3 scan_grid(static_cast<unsigned>(args.seqs.num_seqs), static_cast<unsigned>(args.num_v_heads),
                       blocks_for(args.dv, kScanCols));
  gdn_chunk_scan_kernel<T><<<scan_grid, kScanThreads, static_cast<size_t>(scan_smem), stream>>>(args, chunked_from);
  return cudaGetLastError();
}

// The shortest sequence the chunked kernels take (INT64_MAX: none), from the form, the shape and the hint.
int64_t chunked_from_of(const GdnDeltaArgs& args) {
  // Shapes outside the chunked kernels' maps (dk % 8 != 0: the scan's k-steps; dk > 128) stay
  // recurrent in every form.
  const bool fits = args.dk % 8 == 0 && args.dk <= kChunkMaxDk &&
                    chunk_scan_smem_floats(args.dk) * static_cast<int64_t>(sizeof(float)) <= smem_optin_limit();
  int64_t from = INT64_MAX;
  if (fits && args.form == GdnDeltaForm::kChunked) from = 1;
  if (fits && args.form == GdnDeltaForm::kAuto)
    from = args.auto_chunked_min_tokens > 0 ? args.auto_chunked_min_tokens : kChunkedMinTokens;
  // The hint spares a decode step (graph) the chunked launch; without that launch the recurrent
  // kernel takes every sequence, so a wrong hint costs time, never rows.
  if (args.max_seqlen_q > 0 && args.max_seqlen_q < from) from = INT64_MAX;
  return from;
}

// The most chunks the batch's chunked sequences can have: whole chunks of all tokens, plus one partial
// chunk for each sequence that may take the chunked form.
int64_t max_chunks_of(const GdnDeltaArgs& args, int64_t chunked_from) {
  if (chunked_from == INT64_MAX || args.num_v_heads == 0) return 0;
  const int64_t tokens = args.v.num_rows / args.num_v_heads;
  const int64_t partial = std::min<int64_t>(args.seqs.num_seqs, tokens / chunked_from);
  return (tokens + kChunkTokens - 1) / kChunkTokens + partial;
}

}  // namespace

cudaError_t launch_gdn_conv1d(DType dtype, Rows out, Rows x, const void* weight, void* conv_state, GdnSeqs seqs,
                              int64_t channels, int64_t kernel, cudaStream_t stream) {
  if (kernel < 2 || kernel > kMaxGdnConvKernel) return cudaErrorInvalidValue;
  if (seqs.num_seqs == 0 || out.num_rows == 0 || channels == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const unsigned channel_blocks = blocks_for(channels, kThreads);
    if (out.num_rows == seqs.num_seqs && seqs.checkpoint_slots == nullptr) {
      // Decode (a row a sequence; any split of the rows stays right, only slower).
      gdn_conv1d_rows_kernel<T><<<dim3(static_cast<unsigned>(seqs.num_seqs), channel_blocks), kThreads, 0, stream>>>(
          out, x, static_cast<const T*>(weight), static_cast<T*>(conv_state), seqs, channels, static_cast<int>(kernel));
      return cudaGetLastError();
    }
    const dim3 row_grid(blocks_for(out.num_rows, kConvRows), channel_blocks);
    gdn_conv1d_out_kernel<T><<<row_grid, kThreads, 0, stream>>>(
        out, x, static_cast<const T*>(weight), static_cast<const T*>(conv_state), seqs, channels,
        static_cast<int>(kernel));
    if (seqs.checkpoint_slots != nullptr)
      gdn_conv1d_checkpoint_kernel<T><<<row_grid, kThreads, 0, stream>>>(
          x, static_cast<T*>(conv_state), seqs, channels, static_cast<int>(kernel));
    gdn_conv1d_state_kernel<T><<<dim3(static_cast<unsigned>(seqs.num_seqs), channel_blocks), kThreads, 0, stream>>>(
        x, static_cast<T*>(conv_state), seqs, channels, static_cast<int>(kernel));
    return cudaGetLastError();
  });
}

int64_t gdn_chunk_scratch_floats(const GdnDeltaArgs& args) {
  return max_chunks_of(args, chunked_from_of(args)) * args.num_v_heads * kScratchFloats;
}

cudaError_t launch_gdn_delta_rule(DType dtype, const GdnDeltaArgs& args, cudaStream_t stream) {
  if (args.dk < 1 || args.dk > kMaxGdnHeadDim || args.num_k_heads < 1 || args.num_v_heads % args.num_k_heads != 0)
    return cudaErrorInvalidValue;
  if (args.seqs.num_seqs == 0 || args.num_v_heads == 0 || args.dv == 0) return cudaSuccess;
  // Sequences of at least chunked_from tokens take the chunked kernels, the rest the recurrent one.
  const int64_t chunked_from = chunked_from_of(args);
  const int64_t max_chunks = max_chunks_of(args, chunked_from);
  if (max_chunks > 0x7fffffff) return cudaErrorInvalidValue;
  if (max_chunks > 0 && (args.chunk_scratch == nullptr ||
                         args.chunk_scratch_floats < max_chunks * args.num_v_heads * kScratchFloats))
    return cudaErrorInvalidValue;
  return dispatch_float(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if (chunked_from > 1) {
      cudaError_t error = cudaSuccess;
      if (args.dk <= 4 * 8) error = launch_recurrent<T, 8>(args, chunked_from, stream);
      else if (args.dk <= 4 * 32) error = launch_recurrent<T, 32>(args, chunked_from, stream);
      else error = launch_recurrent<T, 64>(args, chunked_from, stream);
      if (error != cudaSuccess) return error;
    }
    if (max_chunks > 0) return launch_chunked<T>(args, chunked_from, max_chunks, stream);
    return cudaSuccess;
  });
}

cudaError_t launch_gated_rms_norm(DType dtype, Rows out, Rows x, Rows z, const void* w, float eps,
                                  cudaStream_t stream) {
  if (x.num_rows == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    gated_rms_norm_kernel<T><<<blocks_for(x.num_rows, kWarpsPerBlock), kThreads, 0, stream>>>(
        out, x, z, static_cast<const T*>(w), eps);
    return cudaGetLastError();
  });
}

cudaError_t launch_sigmoid_mul(DType dtype, Rows out, Rows x, Rows gate, cudaStream_t stream) {
  const int64_t elements = x.num_rows * x.row_size;
  if (elements == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    sigmoid_mul_kernel<T><<<blocks_for(x.num_rows, kWarpsPerBlock), kThreads, 0, stream>>>(out, x, gate);
    return cudaGetLastError();
  });
}

cudaError_t launch_add_rows_scaled(DType dtype, Rows out, Rows x, const int32_t* row_ids, const float* weights,
                                   cudaStream_t stream) {
  if (x.num_rows == 0 || x.row_size == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    add_rows_scaled_kernel<T><<<blocks_for(x.row_size, kThreads), kThreads, 0, stream>>>(out, x, row_ids, weights);
    return cudaGetLastError();
  });
}

}  // namespace pagellm::cuda
