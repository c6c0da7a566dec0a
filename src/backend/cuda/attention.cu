// CUDA twin of backend/cpu/attention.cpp: write_kv and the varlen paged attention (prefill, decode
// and mixed batches alike). Layouts and the visibility rule are drawn in backend/cpu/attention.h.
//
// Work decomposition of the attention (planned on the host, DESIGN.md rule 6):
//
//   block  = (query row, query head[, split]); 4 warps of 32 lanes. Lane l holds head dims
//            [l * V, l * V + V) of q and of its accumulator, V = kDimsPerLane = ceil(head_dim / 32).
//   keys   = absolute positions cut into partitions of kAttentionPartition (128) keys. Inside a
//            partition, warp w takes keys [w * 32, w * 32 + 32) in one chunk of 32: each lane owns one
//            key's score (q.k reduced over the warp), the chunk updates the warp's online-softmax state
//            (m, l, acc), then the 4 warp states are folded in warp order into the partition state.
//   single pass (num_splits == 1): the block folds its row's partitions in order into a running
//            state and writes acc / l.
//   split  (num_splits > 1, "flash-decoding" for few long rows): block (row, head, split) computes
//            partition `split` alone, stores (acc, m, l) in `partials`, and merge_kernel folds the
//            partitions in order.
//   Both routes fold the same partition states in the same order with the same (non-contracted)
//   arithmetic, so a row's output does not depend on the split or on the rest of the batch.
#include <cfloat>

#include "backend/cuda/device_common.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 32;  // keys per warp step: one per lane
constexpr int64_t kKeysPerWarp = kAttentionPartition / kWarps;
static_assert(kKeysPerWarp % kChunk == 0);

// ----- write_kv -------------------------------------------------------------------------------

template <typename T>
__global__ void write_kv_kernel(T* k_cache, T* v_cache, CacheLayout cache, Rows k, Rows v,
                                const int64_t* __restrict__ slot_mapping, int64_t num_tokens) {
  const int64_t per_token = cache.num_kv_heads * cache.head_dim;
  const int64_t n = num_tokens * per_token;
  const int64_t num_slots = cache.num_blocks * cache.block_size;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_token, rest = i % per_token;
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    if (slot >= num_slots) __trap();  // CPU twin: CHECK "slot outside the cache"
    const int64_t h = rest / cache.head_dim, d = rest % cache.head_dim;
    const int64_t dst = (slot / cache.block_size) * cache.stride_block + (slot % cache.block_size) * cache.stride_slot +
                        h * cache.stride_head + d;
    k_cache[dst] = row_ptr<const T>(k, t * cache.num_kv_heads + h)[d];
    v_cache[dst] = row_ptr<const T>(v, t * cache.num_kv_heads + h)[d];
  }
}

// ----- attention helpers ----------------------------------------------------------------------

// Folds a partial softmax state (m, l, acc) into a running one: the CPU twin's fold_partial.
// __fmul_rn/__fadd_rn keep nvcc from contracting differently in the two kernels that use it.
__device__ __forceinline__ void fold_scalars(float& run_m, float& run_l, float m, float l, float& run_scale,
                                             float& part_scale) {
  const float m_new = fmaxf(run_m, m);
  run_scale = expf(run_m - m_new);  // 0 for the first state (run_m = -inf)
  part_scale = expf(m - m_new);
  run_l = __fadd_rn(__fmul_rn(run_l, run_scale), __fmul_rn(l, part_scale));
  run_m = m_new;
}
__device__ __forceinline__ float fold_acc(float run_acc, float acc, float run_scale, float part_scale) {
  return __fadd_rn(__fmul_rn(run_acc, run_scale), __fmul_rn(acc, part_scale));
}

__device__ __forceinline__ void store_any(void* base, DType dtype, int64_t offset, float value) {
  switch (dtype) {
    case DType::kBF16: static_cast<__nv_bfloat16*>(base)[offset] = __float2bfloat16_rn(value); break;
    case DType::kF16: static_cast<__half*>(base)[offset] = __float2half_rn(value); break;
    default: static_cast<float*>(base)[offset] = value; break;
  }
}

