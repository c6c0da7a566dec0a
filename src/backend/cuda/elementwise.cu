// Row-wise and elementwise kernels: rms_norm, add, rope, act_mul, add_bias, scale, softcap, embedding, argmax, log_softmax,
// and the fused add_rms_norm and qk_norm_rope_write_kv.
// Each computes in f32 and rounds once when storing, at the same points as the CPU twin
// (backend/cpu/cpu_backend.cpp). Products whose rounding the CPU performs separately use __fmul_rn /
// __fadd_rn so nvcc cannot contract them into an FMA.
#include <cfloat>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/row_norm.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kThreads = kNormThreads;  // the norms' block form and block_reduce
constexpr int kWarpsPerBlock = kThreads / 32;
// Below this many tokens the q/k prologue gives each head its own warp (blocks of head groups):
// fewer tokens than SMs leave most of the GPU idle otherwise.
constexpr int64_t kFewPrologueTokens = 64;

// ----- rms_norm: one warp per row ---------------------------------------------------------------

template <typename T>
__global__ void rms_norm_kernel(Rows out, Rows x, const T* __restrict__ w, float eps, NormForm form) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= x.num_rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t d = x.row_size;
  const T* src = row_ptr<const T>(x, row);
  T* dst = row_ptr<T>(out, row);
  float sum_sq = 0.0f;
  for (int64_t i = lane; i < d; i += 32) {
    const float v = to_f32(src[i]);
    sum_sq += v * v;
  }
  sum_sq = warp_sum(sum_sq);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
  // Every lane has read its elements above before any lane writes: in place (out == x) is safe
  // because each lane reads and writes the same indices.
  for (int64_t i = lane; i < d; i += 32) {
    const float v = to_f32(src[i]);
    const float weight = to_f32(w[i]);
    dst[i] = from_f32<T>(weighted_norm<T>(v, inv_rms, weight, form));
  }
}

// hidden += delta, then the same per-row norm as rms_norm_kernel (same loop order, bitwise equal
// to add followed by rms_norm).
template <typename T>
__global__ void add_rms_norm_kernel(Rows hidden, Rows normed, Rows delta, const T* __restrict__ w, float eps,
                                    NormForm form) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= hidden.num_rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t d = hidden.row_size;
  T* h = row_ptr<T>(hidden, row);
  const T* add = row_ptr<const T>(delta, row);
  T* dst = row_ptr<T>(normed, row);
  float sum_sq = 0.0f;
  for (int64_t i = lane; i < d; i += 32) {
    const float v = round_to<T>(__fadd_rn(to_f32(h[i]), to_f32(add[i])));
    h[i] = from_f32<T>(v);
    sum_sq += v * v;
  }
  sum_sq = warp_sum(sum_sq);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
  for (int64_t i = lane; i < d; i += 32) {
    const float v = to_f32(h[i]);  // this lane's own store above
    const float weight = to_f32(w[i]);
    const float y = weighted_norm<T>(v, inv_rms, weight, form);
    dst[i] = from_f32<T>(y);
  }
}

