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
#include "backend/cuda/quant_pairs.cuh"  // allow_dynamic_smem

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
// Two kernels: the outputs (one thread per (token, channel), reading the slot's old state for the
// first K-1 rows of a sequence), then the state update (one thread per (sequence, channel)), so no
// thread writes a state another still reads.

template <typename T>
__global__ void gdn_conv1d_out_kernel(Rows out, Rows x, const T* __restrict__ weight, const T* __restrict__ state,
                                      GdnSeqs seqs, int64_t channels, int kernel) {
  const int64_t t = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (c >= channels || t >= seqs.cu_seqlens_q[seqs.num_seqs]) return;
  const int64_t s = sequence_of(seqs.cu_seqlens_q, seqs.num_seqs, t);
  const int64_t first = seqs.cu_seqlens_q[s], i = t - first, history = kernel - 1;
  const T* st = state + (checked_slot(seqs, s) * channels + c) * history;
  const T* w = weight + c * kernel;
  float acc = 0.0f;
  for (int j = 0; j < kernel; ++j) {  // u = [state | x], u[i + j]
    const int64_t u = i + j;
    const float value = u < history ? to_f32(st[u]) : to_f32(row_ptr<const T>(x, first + u - history)[c]);
    acc = __fadd_rn(acc, __fmul_rn(to_f32(w[j]), value));
  }
  row_ptr<T>(out, t)[c] = from_f32<T>(silu(round_to<T>(acc)));
}