// Reads this lane's V elements of a head vector (zeros past head_dim). `vector_ok`: head_dim is a
// multiple of V and the data aligned, so the V elements load as one or two wide accesses.
template <typename T, int V>
__device__ __forceinline__ void load_lane(const T* row, int lane, int64_t head_dim, bool vector_ok, float (&out)[V]) {
  const int64_t first = static_cast<int64_t>(lane) * V;
  if (vector_ok) {
    constexpr int kBytes = V * static_cast<int>(sizeof(T));
    alignas(16) T tmp[V];
    if (first < head_dim) {
      if constexpr (kBytes >= 16) {
#pragma unroll
        for (int i = 0; i < kBytes / 16; ++i) reinterpret_cast<uint4*>(tmp)[i] = reinterpret_cast<const uint4*>(row + first)[i];
      } else if constexpr (kBytes == 8) {
        *reinterpret_cast<uint2*>(tmp) = *reinterpret_cast<const uint2*>(row + first);
      } else if constexpr (kBytes == 4) {
        *reinterpret_cast<uint32_t*>(tmp) = *reinterpret_cast<const uint32_t*>(row + first);
      } else {
        tmp[0] = row[first];
      }
#pragma unroll
      for (int i = 0; i < V; ++i) out[i] = to_f32(tmp[i]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) out[i] = 0.0f;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = first + i < head_dim ? to_f32(row[first + i]) : 0.0f;
}

struct RowPlace {
  int64_t seq = -1;         // -1: the row is past the batch (left untouched)
  int64_t key_begin = 0, key_end = 0;  // visible keys
};

__device__ RowPlace place_row(const AttentionArgs& a, int64_t row) {
  RowPlace place;
  if (row >= a.cu_seqlens_q[a.num_seqs]) return place;
  int64_t lo = 0, hi = a.num_seqs;  // cu[lo] <= row < cu[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (a.cu_seqlens_q[mid] <= row) lo = mid; else hi = mid;
  }
  place.seq = lo;
  const int64_t row_first = a.cu_seqlens_q[lo];
  const int64_t q_len = a.cu_seqlens_q[lo + 1] - row_first;
  const int64_t context_len = a.seq_lens_k[lo];
  const int64_t pos = context_len - q_len + (row - row_first);
  place.key_end = a.causal ? min(context_len, pos + 1) : context_len;
  place.key_begin = a.window > 0 ? max(int64_t{0}, pos - a.window + 1) : 0;
  if (place.key_end < place.key_begin) place.key_end = place.key_begin;
  return place;
}

// ----- attention ------------------------------------------------------------------------------

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a, bool vector_ok, int num_splits,
                                                             float* __restrict__ partials) {
  constexpr int kOwn = (32 * V + kThreads - 1) / kThreads;  // head dims folded per thread
  __shared__ float warp_acc[kWarps][32 * V];
  __shared__ float warp_m[kWarps], warp_l[kWarps];

  const int64_t row_head = blockIdx.x;
  const int64_t row = row_head / a.num_heads, head = row_head % a.num_heads;
  const RowPlace place = place_row(a, row);
  if (place.seq < 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t head_dim = a.k_layout.head_dim;
  const int64_t kv_head = head / (a.num_heads / a.k_layout.num_kv_heads);
  const int32_t* table = a.block_tables + place.seq * a.block_table_stride;
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);
  const int64_t block_size = a.k_layout.block_size;

  float q[V];
  load_lane<T, V>(static_cast<const T*>(a.q) + row * a.q_stride_row + head * a.q_stride_head, lane, head_dim,
                  vector_ok, q);

  int64_t part_begin, part_end;
  if (num_splits > 1) {
    part_begin = blockIdx.y;
    part_end = part_begin + 1;
  } else if (place.key_end > place.key_begin) {
    part_begin = place.key_begin / kAttentionPartition;
    part_end = (place.key_end - 1) / kAttentionPartition + 1;
  } else {
    part_begin = part_end = 0;
  }

  float run_m = -INFINITY, run_l = 0.0f, run_acc[kOwn];
#pragma unroll
  for (int i = 0; i < kOwn; ++i) run_acc[i] = 0.0f;

  for (int64_t part = part_begin; part < part_end; ++part) {
    // This warp's online softmax over its keys of the partition.
    float m = -INFINITY, l = 0.0f, acc[V];
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = 0.0f;
    const int64_t warp_first = part * kAttentionPartition + warp * kKeysPerWarp;
    for (int64_t chunk = warp_first; chunk < warp_first + kKeysPerWarp; chunk += kChunk) {
      const int64_t key = chunk + lane;
      const bool valid = key >= place.key_begin && key < place.key_end;
      const unsigned valid_mask = __ballot_sync(kFullMask, valid);
      if (valid_mask == 0) continue;
      long long k_off = 0, v_off = 0;
      if (valid) {
        const int64_t block = table[key / block_size], in_block = key % block_size;
        k_off = block * a.k_layout.stride_block + in_block * a.k_layout.stride_slot + kv_head * a.k_layout.stride_head;
        v_off = block * a.v_layout.stride_block + in_block * a.v_layout.stride_slot + kv_head * a.v_layout.stride_head;
      }
      float score = -INFINITY;  // of this lane's key
      for (int j = 0; j < kChunk; ++j) {
        if (!((valid_mask >> j) & 1u)) continue;
        float k[V];
        load_lane<T, V>(k_cache + __shfl_sync(kFullMask, k_off, j), lane, head_dim, vector_ok, k);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < V; ++i) dot += q[i] * k[i];
        dot = warp_sum(dot);
        if (lane == j) score = dot;
      }
      if (valid) {
        score *= a.scale;
        if (a.softcap > 0.0f) score = a.softcap * tanhf(score / a.softcap);
      }
      const float m_new = fmaxf(m, warp_max(score));
      const float correction = m == -INFINITY ? 0.0f : expf(m - m_new);
      const float p = valid ? expf(score - m_new) : 0.0f;
      l = l * correction + warp_sum(p);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] *= correction;
      for (int j = 0; j < kChunk; ++j) {
        if (!((valid_mask >> j) & 1u)) continue;
        const float p_j = __shfl_sync(kFullMask, p, j);
        float v[V];
        load_lane<T, V>(v_cache + __shfl_sync(kFullMask, v_off, j), lane, head_dim, vector_ok, v);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] += p_j * v[i];
      }
      m = m_new;
    }
    if (lane == 0) {
      warp_m[warp] = m;
      warp_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) warp_acc[warp][lane * V + i] = acc[i];
    __syncthreads();

    // Partition state = the warp states folded in warp order; then folded into the running state.
    float part_m = -INFINITY, part_l = 0.0f, part_acc[kOwn];