// Block (token, head group): the token's RoPE cos/sin (as rope_kernel computes them) once into shared
// memory, then one warp per (token, head) row of q or k of its group: rms_norm (as rms_norm_kernel), RoPE through a per-warp
// row in shared memory, store in place; k rows and their v rows then go to the caches (as
// write_kv_kernel). Every intermediate is rounded where the unfused ops store it. (One warp per row
// with its own cosf/sinf spent ~5x the bandwidth time of a prefill step on the trig; one block per
// token left 8 warps to walk 24 heads at batch 1, hence head groups when there are few tokens.)
// T: q, k, v's type; C: the cache element type (T, or KvFp8 storing e4m3(x / scale) as write_kv_kernel).
template <typename T, typename C>
__global__ void qk_norm_rope_write_kv_kernel(QkPrologueArgs a) {
  __shared__ float normed[kWarpsPerBlock][kMaxPrologueHeadDim];
  __shared__ float cos_s[kMaxPrologueHeadDim / 2], sin_s[kMaxPrologueHeadDim / 2];
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float pos = static_cast<float>(a.positions[t]);
  for (int64_t j = threadIdx.x; j < a.half; j += blockDim.x) {
    const float angle = __fmul_rn(pos, a.inv_freq[j]);
    cos_s[j] = round_to<T>(__fmul_rn(cosf(angle), a.attention_scaling));
    sin_s[j] = round_to<T>(__fmul_rn(sinf(angle), a.attention_scaling));
  }
  __syncthreads();
  const int64_t heads = a.num_q_heads + a.num_kv_heads;
  const int64_t d = a.head_dim;
  float* s = normed[warp];
  constexpr int kPerLane = static_cast<int>(kMaxPrologueHeadDim / 32);
  for (int64_t h = blockIdx.y * kWarpsPerBlock + warp; h < heads; h += gridDim.y * kWarpsPerBlock) {
    const bool is_q = h < a.num_q_heads;
    const int64_t kv_head = h - a.num_q_heads;
    T* x = is_q ? row_ptr<T>(a.q, t * a.num_q_heads + h) : row_ptr<T>(a.k, t * a.num_kv_heads + kv_head);
    const T* w = static_cast<const T*>(is_q ? a.q_norm : a.k_norm);
    // Every global read of this head (x, its norm weight, the v row and the slot) at once: one memory
    // latency per head instead of four in a row.
    const T* v_row = is_q ? nullptr : row_ptr<const T>(a.v, t * a.num_kv_heads + kv_head);
    const int64_t slot = is_q ? -1 : a.slot_mapping[t];
    float xv[kPerLane], wv[kPerLane];
    T v_raw[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t i = lane + 32 * j;
      xv[j] = i < d ? to_f32(x[i]) : 0.0f;
      wv[j] = i < d && w != nullptr ? to_f32(w[i]) : 0.0f;
      v_raw[j] = i < d && v_row != nullptr ? v_row[i] : T{};
    }
    if (w == nullptr) {  // a model without q/k norms: RoPE reads the projection as it is
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (lane + 32 * j < d) s[lane + 32 * j] = xv[j];
    } else {
      float sum_sq = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) sum_sq += xv[j] * xv[j];  // zeros past d add nothing
      sum_sq = warp_sum(sum_sq);
      const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(d) + a.eps);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (lane + 32 * j < d) s[lane + 32 * j] = round_to<T>(weighted_norm<T>(xv[j], inv_rms, wv[j], a.norm_form));
    }
    __syncwarp();
    for (int64_t j = lane; j < a.half; j += 32) {  // lane-private pairs (j, j + half)
      const float c = cos_s[j], sn = sin_s[j];
      const float lo = s[j], hi = s[j + a.half];
      s[j] = round_to<T>(__fadd_rn(round_to<T>(__fmul_rn(lo, c)), round_to<T>(__fmul_rn(-hi, sn))));
      s[j + a.half] = round_to<T>(__fadd_rn(round_to<T>(__fmul_rn(hi, c)), round_to<T>(__fmul_rn(lo, sn))));
    }
    __syncwarp();
    for (int64_t i = lane; i < d; i += 32) x[i] = from_f32<T>(s[i]);
    if (!is_q) {
      if (slot >= a.cache.num_blocks * a.cache.block_size) __trap();  // as write_kv
      if (slot >= 0) {
        const int64_t dst = (slot / a.cache.block_size) * a.cache.stride_block +
                            (slot % a.cache.block_size) * a.cache.stride_slot + kv_head * a.cache.stride_head;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          const int64_t i = lane + 32 * j;
          if (i >= d) break;
          if constexpr (kIsFp8Cache<C>) {  // s[i] is the k value as stored in x (rounded to T above)
            static_cast<C*>(a.k_cache)[dst + i] = store_kv<C>(s[i], a.kv_format.k_scale);
            static_cast<C*>(a.v_cache)[dst + i] = store_kv<C>(to_f32(v_raw[j]), a.kv_format.v_scale);
          } else {
            static_cast<T*>(a.k_cache)[dst + i] = from_f32<T>(s[i]);
            static_cast<T*>(a.v_cache)[dst + i] = v_raw[j];
          }
        }
      }
    }
    __syncwarp();  // the next row of this warp overwrites s
  }
}