// Prefix-cache checkpoints: thread (token row t, channel) copies the last K-1 of u after t to the
// checkpoint slot of t. Runs between the two kernels above (reads the old state, as the outputs do).
template <typename T>
__global__ void gdn_conv1d_checkpoint_kernel(Rows x, T* __restrict__ state, GdnSeqs seqs, int64_t channels,
                                             int kernel) {
  const int64_t t = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (c >= channels || t >= seqs.cu_seqlens_q[seqs.num_seqs]) return;
  const int64_t target = checkpoint_slot(seqs, t);
  if (target < 0) return;
  const int64_t s = sequence_of(seqs.cu_seqlens_q, seqs.num_seqs, t);
  const int64_t first = seqs.cu_seqlens_q[s], history = kernel - 1;
  const T* st = state + (checked_slot(seqs, s) * channels + c) * history;
  T* dst = state + (target * channels + c) * history;
  for (int64_t m = 0; m < history; ++m) {  // u[t - first + 1 + m]
    const int64_t u = t - first + 1 + m;
    dst[m] = u < history ? st[u] : row_ptr<const T>(x, first + u - history)[c];
  }
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

// The chunked form (B.10; formulas in backend/cpu/gdn.h): block (sequence, value head, 32-column
// tile of dv), 8 warps, the tile of S [dk, 32] f32 in shared memory across the sequence's chunks of
// C = 64 tokens (the CPU's chunk boundaries). Per chunk, gamma = cumsum(g) within the chunk:
//   A[t,s] = beta_t (k_t . k_s) e^(gamma_t - gamma_s)  (s < t)   P[t,s] = (q_t . k_s) e^(gamma_t - gamma_s)  (s <= t)
//   (I + A) X = diag(beta) V - diag(beta e^gamma) K S             X = V' of gdn.h, solved directly:
//     V' = U - W S with U = (I + A)^-1 diag(beta) V and W = (I + A)^-1 diag(beta e^gamma) K, so only
//     the tile's 32 columns go through the triangular solve (not dk + 32); same value, other rounding.
//   O = diag(e^gamma) Q S + P X
//   S <- e^gamma_L S + K^T diag(e^(gamma_L - gamma)) X
// Every exponent is <= 0 (g <= 0), so nothing overflows. Rows past the chunk's n tokens are zero in
// q, k, X, A and P, so the fixed 64-row loops need no other masking.
// Thread maps (lane = threadIdx % 32, warp = threadIdx / 32):
//   A, P         rows t = warp + 8m (m < 8), columns s = lane + 32i (i < 2)
//   K S, Q S, O  rows t = warp + 8m, column lane of the tile
//   solve        16-row blocks: the rows below the block from all warps, the block itself by warp 0
//   S update     rows d = 4 (warp + 8m) + r (m, r < 4), column lane
// q and k rows are padded to dk + 4 floats: 16-byte rows for float4 reads, and the lanes' float4
// reads of 8 consecutive rows hit distinct banks when dk % 8 == 0.

constexpr int kChunkTokens = 64;  // C, as the CPU's kGdnChunkSize
constexpr int kChunkTile = 32;    // value columns per block: one per lane
constexpr int kChunkWarps = 8;
constexpr int kChunkThreads = kChunkWarps * 32;
constexpr int kChunkRowsPerWarp = kChunkTokens / kChunkWarps;  // 8
constexpr int kChunkMaxDk = 4 * 32;                             // the S update map covers 4 x 32 rows
constexpr int kSolveBlock = 16;
constexpr int64_t kChunkedMinTokens = 16;  // default routing threshold (GdnDeltaArgs::auto_chunked_min_tokens)
static_assert(kChunkTokens % kChunkWarps == 0 && kChunkTokens % kSolveBlock == 0 && kChunkTokens == 2 * 32);

// Shared memory of the chunked kernel for key dim dk (floats; every array starts 16-byte aligned
// when dk % 4 == 0): q, k [C][dk + 4]; S tile [dk][32]; X [C][32]; A, P [C][C]; gamma, beta,
// e^gamma, e^(gamma_L - gamma) [C].
__host__ __device__ constexpr int64_t chunked_smem_floats(int64_t dk) {
  return 2 * kChunkTokens * (dk + 4) + dk * kChunkTile + kChunkTokens * kChunkTile +
         2 * kChunkTokens * kChunkTokens + 4 * kChunkTokens;
}

__device__ __forceinline__ float dot4(float4 x, float4 y, float acc) {
  acc = fmaf(x.x, y.x, acc);
  acc = fmaf(x.y, y.y, acc);
  acc = fmaf(x.z, y.z, acc);
  return fmaf(x.w, y.w, acc);
}

template <typename T>
__global__ void __launch_bounds__(kChunkThreads, 1) gdn_chunked_kernel(GdnDeltaArgs a, int64_t chunked_from) {
  extern __shared__ __align__(16) float chunk_shared[];
  constexpr int C = kChunkTokens;
  const int64_t s = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int dk = static_cast<int>(a.dk);  // <= kChunkMaxDk and % 4 == 0: the launcher checks
  const int ks = dk + 4;                  // q, k row stride (floats)
  const int64_t dv = a.dv;
  const int64_t j = static_cast<int64_t>(blockIdx.z) * kChunkTile + lane;  // this lane's value column
  const bool column = j < dv;
  const int64_t first = a.seqs.cu_seqlens_q[s], length = a.seqs.cu_seqlens_q[s + 1] - first;
  if (length <= 0 || length < chunked_from) return;  // uniform over the block

  float* qs = chunk_shared;                    // [C][ks] normalised, scaled q
  float* kks = qs + C * ks;                    // [C][ks] normalised k
  float* Ss = kks + C * ks;                    // [dk][32] the state tile
  float* xs = Ss + dk * kChunkTile;            // [C][32] right-hand side, then X = V'
  float* attn = xs + C * kChunkTile;           // [C][C] A (strictly lower)
  float* qk = attn + C * C;                    // [C][C] P (lower, with the diagonal)
  float* gamma_s = qk + C * C;                 // [C] g, then its cumsum
  float* beta_s = gamma_s + C;                 // [C]
  float* eg_s = beta_s + C;                    // [C] e^gamma_t
  float* tail_s = eg_s + C;                    // [C] e^(gamma_L - gamma_t)

  const int64_t kh = h / (a.num_v_heads / a.num_k_heads);
  float* S = a.state + (checked_slot(a.seqs, s) * a.num_v_heads + h) * a.dk * dv;
  for (int d = warp; d < dk; d += kChunkWarps) Ss[d * kChunkTile + lane] = column ? S[d * dv + j] : 0.0f;
  const float neg_a = -expf(a.a_log[h]), dt_bias = a.dt_bias[h];

  for (int64_t c0 = 0; c0 < length; c0 += C) {
    const int n = static_cast<int>(length - c0 < C ? length - c0 : C);  // tokens in this chunk
    __syncthreads();  // the previous chunk is done with q, k, X, gamma and (its S update) the tile

    // (1) The chunk's tokens, one warp per row, as the recurrent kernel prepares them.
    for (int i = warp; i < C; i += kChunkWarps) {
      float* qi = qs + i * ks;
      float* ki = kks + i * ks;
      if (i >= n) {
        for (int d = lane; d < ks; d += 32) qi[d] = ki[d] = 0.0f;
        if (lane == 0) gamma_s[i] = beta_s[i] = 0.0f;
        continue;
      }
      const int64_t t = first + c0 + i;
      const T* q_row = row_ptr<const T>(a.q, t * a.num_k_heads + kh);
      const T* k_row = row_ptr<const T>(a.k, t * a.num_k_heads + kh);
      float sq = 0.0f, sk = 0.0f;
      for (int d = lane; d < dk; d += 32) {
        const float qv = to_f32(q_row[d]), kv = to_f32(k_row[d]);
        qi[d] = qv;
        ki[d] = kv;
        sq += qv * qv;
        sk += kv * kv;
      }
      sq = warp_sum(sq);
      sk = warp_sum(sk);
      const float q_inv = 1.0f / sqrtf(sq + 1e-6f), k_inv = 1.0f / sqrtf(sk + 1e-6f);
      for (int d = lane; d < ks; d += 32) {  // this lane's own elements; the row padding zeroed
        qi[d] = d < dk ? __fmul_rn(__fmul_rn(qi[d], q_inv), a.q_scale) : 0.0f;
        ki[d] = d < dk ? __fmul_rn(ki[d], k_inv) : 0.0f;
      }
      if (lane == 0) {
        const float x = __fadd_rn(to_f32(row_ptr<const T>(a.a, t)[h]), dt_bias);
        const float softplus = x > 20.0f ? x : log1pf(expf(x));
        gamma_s[i] = __fmul_rn(neg_a, softplus);  // g_i, summed below
        beta_s[i] = round_to<T>(sigmoid(to_f32(row_ptr<const T>(a.b, t)[h])));
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
      eg_s[threadIdx.x] = expf(gamma_s[threadIdx.x]);
      tail_s[threadIdx.x] = expf(gamma_s[n - 1] - gamma_s[threadIdx.x]);
    }
    __syncthreads();

    // (3) A and P: 8 x 2 entries of each per thread; rows past n skipped (warp-uniform).
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
          qk[t * C + c] = causal ? __fmul_rn(acc_qk[m][i], decay) : 0.0f;
        }
      }
    }

    // (4) K S and Q S for the tile: the right-hand side beta (v - e^gamma S^T k) into X, and the
    // inter-chunk output e^gamma S^T q kept in registers for (6) (same thread map).
    float o[kChunkRowsPerWarp];
    {
      float acc_k[kChunkRowsPerWarp];
#pragma unroll
      for (int m = 0; m < kChunkRowsPerWarp; ++m) o[m] = acc_k[m] = 0.0f;
      for (int d = 0; d < dk; d += 4) {
        const float4 sd = make_float4(Ss[d * kChunkTile + lane], Ss[(d + 1) * kChunkTile + lane],
                                      Ss[(d + 2) * kChunkTile + lane], Ss[(d + 3) * kChunkTile + lane]);
#pragma unroll
        for (int m = 0; m < kChunkRowsPerWarp; ++m) {
          const int t = warp + kChunkWarps * m;
          if (t < n) {
            o[m] = dot4(*reinterpret_cast<const float4*>(qs + t * ks + d), sd, o[m]);
            acc_k[m] = dot4(*reinterpret_cast<const float4*>(kks + t * ks + d), sd, acc_k[m]);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < kChunkRowsPerWarp; ++m) {
        const int t = warp + kChunkWarps * m;
        float rhs = 0.0f;
        if (t < n) {
          const float v = column ? to_f32(row_ptr<const T>(a.v, (first + c0 + t) * a.num_v_heads + h)[j]) : 0.0f;
          const float beta = beta_s[t];
          rhs = __fsub_rn(__fmul_rn(beta, v), __fmul_rn(__fmul_rn(beta, eg_s[t]), acc_k[m]));
          o[m] = __fmul_rn(eg_s[t], o[m]);
        }
        xs[t * kChunkTile + lane] = rhs;
      }
    }
    __syncthreads();  // A and the right-hand side complete

    // (5) Forward substitution (I + A) X = rhs, in 16-row blocks. Each X[t] subtracts A[t,s] X[s]
    // for s = 0 .. t-1 in order, as the CPU's loop.
    for (int r0 = 0; r0 < n; r0 += kSolveBlock) {  // n is uniform: every thread takes every sync
      if (r0 > 0) {  // the finished rows [0, r0) out of rows [r0, r0 + 16), two rows per warp
        for (int row = warp; row < kSolveBlock; row += kChunkWarps) {
          const int t = r0 + row;  // < C: r0 < n <= C and r0 % 16 == 0
          float x = xs[t * kChunkTile + lane];
          for (int c = 0; c < r0; ++c) x = fmaf(-attn[t * C + c], xs[c * kChunkTile + lane], x);
          xs[t * kChunkTile + lane] = x;
        }
        __syncthreads();
      }
      if (warp == 0) {  // the 16 x 16 diagonal block: lane owns its column, so no sync inside
        const int end = r0 + kSolveBlock < n ? r0 + kSolveBlock : n;
        for (int t = r0 + 1; t < end; ++t) {
          float x = xs[t * kChunkTile + lane];
          for (int c = r0; c < t; ++c) x = fmaf(-attn[t * C + c], xs[c * kChunkTile + lane], x);
          xs[t * kChunkTile + lane] = x;
        }
      }
      __syncthreads();
    }

    // (6) O = e^gamma S^T q (in o) + P X, written out.
    {
      const int n4 = (n + 3) & ~3;  // X rows in [n, n4) are zero, and so are P's columns there
      for (int c = 0; c < n4; c += 4) {
        const float4 xc = make_float4(xs[c * kChunkTile + lane], xs[(c + 1) * kChunkTile + lane],
                                      xs[(c + 2) * kChunkTile + lane], xs[(c + 3) * kChunkTile + lane]);
#pragma unroll
        for (int m = 0; m < kChunkRowsPerWarp; ++m) {
          const int t = warp + kChunkWarps * m;
          if (t < n) o[m] = dot4(*reinterpret_cast<const float4*>(qk + t * C + c), xc, o[m]);
        }
      }
#pragma unroll
      for (int m = 0; m < kChunkRowsPerWarp; ++m) {
        const int t = warp + kChunkWarps * m;
        if (t < n && column) row_ptr<T>(a.out, (first + c0 + t) * a.num_v_heads + h)[j] = from_f32<T>(o[m]);
      }
    }

    // (7) S <- e^gamma_L S + sum_t k_t (e^(gamma_L - gamma_t) x_t)^T. Each thread owns its 16 entries
    // of the tile; (6) reads no S, and the next chunk's (4) reads it after the syncs of (1)-(3).
    {
      const float e_last = eg_s[n - 1];
      float acc[4][4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int d = 4 * (warp + kChunkWarps * m);
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[m][r] = d < dk ? __fmul_rn(Ss[(d + r) * kChunkTile + lane], e_last) : 0.0f;
      }
      for (int t = 0; t < n; ++t) {
        const float x = __fmul_rn(xs[t * kChunkTile + lane], tail_s[t]);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int d = 4 * (warp + kChunkWarps * m);
          if (d < dk) {
            const float4 kt = *reinterpret_cast<const float4*>(kks + t * ks + d);
            acc[m][0] = fmaf(kt.x, x, acc[m][0]);
            acc[m][1] = fmaf(kt.y, x, acc[m][1]);
            acc[m][2] = fmaf(kt.z, x, acc[m][2]);
            acc[m][3] = fmaf(kt.w, x, acc[m][3]);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int d = 4 * (warp + kChunkWarps * m);
        if (d < dk) {
#pragma unroll
          for (int r = 0; r < 4; ++r) Ss[(d + r) * kChunkTile + lane] = acc[m][r];
        }
      }
    }
    // (8) A prefix-cache checkpoint at this chunk's end: the tile as it stands (uniform over the block).
    const int64_t target = checkpoint_slot(a.seqs, first + c0 + n - 1);
    if (target >= 0) {
      __syncthreads();  // the tile was written under (7)'s map
      float* D = a.state + (target * a.num_v_heads + h) * a.dk * dv;
      for (int d = warp; d < dk; d += kChunkWarps)
        if (column) D[d * dv + j] = Ss[d * kChunkTile + lane];
    }
  }
  __syncthreads();  // the tile was last written under (7)'s map
  for (int d = warp; d < dk; d += kChunkWarps)
    if (column) S[d * dv + j] = Ss[d * kChunkTile + lane];
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

// ----- sigmoid_mul: one thread per element ------------------------------------------------------

template <typename T>
__global__ void sigmoid_mul_kernel(Rows out, Rows x, Rows gate) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= x.num_rows * x.row_size) return;
  const int64_t r = e / x.row_size, i = e % x.row_size;
  const float g = to_f32(row_ptr<const T>(gate, r)[gate.row_size == 1 ? 0 : i]);
  const float v = to_f32(row_ptr<const T>(x, r)[i]);
  row_ptr<T>(out, r)[i] = from_f32<T>(__fmul_rn(v, round_to<T>(sigmoid(g))));
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


int64_t chunked_smem_bytes(int64_t dk) { return chunked_smem_floats(dk) * static_cast<int64_t>(sizeof(float)); }

template <typename T>
cudaError_t launch_chunked(const GdnDeltaArgs& args, int64_t chunked_from, cudaStream_t stream) {
  const int64_t smem = chunked_smem_bytes(args.dk);
  if (smem > 48 * 1024) {  // once per dtype: the opt-in ceiling covers every dk the launcher admits
    static std::atomic<uint64_t> raised{0};  // per device: each GPU of a process needs its own
    const cudaError_t attribute = allow_dynamic_smem(gdn_chunked_kernel<T>, smem_optin_limit(), raised);
    if (attribute != cudaSuccess) return attribute;
  }
  const dim3 grid(static_cast<unsigned>(args.seqs.num_seqs), static_cast<unsigned>(args.num_v_heads),
                  blocks_for(args.dv, kChunkTile));
  gdn_chunked_kernel<T><<<grid, kChunkThreads, static_cast<size_t>(smem), stream>>>(args, chunked_from);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gdn_conv1d(DType dtype, Rows out, Rows x, const void* weight, void* conv_state, GdnSeqs seqs,
                              int64_t channels, int64_t kernel, cudaStream_t stream) {
  if (kernel < 2 || kernel > kMaxGdnConvKernel) return cudaErrorInvalidValue;
  if (seqs.num_seqs == 0 || out.num_rows == 0 || channels == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const unsigned channel_blocks = blocks_for(channels, kThreads);
    gdn_conv1d_out_kernel<T><<<dim3(static_cast<unsigned>(out.num_rows), channel_blocks), kThreads, 0, stream>>>(
        out, x, static_cast<const T*>(weight), static_cast<const T*>(conv_state), seqs, channels,
        static_cast<int>(kernel));
    if (seqs.checkpoint_slots != nullptr)
      gdn_conv1d_checkpoint_kernel<T><<<dim3(static_cast<unsigned>(out.num_rows), channel_blocks), kThreads, 0, stream>>>(
          x, static_cast<T*>(conv_state), seqs, channels, static_cast<int>(kernel));
    gdn_conv1d_state_kernel<T><<<dim3(static_cast<unsigned>(seqs.num_seqs), channel_blocks), kThreads, 0, stream>>>(
        x, static_cast<T*>(conv_state), seqs, channels, static_cast<int>(kernel));
    return cudaGetLastError();
  });
}

cudaError_t launch_gdn_delta_rule(DType dtype, const GdnDeltaArgs& args, cudaStream_t stream) {
  if (args.dk < 1 || args.dk > kMaxGdnHeadDim || args.num_k_heads < 1 || args.num_v_heads % args.num_k_heads != 0)
    return cudaErrorInvalidValue;
  if (args.seqs.num_seqs == 0 || args.num_v_heads == 0 || args.dv == 0) return cudaSuccess;
  // Sequences of at least chunked_from tokens take the chunked kernel, the rest the recurrent one.
  // Shapes outside the chunked kernel's maps (dk % 4 != 0, dk > 128) stay recurrent in every form.
  const bool chunked_fits = args.dk % 4 == 0 && args.dk <= kChunkMaxDk && chunked_smem_bytes(args.dk) <= smem_optin_limit();
  int64_t chunked_from = INT64_MAX;
  if (chunked_fits && args.form == GdnDeltaForm::kChunked) chunked_from = 1;
  if (chunked_fits && args.form == GdnDeltaForm::kAuto)
    chunked_from = args.auto_chunked_min_tokens > 0 ? args.auto_chunked_min_tokens : kChunkedMinTokens;
  // The hint spares a decode step (graph) the chunked launch; without that launch the recurrent
  // kernel takes every sequence, so a wrong hint costs time, never rows.
  if (args.max_seqlen_q > 0 && args.max_seqlen_q < chunked_from) chunked_from = INT64_MAX;
  return dispatch_float(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if (chunked_from > 1) {
      cudaError_t error = cudaSuccess;
      if (args.dk <= 4 * 8) error = launch_recurrent<T, 8>(args, chunked_from, stream);
      else if (args.dk <= 4 * 32) error = launch_recurrent<T, 32>(args, chunked_from, stream);
      else error = launch_recurrent<T, 64>(args, chunked_from, stream);
      if (error != cudaSuccess) return error;
    }
    if (chunked_from != INT64_MAX) return launch_chunked<T>(args, chunked_from, stream);
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
    sigmoid_mul_kernel<T><<<blocks_for(elements, kThreads), kThreads, 0, stream>>>(out, x, gate);
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