#pragma unroll
    for (int i = 0; i < kOwn; ++i) part_acc[i] = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (warp_m[w] == -INFINITY) continue;
      float run_scale, part_scale;
      fold_scalars(part_m, part_l, warp_m[w], warp_l[w], run_scale, part_scale);
#pragma unroll
      for (int i = 0; i < kOwn; ++i) {
        const int d = threadIdx.x + i * kThreads;
        if (d < 32 * V) part_acc[i] = fold_acc(part_acc[i], warp_acc[w][d], run_scale, part_scale);
      }
    }
    if (part_m != -INFINITY) {
      float run_scale, part_scale;
      fold_scalars(run_m, run_l, part_m, part_l, run_scale, part_scale);
#pragma unroll
      for (int i = 0; i < kOwn; ++i) run_acc[i] = fold_acc(run_acc[i], part_acc[i], run_scale, part_scale);
    }
    __syncthreads();  // before the next partition overwrites the warp states
  }

  if (num_splits > 1) {
    float* state = partials + (row_head * num_splits + blockIdx.y) * (head_dim + 2);
#pragma unroll
    for (int i = 0; i < kOwn; ++i) {
      const int64_t d = threadIdx.x + i * kThreads;
      if (d < head_dim) state[d] = run_acc[i];
    }
    if (threadIdx.x == 0) {
      state[head_dim] = run_m;
      state[head_dim + 1] = run_l;
    }
    return;
  }
  const int64_t out_offset = row * a.out_stride_row + head * a.out_stride_head;
#pragma unroll
  for (int i = 0; i < kOwn; ++i) {
    const int64_t d = threadIdx.x + i * kThreads;
    // A row that saw no key is written as zeros.
    if (d < head_dim) store_any(a.out, a.out_dtype, out_offset + d, run_l > 0.0f ? run_acc[i] / run_l : 0.0f);
  }
}