// ----- copy_ids: one thread per pair --------------------------------------------------------------

__global__ void copy_ids_kernel(int32_t* dst, int64_t dst_size, const int32_t* src, int64_t src_size,
                                const int32_t* pairs, int64_t num_pairs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_pairs) return;
  const int32_t to = pairs[2 * i], from = pairs[2 * i + 1];
  if (to < 0 || to >= dst_size || from < 0 || from >= src_size) __trap();
  dst[to] = src[from];
}

// ----- elementwise ------------------------------------------------------------------------------

template <typename T>
__global__ void add_kernel(Rows out, Rows a, Rows b) {
  const int64_t n = a.num_rows * a.row_size;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / a.row_size, c = i % a.row_size;
    const float sum = __fadd_rn(to_f32(row_ptr<const T>(a, r)[c]), to_f32(row_ptr<const T>(b, r)[c]));
    row_ptr<T>(out, r)[c] = from_f32<T>(sum);
  }
}

// One thread per (row = token * num_heads + head, pair j): pairs are (j, j + half) (rotate_half).
template <typename T>
__global__ void rope_kernel(Rows x, int64_t num_heads, const int32_t* __restrict__ positions,
                           const float* __restrict__ inv_freq, int64_t half, float attention_scaling) {
  const int64_t n = x.num_rows * half;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / half, j = i % half;
    const float angle = __fmul_rn(static_cast<float>(positions[r / num_heads]), inv_freq[j]);
    // cos and sin in f32, times the scaling, rounded to x's dtype (as transformers does).
    const float c = round_to<T>(__fmul_rn(cosf(angle), attention_scaling));
    const float s = round_to<T>(__fmul_rn(sinf(angle), attention_scaling));
    T* row = row_ptr<T>(x, r);
    const float lo = to_f32(row[j]), hi = to_f32(row[j + half]);
    const float lo_out = __fadd_rn(round_to<T>(__fmul_rn(lo, c)), round_to<T>(__fmul_rn(-hi, s)));
    const float hi_out = __fadd_rn(round_to<T>(__fmul_rn(hi, c)), round_to<T>(__fmul_rn(lo, s)));
    row[j] = from_f32<T>(lo_out);
    row[j + half] = from_f32<T>(hi_out);
  }
}

// Block (row, chunk of kThreads * 8 columns); a thread owns 8 consecutive columns, loaded as one
// 16-byte piece of gate and of up when `vector_ok` (16-bit dtype, aligned rows, width % 8 == 0). No
// per-element index division: a prefill of 32k rows x 3,072 ran ~4x under bandwidth with one.
template <typename T, Activation kAct>
__global__ void act_mul_kernel(Rows out, Rows gate_up, bool vector_ok) {
  const int64_t width = out.row_size;
  const int64_t r = blockIdx.x;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 8;
  if (c0 >= width) return;
  const T* in = row_ptr<const T>(gate_up, r);
  T* dst = row_ptr<T>(out, r);
  if constexpr (sizeof(T) == 2) {
    if (vector_ok) {
      alignas(16) T gate[8], up[8], result[8];
      *reinterpret_cast<uint4*>(gate) = *reinterpret_cast<const uint4*>(in + c0);
      *reinterpret_cast<uint4*>(up) = *reinterpret_cast<const uint4*>(in + width + c0);
#pragma unroll
      for (int i = 0; i < 8; ++i) result[i] = act_times<T, kAct>(to_f32(gate[i]), to_f32(up[i]));
      *reinterpret_cast<uint4*>(dst + c0) = *reinterpret_cast<const uint4*>(result);
      return;
    }
  }
  const int64_t c_end = c0 + 8 < width ? c0 + 8 : width;
  for (int64_t c = c0; c < c_end; ++c) dst[c] = act_times<T, kAct>(to_f32(in[c]), to_f32(in[width + c]));
}

