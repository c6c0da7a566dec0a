// The hybrid-model kernels (Qwen3.5 / Qwen3-Next): the Gated DeltaNet ops gdn_conv1d and
// gdn_delta_rule, the GDN output norm gated_rms_norm, the attention output gate sigmoid_mul and the
// MoE combine add_rows_scaled. CPU twins: backend/cpu/gdn.cpp and cpu_backend.cpp; same rounding
// points (products the CPU rounds separately use __fmul_rn / __fadd_rn so nvcc cannot fuse them).
//
// Varlen batches (GdnSeqs): sequence s owns token rows [cu_seqlens_q[s], cu_seqlens_q[s+1]) and the
// state slot state_slots[s]; it reads the slot, then leaves its final state there. Padding rows of a
// graph bucket all name one scratch slot: what lands there is never read for a real request.
#include <cfloat>

#include "backend/cuda/device_common.cuh"

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
// The recurrent form (B.9) for every sequence length: block (sequence, value head, 32-column tile
// of dv), 4 warps. Lane l owns column j = tile * 32 + l of S [dk, dv]; warp w owns rows w, w + 4, ...
// of that column, R of them in registers (dk <= 4 R). Per token: S *= e^g; m = S^T k (a column dot,
// partial per warp, summed through shared memory); d = beta (v - m); S += k d^T; o = S^T q likewise.
// Tokens are prepared kDeltaTokens at a time: normalised q and k, e^g, beta and the tile of v in
// shared memory.

constexpr int kDeltaWarps = 4;
constexpr int kDeltaTokens = 16;

template <typename T, int R>
__global__ void __launch_bounds__(kDeltaWarps * 32) gdn_delta_rule_kernel(GdnDeltaArgs a) {
  extern __shared__ float qk_shared[];  // q [kDeltaTokens][dk], then k [kDeltaTokens][dk]
  __shared__ float decay_s[kDeltaTokens], beta_s[kDeltaTokens], v_s[kDeltaTokens][32];
  __shared__ float red_m[kDeltaWarps][32], red_o[kDeltaWarps][32];
  const int64_t s = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t dk = a.dk, dv = a.dv;
  const int64_t j = static_cast<int64_t>(blockIdx.z) * 32 + lane;
  const bool column = j < dv;
  const int64_t first = a.seqs.cu_seqlens_q[s], length = a.seqs.cu_seqlens_q[s + 1] - first;
  if (length <= 0) return;  // uniform over the block
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
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int64_t r = warp + kDeltaWarps * i;
    if (r < dk && column) S[r * dv + j] = st[i];
  }
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
cudaError_t launch_delta(const GdnDeltaArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.seqs.num_seqs), static_cast<unsigned>(args.num_v_heads),
                  blocks_for(args.dv, 32));
  const size_t shared = 2 * kDeltaTokens * static_cast<size_t>(args.dk) * sizeof(float);
  gdn_delta_rule_kernel<T, R><<<grid, kDeltaWarps * 32, shared, stream>>>(args);
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
    gdn_conv1d_state_kernel<T><<<dim3(static_cast<unsigned>(seqs.num_seqs), channel_blocks), kThreads, 0, stream>>>(
        x, static_cast<T*>(conv_state), seqs, channels, static_cast<int>(kernel));
    return cudaGetLastError();
  });
}

cudaError_t launch_gdn_delta_rule(DType dtype, const GdnDeltaArgs& args, cudaStream_t stream) {
  if (args.dk < 1 || args.dk > kMaxGdnHeadDim || args.num_k_heads < 1 || args.num_v_heads % args.num_k_heads != 0)
    return cudaErrorInvalidValue;
  if (args.seqs.num_seqs == 0 || args.num_v_heads == 0 || args.dv == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (args.dk <= 4 * 8) return launch_delta<T, 8>(args, stream);
    if (args.dk <= 4 * 32) return launch_delta<T, 32>(args, stream);
    return launch_delta<T, 64>(args, stream);
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