// Folds the split partition states of one (row, head) in partition order and writes the output.
__global__ void __launch_bounds__(kThreads) merge_kernel(AttentionArgs a, int num_splits,
                                                         const float* __restrict__ partials) {
  const int64_t row_head = blockIdx.x;
  const int64_t row = row_head / a.num_heads, head = row_head % a.num_heads;
  if (row >= a.cu_seqlens_q[a.num_seqs]) return;
  const int64_t head_dim = a.k_layout.head_dim;
  const float* states = partials + row_head * num_splits * (head_dim + 2);
  const int64_t out_offset = row * a.out_stride_row + head * a.out_stride_head;
  for (int64_t d = threadIdx.x; d < head_dim; d += kThreads) {
    float run_m = -INFINITY, run_l = 0.0f, run_acc = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      const float* state = states + s * (head_dim + 2);
      const float m = state[head_dim];
      if (m == -INFINITY) continue;
      float run_scale, part_scale;
      fold_scalars(run_m, run_l, m, state[head_dim + 1], run_scale, part_scale);
      run_acc = fold_acc(run_acc, state[d], run_scale, part_scale);
    }
    store_any(a.out, a.out_dtype, out_offset + d, run_l > 0.0f ? run_acc / run_l : 0.0f);
  }
}

template <typename T, int V>
cudaError_t run_attention(const AttentionArgs& a, int64_t num_splits, float* partials, cudaStream_t stream) {
  const int64_t head_dim = a.k_layout.head_dim;
  // Wide loads need head_dim % V == 0 and every row start aligned to V elements (up to 16 bytes).
  const uintptr_t align = (V * sizeof(T)) >= 16 ? 16 : V * sizeof(T);
  const bool strides_ok = head_dim % V == 0 && a.q_stride_row % V == 0 && a.q_stride_head % V == 0 &&
                          a.k_layout.stride_block % V == 0 && a.k_layout.stride_slot % V == 0 &&
                          a.k_layout.stride_head % V == 0 && a.v_layout.stride_block % V == 0 &&
                          a.v_layout.stride_slot % V == 0 && a.v_layout.stride_head % V == 0;
  const bool vector_ok = strides_ok && reinterpret_cast<uintptr_t>(a.q) % align == 0 &&
                         reinterpret_cast<uintptr_t>(a.k_cache) % align == 0 &&
                         reinterpret_cast<uintptr_t>(a.v_cache) % align == 0;
  const dim3 grid(static_cast<unsigned>(a.num_tokens * a.num_heads), static_cast<unsigned>(num_splits));
  attention_kernel<T, V><<<grid, kThreads, 0, stream>>>(a, vector_ok, static_cast<int>(num_splits), partials);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess || num_splits <= 1) return status;
  merge_kernel<<<static_cast<unsigned>(a.num_tokens * a.num_heads), kThreads, 0, stream>>>(
      a, static_cast<int>(num_splits), partials);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_write_kv(DType dtype, void* k_cache, void* v_cache, CacheLayout cache, Rows k, Rows v,
                            const int64_t* slot_mapping, int64_t num_tokens, cudaStream_t stream) {
  const int64_t n = num_tokens * cache.num_kv_heads * cache.head_dim;
  if (n == 0) return cudaSuccess;
  const unsigned max_blocks = 132 * 16;
  const unsigned blocks = blocks_for(n, 256) < max_blocks ? blocks_for(n, 256) : max_blocks;
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    write_kv_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(k_cache), static_cast<T*>(v_cache), cache, k, v,
                                                   slot_mapping, num_tokens);
    return cudaGetLastError();
  });
}

// The one dispatch point: dtype and dims per lane (head_dim <= 32 * V) become template parameters.
cudaError_t launch_attention(DType dtype, const AttentionArgs& args, int64_t num_splits, float* partials,
                             cudaStream_t stream) {
  if (args.num_tokens * args.num_heads == 0) return cudaSuccess;
  const int64_t head_dim = args.k_layout.head_dim;
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    if (head_dim <= 32) return run_attention<T, 1>(args, num_splits, partials, stream);
    if (head_dim <= 64) return run_attention<T, 2>(args, num_splits, partials, stream);
    if (head_dim <= 128) return run_attention<T, 4>(args, num_splits, partials, stream);
    if (head_dim <= 256) return run_attention<T, 8>(args, num_splits, partials, stream);
    return cudaErrorInvalidValue;
  });
}

}  // namespace pagellm::cuda