// Elementwise maps over rows: out = f(x row r, column c). One thread per element, grid-stride.
template <typename T, typename Fn>
__global__ void map_rows_kernel(Rows out, Rows x, Fn fn) {
  const int64_t n = x.num_rows * x.row_size;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / x.row_size, c = i % x.row_size;
    row_ptr<T>(out, r)[c] = from_f32<T>(fn(to_f32(row_ptr<const T>(x, r)[c]), c));
  }
}

template <typename T>
struct AddBias {
  const T* bias;
  __device__ float operator()(float v, int64_t c) const { return __fadd_rn(v, to_f32(bias[c])); }
};
struct Scale {
  float s;
  __device__ float operator()(float v, int64_t) const { return __fmul_rn(v, s); }
};
template <typename T>
struct Softcap {  // transformers: x / cap, tanh, * cap, each rounded to the dtype
  float cap;
  __device__ float operator()(float v, int64_t) const {
    return __fmul_rn(round_to<T>(tanhf(round_to<T>(__fdiv_rn(v, cap)))), cap);
  }
};

template <typename T>
__global__ void embedding_kernel(Rows out, Rows table, const int32_t* __restrict__ ids) {
  const int64_t width = out.row_size;
  const int64_t n = out.num_rows * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / width, c = i % width;
    const int32_t id = ids[t];
    if (id < 0 || id >= table.num_rows) __trap();  // CPU twin: CHECK "token id outside vocab"
    row_ptr<T>(out, t)[c] = row_ptr<const T>(table, id)[c];
  }
}

// ----- row reductions: one block per row ------------------------------------------------------

// Block-wide reduction of (value, index) pairs to the largest value, ties to the smaller index
// (torch.argmax returns the first maximum).
struct MaxIndex {
  float value;
  int64_t index;
};

__device__ __forceinline__ MaxIndex better(MaxIndex a, MaxIndex b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

__device__ MaxIndex block_argmax(MaxIndex v) {
  __shared__ float values[kWarpsPerBlock];
  __shared__ int64_t indices[kWarpsPerBlock];
  for (int k = 16; k > 0; k >>= 1) {
    const MaxIndex other{__shfl_xor_sync(kFullMask, v.value, k),
                         static_cast<int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(v.index), k))};
    v = better(v, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    values[warp] = v.value;
    indices[warp] = v.index;
  }
  __syncthreads();
  MaxIndex result{values[0], indices[0]};
  for (int w = 1; w < kWarpsPerBlock; ++w) result = better(result, MaxIndex{values[w], indices[w]});
  __syncthreads();
  return result;
}

template <typename T>
__global__ void log_softmax_kernel(Rows out, Rows logits) {
  const int64_t row = blockIdx.x;
  const T* src = row_ptr<const T>(logits, row);
  float* dst = row_ptr<float>(out, row);
  float max_value = -INFINITY;
  for (int64_t i = threadIdx.x; i < logits.row_size; i += blockDim.x) max_value = fmaxf(max_value, to_f32(src[i]));
  max_value = block_reduce<true>(max_value);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < logits.row_size; i += blockDim.x) sum += expf(to_f32(src[i]) - max_value);
  sum = block_reduce<false>(sum);
  const float log_sum = logf(sum) + max_value;
  for (int64_t i = threadIdx.x; i < logits.row_size; i += blockDim.x) dst[i] = to_f32(src[i]) - log_sum;
}

// ----- long rows: one block per row ---------------------------------------------------------
// rms_norm / add_rms_norm of rows of at least kBlockRowMin elements (the hidden size): a warp per
// row would load its 32+ elements per lane one after another (latency-bound, ~20 us a row); a block
// loads the row with every load in flight at once, then reduces (row_norm.cuh).
constexpr int64_t kBlockRowMax = 12 * 1024;  // f32 row in 48 KB of shared memory

bool use_block_rows(int64_t row_size) { return row_size >= kBlockRowMin && row_size <= kBlockRowMax; }

// Out row r reads row src_rows[r] of x (and delta), or row r where src_rows is null. kAdd: x + delta
// first (rounded), stored back into x unless the rows are gathered (add_gather_rms_norm leaves hidden
// as it was).
// Traps on a gathered row outside x (a broken invariant: the rows are validated on the host).
__device__ __forceinline__ int64_t norm_source_row(const int32_t* src_rows, const Rows& x) {
  if (src_rows == nullptr) return blockIdx.x;
  const int64_t row = src_rows[blockIdx.x];
  if (row < 0 || row >= x.num_rows) __trap();
  return row;
}

// Rows of up to kThreads * kPerThread elements keep their values and weights in registers: every
// global read of the row (x, delta and the norm weight) is issued before the first is used, so the
// block waits for memory once. (The weight used to be read after the reduction: a second memory
// latency on the path of every decode step's two norms a layer.)
template <typename T, bool kAdd, int kPerThread>
__global__ void __launch_bounds__(kThreads) block_norm_kernel(Rows out, Rows x, Rows delta, const T* __restrict__ w,
                                                              float eps, NormForm form, const int32_t* src_rows) {
  const int64_t row = norm_source_row(src_rows, x);
  const int d = static_cast<int>(x.row_size);  // <= kThreads * kPerThread
  const int first = static_cast<int>(threadIdx.x);
  T* src = row_ptr<T>(x, row);
  const T* add = kAdd ? row_ptr<const T>(delta, row) : nullptr;
  float v[kPerThread], weight[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = first + j * kThreads;
    v[j] = 0.0f;
    weight[j] = 0.0f;
    if (i < d) {
      v[j] = kAdd ? round_to<T>(__fadd_rn(to_f32(src[i]), to_f32(add[i]))) : to_f32(src[i]);
      weight[j] = to_f32(w[i]);
    }
  }
  store_normed_row<T>(v, weight, d, eps, form, kAdd && src_rows == nullptr ? src : nullptr,
                      row_ptr<T>(out, blockIdx.x));
}

// Rows longer than the register form takes: the row in shared memory (f32), the same arithmetic.
template <typename T, bool kAdd>
__global__ void __launch_bounds__(kThreads) block_norm_smem_kernel(Rows out, Rows x, Rows delta,
                                                                   const T* __restrict__ w, float eps, NormForm form,
                                                                   const int32_t* src_rows) {
  extern __shared__ float row_f32[];
  const int64_t row = norm_source_row(src_rows, x);
  const int d = static_cast<int>(x.row_size);  // <= kBlockRowMax
  const int first = static_cast<int>(threadIdx.x);
  T* src = row_ptr<T>(x, row);
  // Unrolled, so a thread's loads are in flight together: one at a time, each waited for, a 2,880-wide
  // row took ~7.7 us (12 memory latencies in a row) on an H200.
  if constexpr (kAdd) {
    const T* add = row_ptr<const T>(delta, row);
#pragma unroll 8
    for (int i = first; i < d; i += kThreads) row_f32[i] = round_to<T>(__fadd_rn(to_f32(src[i]), to_f32(add[i])));
  } else {
#pragma unroll 8
    for (int i = first; i < d; i += kThreads) row_f32[i] = to_f32(src[i]);
  }
  float sum_sq = 0.0f;  // each thread reads back only the elements it stored; ascending i, as the register form
  for (int i = first; i < d; i += kThreads) sum_sq += row_f32[i] * row_f32[i];
  sum_sq = block_reduce<false>(sum_sq);  // also orders every load above before the stores below
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
  T* dst = row_ptr<T>(out, blockIdx.x);
  const bool store_sum = kAdd && src_rows == nullptr;
#pragma unroll 8
  for (int i = first; i < d; i += kThreads) {
    const float v = row_f32[i];
    if (store_sum) src[i] = from_f32<T>(v);
    const float weight = to_f32(w[i]);
    const float y = weighted_norm<T>(v, inv_rms, weight, form);
    dst[i] = from_f32<T>(y);
  }
}

// One block per row of `out`; the form by row length (the same for rms_norm, add_rms_norm and
// add_gather_rms_norm, so the fused and unfused norms stay equal bit for bit).
template <typename T, bool kAdd>
void launch_block_norm(Rows out, Rows x, Rows delta, const T* w, float eps, NormForm form, cudaStream_t stream,
                       const int32_t* src_rows = nullptr) {
  const auto rows = static_cast<unsigned>(out.num_rows);
  const bool in_registers = with_norm_registers(x.row_size, [&](auto per_thread) {
    block_norm_kernel<T, kAdd, decltype(per_thread)::value><<<rows, kThreads, 0, stream>>>(out, x, delta, w, eps, form,
                                                                                           src_rows);
  });
  if (!in_registers)
    block_norm_smem_kernel<T, kAdd><<<rows, kThreads, x.row_size * sizeof(float), stream>>>(out, x, delta, w, eps, form,
                                                                                          src_rows);
}

// ----- argmax in two passes: kArgmaxSplits blocks per row, then one warp per row ------------------
// One block per 151,936-wide row leaves the GPU nearly idle at batch 1 (~240 us); splitting the row
// over many blocks makes it a few microseconds. The (max, first index) pair is order-independent.
constexpr int kArgmaxSplits = static_cast<int>(kArgmaxScratchPerRow);

template <typename T>
__global__ void __launch_bounds__(kThreads) argmax_partial_kernel(float* part_value, int64_t* part_index, Rows logits) {
  const int64_t row = blockIdx.x, split = blockIdx.y;
  const int64_t chunk = (logits.row_size + kArgmaxSplits - 1) / kArgmaxSplits;
  const int64_t begin = split * chunk;
  const int64_t end = begin + chunk < logits.row_size ? begin + chunk : logits.row_size;
  const T* src = row_ptr<const T>(logits, row);
  MaxIndex best{-INFINITY, logits.row_size};
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) best = better(best, MaxIndex{to_f32(src[i]), i});
  best = block_argmax(best);
  if (threadIdx.x == 0) {
    part_value[row * kArgmaxSplits + split] = best.value;
    part_index[row * kArgmaxSplits + split] = best.index;
  }
}

__global__ void argmax_final_kernel(int32_t* ids, const float* part_value, const int64_t* part_index, int64_t num_rows,
                                    int64_t row_size) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= num_rows) return;
  const int lane = threadIdx.x % 32;
  MaxIndex best{-INFINITY, row_size};
  for (int s = lane; s < kArgmaxSplits; s += 32)
    best = better(best, MaxIndex{part_value[row * kArgmaxSplits + s], part_index[row * kArgmaxSplits + s]});
  for (int k = 16; k > 0; k >>= 1) {
    const MaxIndex other{__shfl_xor_sync(kFullMask, best.value, k),
                         static_cast<int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(best.index), k))};
    best = better(best, other);
  }
  if (lane == 0) ids[row] = static_cast<int32_t>(best.index < row_size ? best.index : 0);
}

// Grid for grid-stride loops: enough blocks to fill the GPU, not more than the work needs.
unsigned stride_blocks(int64_t n) {
  const int64_t cap = 132 * 16;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace

NormForm norm_form(NormWeight mode) {
  switch (mode) {
    case NormWeight::kPlain: return {false, 0.0f};
    case NormWeight::kOnePlus: return {true, 1.0f};
    case NormWeight::kF32Weight: return {true, 0.0f};
  }
  return {};
}

cudaError_t launch_rms_norm(DType dtype, Rows out, Rows x, const void* w, float eps, NormForm form,
                            cudaStream_t stream) {
  if (x.num_rows == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    if (use_block_rows(x.row_size)) {
      launch_block_norm<T, false>(out, x, Rows{}, static_cast<const T*>(w), eps, form, stream);
      return cudaGetLastError();
    }
    rms_norm_kernel<T><<<blocks_for(x.num_rows, kWarpsPerBlock), kThreads, 0, stream>>>(
        out, x, static_cast<const T*>(w), eps, form);
    return cudaGetLastError();
  });
}

cudaError_t launch_add_rms_norm(DType dtype, Rows hidden, Rows normed, Rows delta, const void* w, float eps,
                                NormForm form, cudaStream_t stream) {
  if (hidden.num_rows == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    if (use_block_rows(hidden.row_size)) {  // the same rule as launch_rms_norm: equal results
      launch_block_norm<T, true>(normed, hidden, delta, static_cast<const T*>(w), eps, form, stream);
      return cudaGetLastError();
    }
    add_rms_norm_kernel<T><<<blocks_for(hidden.num_rows, kWarpsPerBlock), kThreads, 0, stream>>>(
        hidden, normed, delta, static_cast<const T*>(w), eps, form);
    return cudaGetLastError();
  });
}

cudaError_t launch_add_gather_rms_norm(DType dtype, Rows out, Rows hidden, Rows delta, const int32_t* rows,
                                       const void* w, float eps, NormForm form, cudaStream_t stream) {
  if (out.num_rows == 0) return cudaSuccess;
  if (!use_block_rows(hidden.row_size)) {  // rows of the warp form: the three ops it stands for
    cudaError_t e = launch_add(dtype, hidden, hidden, delta, stream);
    if (e == cudaSuccess) e = launch_embedding(dtype, out, hidden, rows, stream);
    return e == cudaSuccess ? launch_rms_norm(dtype, out, out, w, eps, form, stream) : e;
  }
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    launch_block_norm<T, true>(out, hidden, delta, static_cast<const T*>(w), eps, form, stream, rows);
    return cudaGetLastError();
  });
}

cudaError_t launch_qk_norm_rope_write_kv(DType dtype, const QkPrologueArgs& args, cudaStream_t stream) {
  const int64_t rows = args.num_tokens * (args.num_q_heads + args.num_kv_heads);
  if (rows == 0) return cudaSuccess;
  if (args.head_dim > kMaxPrologueHeadDim || 2 * args.half > args.head_dim) return cudaErrorInvalidValue;
  return dispatch_kv(dtype, args.kv_format.cache_dtype, [&](auto t, auto c) {
    // Few tokens (decode): spread a token's heads over blocks so every head has its own warp.
    const int64_t heads = args.num_q_heads + args.num_kv_heads;
    const int64_t head_groups = args.num_tokens < kFewPrologueTokens ? (heads + kWarpsPerBlock - 1) / kWarpsPerBlock : 1;
    const dim3 grid(static_cast<unsigned>(args.num_tokens), static_cast<unsigned>(head_groups));
    qk_norm_rope_write_kv_kernel<decltype(t), decltype(c)><<<grid, kThreads, 0, stream>>>(args);
    return cudaGetLastError();
  });
}

cudaError_t launch_add(DType dtype, Rows out, Rows a, Rows b, cudaStream_t stream) {
  if (a.num_rows * a.row_size == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    add_kernel<decltype(t)><<<stride_blocks(a.num_rows * a.row_size), kThreads, 0, stream>>>(out, a, b);
    return cudaGetLastError();
  });
}

cudaError_t launch_rope(DType dtype, Rows x, int64_t num_heads, const int32_t* positions, const float* inv_freq,
                        int64_t half, float attention_scaling, cudaStream_t stream) {
  if (x.num_rows * half == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    rope_kernel<decltype(t)><<<stride_blocks(x.num_rows * half), kThreads, 0, stream>>>(
        x, num_heads, positions, inv_freq, half, attention_scaling);
    return cudaGetLastError();
  });
}

cudaError_t launch_act_mul(DType dtype, Rows out, Rows gate_up, Activation act, cudaStream_t stream) {
  if (out.num_rows * out.row_size == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    auto aligned = [](const Rows& rows) {
      return reinterpret_cast<uintptr_t>(rows.data) % 16 == 0 && rows.outer_stride % 8 == 0 &&
             (rows.inner_rows == 1 || rows.inner_stride % 8 == 0);
    };
    const bool vector_ok = sizeof(T) == 2 && out.row_size % 8 == 0 && aligned(out) && aligned(gate_up);
    const dim3 grid(static_cast<unsigned>(out.num_rows), blocks_for(out.row_size, int64_t{kThreads} * 8));
    switch (act) {
      case Activation::kSilu: act_mul_kernel<T, Activation::kSilu><<<grid, kThreads, 0, stream>>>(out, gate_up, vector_ok); break;
      case Activation::kGeluTanh:
        act_mul_kernel<T, Activation::kGeluTanh><<<grid, kThreads, 0, stream>>>(out, gate_up, vector_ok);
        break;
      case Activation::kClampedSwiglu:
        act_mul_kernel<T, Activation::kClampedSwiglu><<<grid, kThreads, 0, stream>>>(out, gate_up, vector_ok);
        break;
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_add_bias(DType dtype, Rows x, const void* bias, cudaStream_t stream) {
  if (x.num_rows * x.row_size == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    map_rows_kernel<T><<<stride_blocks(x.num_rows * x.row_size), kThreads, 0, stream>>>(
        x, x, AddBias<T>{static_cast<const T*>(bias)});
    return cudaGetLastError();
  });
}

cudaError_t launch_scale(DType dtype, Rows out, Rows x, float s, cudaStream_t stream) {
  if (x.num_rows * x.row_size == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    map_rows_kernel<decltype(t)><<<stride_blocks(x.num_rows * x.row_size), kThreads, 0, stream>>>(out, x, Scale{s});
    return cudaGetLastError();
  });
}

cudaError_t launch_softcap(DType dtype, Rows x, float cap, cudaStream_t stream) {
  if (x.num_rows * x.row_size == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    map_rows_kernel<T><<<stride_blocks(x.num_rows * x.row_size), kThreads, 0, stream>>>(x, x, Softcap<T>{cap});
    return cudaGetLastError();
  });
}

cudaError_t launch_embedding(DType dtype, Rows out, Rows table, const int32_t* ids, cudaStream_t stream) {
  if (out.num_rows * out.row_size == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    embedding_kernel<decltype(t)><<<stride_blocks(out.num_rows * out.row_size), kThreads, 0, stream>>>(out, table, ids);
    return cudaGetLastError();
  });
}

cudaError_t launch_copy_ids(int32_t* dst, int64_t dst_size, const int32_t* src, int64_t src_size, const int32_t* pairs,
                            int64_t num_pairs, cudaStream_t stream) {
  if (num_pairs == 0) return cudaSuccess;
  copy_ids_kernel<<<blocks_for(num_pairs, kThreads), kThreads, 0, stream>>>(dst, dst_size, src, src_size, pairs,
                                                                            num_pairs);
  return cudaGetLastError();
}

cudaError_t launch_argmax(DType dtype, int32_t* ids, Rows logits, float* part_value, int64_t* part_index,
                          cudaStream_t stream) {
  if (logits.num_rows == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    const dim3 grid(static_cast<unsigned>(logits.num_rows), kArgmaxSplits);
    argmax_partial_kernel<decltype(t)><<<grid, kThreads, 0, stream>>>(part_value, part_index, logits);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    argmax_final_kernel<<<blocks_for(logits.num_rows, kWarpsPerBlock), kThreads, 0, stream>>>(
        ids, part_value, part_index, logits.num_rows, logits.row_size);
    return cudaGetLastError();
  });
}

cudaError_t launch_log_softmax(DType dtype, Rows out_f32, Rows logits, cudaStream_t stream) {
  if (logits.num_rows == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    log_softmax_kernel<decltype(t)><<<static_cast<unsigned>(logits.num_rows), kThreads, 0, stream>>>(out_f32, logits);
    return cudaGetLastError();
  });
}

}  // namespace pagellm::cuda
