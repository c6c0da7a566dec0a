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
//
// The decode kernel (sequences with q_len == 1; see AttentionPlan in kernels.h) computes the very
// same chunk states with a layout built for bandwidth: block = (sequence, kv head[, split]), 128
// threads. Chunks of 32 keys of the kv head stream into shared memory (16-byte cp.async, 3 stages in
// flight) and serve every query head of the GQA group, so K and V are read from memory once:
//   scores: 4 threads per key (thread r sums the head-dim groups l = r (mod 4) of the lane layout
//           above, in the butterfly's tree order), 2 shuffles finish the dot: bitwise the general
//           kernel's warp_sum;
//   softmax: one warp per query head folds the chunk's (m, l) as a warp of the general kernel does;
//   P.V:    thread = (query head, pair of head dims), a sequential fma chain over the chunk's keys.
// Chunk states fold into partition states and those into the row's state in order, in registers
// (one pass) or through `partials` and decode_merge_kernel (splits).
#include <cfloat>
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/quant_pairs.cuh"  // allow_dynamic_smem

namespace pagellm::cuda {
namespace {

constexpr int kWarps = 4;

constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 32;  // keys per warp step: one per lane
constexpr int64_t kKeysPerWarp = kAttentionPartition / kWarps;
static_assert(kKeysPerWarp % kChunk == 0);

// ----- write_kv -------------------------------------------------------------------------------

// T: the rows' type; C: the cache element type (T, or KvFp8 with the format's scales).
template <typename T, typename C>
__global__ void write_kv_kernel(C* k_cache, C* v_cache, CacheLayout cache, KvFormat format, Rows k, Rows v,
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
    const T k_value = row_ptr<const T>(k, t * cache.num_kv_heads + h)[d];
    const T v_value = row_ptr<const T>(v, t * cache.num_kv_heads + h)[d];
    if constexpr (kIsFp8Cache<C>) {
      k_cache[dst] = store_kv<C>(to_f32(k_value), format.k_scale);
      v_cache[dst] = store_kv<C>(to_f32(v_value), format.v_scale);
    } else {
      k_cache[dst] = k_value;  // a float cache of the rows' dtype: copied as is
      v_cache[dst] = v_value;
    }
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
      } else if constexpr (kBytes == 2 && V == 2) {  // two FP8 elements
        *reinterpret_cast<uint16_t*>(tmp) = *reinterpret_cast<const uint16_t*>(row + first);
      } else {
        static_assert(V == 1, "load_lane: V elements of this size");
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

// load_lane for a K or V cache row of element type C: FP8 elements are multiplied by their scale
// (float caches read as they are, bit for bit as before).
template <typename C, int V>
__device__ __forceinline__ void load_lane_kv(const C* row, int lane, int64_t head_dim, bool vector_ok, float scale,
                                             float (&out)[V]) {
  load_lane<C, V>(row, lane, head_dim, vector_ok, out);
  if constexpr (kIsFp8Cache<C>) {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = __fmul_rn(out[i], scale);
  }
}

struct RowPlace {
  int64_t seq = -1;         // -1: the row is past the batch (left untouched)
  int64_t q_len = 0;
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
  place.q_len = q_len;
  const int64_t context_len = a.seq_lens_k[lo];
  const KeyRange keys = visible_keys(a, context_len, context_len - q_len + (row - row_first));
  place.key_begin = keys.begin;
  place.key_end = keys.end;
  return place;
}

// ----- attention ------------------------------------------------------------------------------

template <typename T, typename C, int V>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a, bool vector_ok, int num_splits,
                                                             bool skip_decode, float* __restrict__ partials) {
  constexpr int kOwn = (32 * V + kThreads - 1) / kThreads;  // head dims folded per thread
  __shared__ float warp_acc[kWarps][32 * V];
  __shared__ float warp_m[kWarps], warp_l[kWarps];

  const int64_t row_head = blockIdx.x;
  const int64_t row = row_head / a.num_heads, head = row_head % a.num_heads;
  const RowPlace place = place_row(a, row);
  if (place.seq < 0 || (skip_decode && place.q_len == 1)) return;  // the decode kernel's rows
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t head_dim = a.k_layout.head_dim;
  const int64_t kv_head = head / (a.num_heads / a.k_layout.num_kv_heads);
  const int32_t* table = a.block_tables + place.seq * a.block_table_stride;
  const C* k_cache = static_cast<const C*>(a.k_cache);
  const C* v_cache = static_cast<const C*>(a.v_cache);
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
        load_lane_kv<C, V>(k_cache + __shfl_sync(kFullMask, k_off, j), lane, head_dim, vector_ok, a.kv_format.k_scale, k);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < V; ++i) dot = __fmaf_rn(q[i], k[i], dot);
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
        load_lane_kv<C, V>(v_cache + __shfl_sync(kFullMask, v_off, j), lane, head_dim, vector_ok, a.kv_format.v_scale, v);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = __fmaf_rn(p_j, v[i], acc[i]);
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
    if (d < head_dim) store_any(a.out, a.out_dtype, out_offset + d, finish_row(a, head, run_m, run_l, run_acc[i]));
  }
}

// Folds the split partition states of one (row, head) in partition order and writes the output.
__global__ void __launch_bounds__(kThreads) merge_kernel(AttentionArgs a, int num_splits, bool skip_decode,
                                                         const float* __restrict__ partials) {
  const int64_t row_head = blockIdx.x;
  const int64_t row = row_head / a.num_heads, head = row_head % a.num_heads;
  if (row >= a.cu_seqlens_q[a.num_seqs]) return;
  if (skip_decode && place_row(a, row).q_len == 1) return;
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
    store_any(a.out, a.out_dtype, out_offset + d, finish_row(a, head, run_m, run_l, run_acc));
  }
}

// ----- decode kernel --------------------------------------------------------------------------

constexpr int kDecodeStages = 3;       // chunks in flight (cp.async groups)
constexpr int kDecodeMaxSlots = 8;     // (query head, head-dim pair) slots per thread
constexpr int kScalars = 10;           // per query head, in shared memory (see decode_kernel)

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// V consecutive elements of T (aligned to min(16, V * sizeof(T)) bytes) as floats.
template <typename T, int V>
__device__ __forceinline__ void load_group(const T* src, float (&out)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  alignas(16) T tmp[V];
  if constexpr (kBytes >= 16) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) reinterpret_cast<uint4*>(tmp)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(tmp) = *reinterpret_cast<const uint2*>(src);
  } else if constexpr (kBytes == 4) {
    *reinterpret_cast<uint32_t*>(tmp) = *reinterpret_cast<const uint32_t*>(src);
  } else if constexpr (kBytes == 2 && V == 2) {  // two FP8 elements
    *reinterpret_cast<uint16_t*>(tmp) = *reinterpret_cast<const uint16_t*>(src);
  } else {
    static_assert(V == 1, "load_group: V elements of this size");
    tmp[0] = src[0];
  }
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_f32(tmp[i]);
}
template <int V>
__device__ __forceinline__ void load_group_f32(const float* src, float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      const float4 x = reinterpret_cast<const float4*>(src)[i];
      out[4 * i] = x.x, out[4 * i + 1] = x.y, out[4 * i + 2] = x.z, out[4 * i + 3] = x.w;
    }
  } else if constexpr (V == 2) {
    const float2 x = *reinterpret_cast<const float2*>(src);
    out[0] = x.x, out[1] = x.y;
  } else {
    out[0] = src[0];
  }
}
template <typename T>
__device__ __forceinline__ void load_pair(const T* src, float& x, float& y) {
  if constexpr (sizeof(T) == 4) {
    const float2 v = *reinterpret_cast<const float2*>(src);
    x = v.x, y = v.y;
  } else if constexpr (sizeof(T) == 2) {
    alignas(4) T tmp[2];
    *reinterpret_cast<uint32_t*>(tmp) = *reinterpret_cast<const uint32_t*>(src);
    x = to_f32(tmp[0]), y = to_f32(tmp[1]);
  } else if constexpr (sizeof(T) == 1) {  // FP8 (unscaled here; the caller applies the scale)
    alignas(2) T tmp[2];
    *reinterpret_cast<uint16_t*>(tmp) = *reinterpret_cast<const uint16_t*>(src);
    x = to_f32(tmp[0]), y = to_f32(tmp[1]);
  }
}

// The visible keys of a decode sequence (q_len == 1: the query sits at position context - 1).
struct DecodeKeys {
  int64_t key_begin, key_end, chunk_begin, chunk_end;  // chunks of 32 keys, absolute
};
__device__ __forceinline__ DecodeKeys decode_keys(const AttentionArgs& a, int64_t seq, int64_t max_chunks) {
  DecodeKeys k;
  const int64_t context = a.seq_lens_k[seq];
  const KeyRange visible = visible_keys(a, context, context - 1);  // the query sits at context - 1
  k.key_end = visible.end;
  k.key_begin = visible.begin;
  if (k.key_end > max_chunks * kChunk) k.key_end = max_chunks * kChunk;  // past the plan's max_keys
  if (k.key_end < k.key_begin) k.key_end = k.key_begin;
  k.chunk_begin = k.key_begin / kChunk;
  k.chunk_end = k.key_end > k.key_begin ? (k.key_end + kChunk - 1) / kChunk : k.chunk_begin;
  return k;
}

constexpr int kChunksPerPartition = static_cast<int>(kAttentionPartition / kChunk);

// Block (sequence, kv head, split). Shared memory: kDecodeStages stages of [K rows | V rows] (32 keys,
// row_bytes each: head_dim elements + 16 bytes of padding against bank conflicts), q as f32
// [group, head_dim], probabilities [group, 32], and kScalars floats per query head:
//   0 part_m, 1 part_l, 2 run_m, 3 run_l (the online-softmax states, written by one lane),
//   4, 5 the scales folding this chunk into the partition; 6, 7 the partition into the row;
//   8 this chunk has keys; 9 the partition is folded into the row now.
// T: q's type; C: the cache element type (T, or KvFp8: smem rows hold the FP8 bytes, dequantized
// with the format's scales as they are read, exactly as the general kernel's load_lane_kv).
// Block x = (sequence, kv head, head part): a part computes `group` of the kv head's group * head_parts
// query heads (at batch 1 the (sequence, kv head) blocks are too few, and each head's arithmetic does
// not depend on which block computes it, so a row's output is the same bits for any head_parts).
template <typename T, typename C, int V>
__global__ void __launch_bounds__(kThreads) decode_kernel(AttentionArgs a, int group, int head_parts, int row_bytes,
                                                          int num_splits, int unit_chunks, int64_t num_units,
                                                          float* __restrict__ partials) {
  extern __shared__ __align__(16) unsigned char smem[];
  // Index arithmetic in 32 bits where it fits (grid indices, chunks, keys of one sequence): a 64-bit
  // division is ~70 instructions, and integer work was half of a one-chunk block's (ncu, H200).
  const int num_kv_heads = static_cast<int>(a.k_layout.num_kv_heads);
  const int pair = static_cast<int>(blockIdx.x) / head_parts, part = static_cast<int>(blockIdx.x) % head_parts;
  const int64_t seq = pair / num_kv_heads, kv_head = pair % num_kv_heads;
  const int64_t row = a.cu_seqlens_q[seq];
  if (a.cu_seqlens_q[seq + 1] - row != 1) return;  // the general kernel's sequence
  const int64_t head_dim = a.k_layout.head_dim;
  const bool split = num_splits > 1;
  const DecodeKeys keys = decode_keys(a, seq, num_units * unit_chunks);
  int64_t chunk_begin = keys.chunk_begin, chunk_end = keys.chunk_end;
  if (split) {
    if (chunk_end == chunk_begin) return;  // the merge writes the zeros
    const int unit_begin = static_cast<int>(chunk_begin) / unit_chunks;
    const int unit_end = (static_cast<int>(chunk_end) + unit_chunks - 1) / unit_chunks;
    const int per = (unit_end - unit_begin + num_splits - 1) / num_splits;
    const int first = unit_begin + static_cast<int>(blockIdx.y) * per, last = min(unit_end, first + per);
    if (first >= last) return;
    chunk_begin = max(chunk_begin, static_cast<int64_t>(first) * unit_chunks);
    chunk_end = min(chunk_end, static_cast<int64_t>(last) * unit_chunks);
  }
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int stage_bytes = 2 * kChunk * row_bytes;
  float* q_s = reinterpret_cast<float*>(smem + kDecodeStages * stage_bytes);
  float* p_s = q_s + group * head_dim;
  float* scalars = p_s + group * kChunk;
  const int64_t first_head = (kv_head * head_parts + part) * group;
  const int64_t num_chunks = chunk_end - chunk_begin;

  if (num_chunks == 0) {  // no visible key: zeros, as the general kernel writes
    for (int64_t i = tid; i < group * head_dim; i += kThreads)
      store_any(a.out, a.out_dtype, row * a.out_stride_row + (first_head + i / head_dim) * a.out_stride_head + i % head_dim,
                0.0f);
    return;
  }

  const int32_t* table = a.block_tables + seq * a.block_table_stride;
  const int64_t block_size = a.k_layout.block_size;
  const char* k_cache = static_cast<const char*>(a.k_cache);
  const char* v_cache = static_cast<const char*>(a.v_cache);
  const int pieces = static_cast<int>(head_dim * static_cast<int64_t>(sizeof(C)) / 16);  // 16-byte pieces per row
  const int key_begin = static_cast<int>(keys.key_begin), key_end = static_cast<int>(keys.key_end);
  const int block_keys = static_cast<int>(block_size);
  const char* k_head = k_cache + kv_head * a.k_layout.stride_head * static_cast<int64_t>(sizeof(C));
  const char* v_head = v_cache + kv_head * a.v_layout.stride_head * static_cast<int64_t>(sizeof(C));
  auto issue = [&](int64_t chunk, int stage) {
    unsigned char* k_dst = smem + stage * stage_bytes;
    unsigned char* v_dst = k_dst + kChunk * row_bytes;
    auto load_piece = [&](int j, int piece) {
      const int key = static_cast<int>(chunk) * kChunk + j;
      if (key < key_begin || key >= key_end) return;
      const int64_t block = table[key / block_keys], in_block = key % block_keys;
      const int64_t k_off = block * a.k_layout.stride_block + in_block * a.k_layout.stride_slot;
      const int64_t v_off = block * a.v_layout.stride_block + in_block * a.v_layout.stride_slot;
      cp_async16(k_dst + j * row_bytes + piece * 16, k_head + k_off * static_cast<int64_t>(sizeof(C)) + piece * 16);
      cp_async16(v_dst + j * row_bytes + piece * 16, v_head + v_off * static_cast<int64_t>(sizeof(C)) + piece * 16);
    };
    if (kThreads % pieces == 0) {  // head_dim * element bytes a power of two: a thread keeps its piece
      const int piece = tid % pieces;
      for (int j = tid / pieces; j < kChunk; j += kThreads / pieces) load_piece(j, piece);
    } else {
      for (int i = tid; i < kChunk * pieces; i += kThreads) load_piece(i / pieces, i % pieces);
    }
  };
  issue(chunk_begin, 0);
  cp_async_commit();
  if (num_chunks > 1) issue(chunk_begin + 1, 1);
  cp_async_commit();

  const T* q_row = static_cast<const T*>(a.q) + row * a.q_stride_row;
  const int dims = static_cast<int>(head_dim);
  for (int i = tid; i < group * dims; i += kThreads)
    q_s[i] = to_f32(q_row[(first_head + i / dims) * a.q_stride_head + i % dims]);
  for (int g = tid; g < group; g += kThreads) {
    float* sc = scalars + g * kScalars;
    sc[0] = -INFINITY, sc[1] = 0.0f, sc[2] = -INFINITY, sc[3] = 0.0f;
  }

  const int half_dim = static_cast<int>(head_dim / 2);
  const int num_pairs = group * half_dim;
  float part_acc[kDecodeMaxSlots][2], run_acc[kDecodeMaxSlots][2];
#pragma unroll
  for (int s = 0; s < kDecodeMaxSlots; ++s) part_acc[s][0] = part_acc[s][1] = run_acc[s][0] = run_acc[s][1] = 0.0f;
  const int64_t row_elems = row_bytes / static_cast<int>(sizeof(C));
  const int64_t state_size = head_dim + 2;
  auto state_of = [&](int64_t head, int64_t unit) {
    return partials + ((row * a.num_heads + head) * num_units + unit) * state_size;
  };

  for (int64_t i = 0; i < num_chunks; ++i) {
    cp_async_wait<kDecodeStages - 2>();
    __syncthreads();  // chunk i has landed; every thread is done with chunk i - 1
    if (i + kDecodeStages - 1 < num_chunks) issue(chunk_begin + i + kDecodeStages - 1, (i + kDecodeStages - 1) % kDecodeStages);
    cp_async_commit();
    const int stage = static_cast<int>(i % kDecodeStages);
    const int64_t chunk = chunk_begin + i, key0 = chunk * kChunk;
    const bool unit_end = split && unit_chunks == 1 ? true : ((chunk + 1) % kChunksPerPartition == 0 || chunk == chunk_end - 1);

    // Scores: thread (key j, r) holds the groups l = r + 4m of the lane layout (dims [lV, lV + V)).
    {
      const int j = warp * 8 + lane / 4, r = lane % 4;
      const C* k_row = reinterpret_cast<const C*>(smem + stage * stage_bytes) + j * row_elems;
      float kf[8][V];
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int l = r + 4 * m;
        if (l * V < head_dim) {
          load_group<C, V>(k_row + l * V, kf[m]);
          if constexpr (kIsFp8Cache<C>) {
#pragma unroll
            for (int e = 0; e < V; ++e) kf[m][e] = __fmul_rn(kf[m][e], a.kv_format.k_scale);
          }
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) kf[m][e] = 0.0f;
        }
      }
      const int64_t key = key0 + j;
      const bool valid = key >= keys.key_begin && key < keys.key_end;
      for (int g = 0; g < group; ++g) {
        const float* qg = q_s + g * head_dim;
        float part[8];
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          const int l = r + 4 * m;
          float dot = 0.0f;
          if (l * V < head_dim) {
            float qv[V];
            load_group_f32<V>(qg + l * V, qv);
#pragma unroll
            for (int e = 0; e < V; ++e) dot = __fmaf_rn(qv[e], kf[m][e], dot);
          }
          part[m] = dot;
        }
        // The butterfly of warp_sum over lanes l: bits 4, 3, 2 here, then bits 1, 0 across r.
        const float b0 = __fadd_rn(part[0], part[4]), b1 = __fadd_rn(part[1], part[5]);
        const float b2 = __fadd_rn(part[2], part[6]), b3 = __fadd_rn(part[3], part[7]);
        float dot = __fadd_rn(__fadd_rn(b0, b2), __fadd_rn(b1, b3));
        dot = __fadd_rn(dot, __shfl_xor_sync(kFullMask, dot, 2));
        dot = __fadd_rn(dot, __shfl_xor_sync(kFullMask, dot, 1));
        if (r == 0) {
          float score = -INFINITY;
          if (valid) {
            score = dot * a.scale;
            if (a.softcap > 0.0f) score = a.softcap * tanhf(score / a.softcap);
          }
          p_s[g * kChunk + j] = score;
        }
      }
    }
    __syncthreads();

    // Softmax of the chunk per query head (a warp of the general kernel), and the fold scales.
    for (int g = warp; g < group; g += kWarps) {
      const int64_t key = key0 + lane;
      const bool valid = key >= keys.key_begin && key < keys.key_end;
      const float score = p_s[g * kChunk + lane];
      const float m = warp_max(score);
      const float p = valid ? expf(score - m) : 0.0f;
      const float l = warp_sum(p);
      p_s[g * kChunk + lane] = p;
      if (lane == 0) {
        float* sc = scalars + g * kScalars;
        const bool has_keys = m != -INFINITY;
        sc[8] = has_keys ? 1.0f : 0.0f;
        if (split && unit_chunks == 1) {
          float* state = state_of(first_head + g, chunk);
          state[head_dim] = m;
          state[head_dim + 1] = l;
        } else {
          if (has_keys) fold_scalars(sc[0], sc[1], m, l, sc[4], sc[5]);
          if (unit_end) {
            if (split) {
              float* state = state_of(first_head + g, chunk / kChunksPerPartition);
              state[head_dim] = sc[0];
              state[head_dim + 1] = sc[1];
            } else {
              sc[9] = sc[0] != -INFINITY ? 1.0f : 0.0f;
              if (sc[0] != -INFINITY) fold_scalars(sc[2], sc[3], sc[0], sc[1], sc[6], sc[7]);
            }
            sc[0] = -INFINITY, sc[1] = 0.0f;
          }
        }
      }
    }
    __syncthreads();

    // P.V: thread slot = (query head g, dims d, d + 1), a sequential fma chain over the chunk's keys.
    {
      const C* v_rows = reinterpret_cast<const C*>(smem + stage * stage_bytes + kChunk * row_bytes);
      const int j_begin = static_cast<int>(max(keys.key_begin - key0, int64_t{0}));
      const int j_end = static_cast<int>(min(keys.key_end - key0, int64_t{kChunk}));
#pragma unroll
      for (int s = 0; s < kDecodeMaxSlots; ++s) {
        const int pair = tid + s * kThreads;
        if (pair >= num_pairs) break;
        const int g = pair / half_dim, d = 2 * (pair % half_dim);
        const float* pg = p_s + g * kChunk;
        const float* sc = scalars + g * kScalars;
        float acc0 = 0.0f, acc1 = 0.0f;
        for (int j = j_begin; j < j_end; ++j) {
          float v0, v1;
          load_pair<C>(v_rows + j * row_elems + d, v0, v1);
          if constexpr (kIsFp8Cache<C>) {
            v0 = __fmul_rn(v0, a.kv_format.v_scale);
            v1 = __fmul_rn(v1, a.kv_format.v_scale);
          }
          const float p = pg[j];
          acc0 = __fmaf_rn(p, v0, acc0);
          acc1 = __fmaf_rn(p, v1, acc1);
        }
        if (split && unit_chunks == 1) {
          float* state = state_of(first_head + g, chunk);
          state[d] = acc0;
          state[d + 1] = acc1;
          continue;
        }
        if (sc[8] != 0.0f) {
          part_acc[s][0] = fold_acc(part_acc[s][0], acc0, sc[4], sc[5]);
          part_acc[s][1] = fold_acc(part_acc[s][1], acc1, sc[4], sc[5]);
        }
        if (unit_end) {
          if (split) {
            float* state = state_of(first_head + g, chunk / kChunksPerPartition);
            state[d] = part_acc[s][0];
            state[d + 1] = part_acc[s][1];
          } else if (sc[9] != 0.0f) {
            run_acc[s][0] = fold_acc(run_acc[s][0], part_acc[s][0], sc[6], sc[7]);
            run_acc[s][1] = fold_acc(run_acc[s][1], part_acc[s][1], sc[6], sc[7]);
          }
          part_acc[s][0] = part_acc[s][1] = 0.0f;
        }
      }
    }
  }
  if (split) return;
#pragma unroll
  for (int s = 0; s < kDecodeMaxSlots; ++s) {
    const int pair = tid + s * kThreads;
    if (pair >= num_pairs) break;
    const int g = pair / half_dim, d = 2 * (pair % half_dim);
    const float run_m = scalars[g * kScalars + 2], run_l = scalars[g * kScalars + 3];
    const int64_t out_offset = row * a.out_stride_row + (first_head + g) * a.out_stride_head + d;
    store_any(a.out, a.out_dtype, out_offset, finish_row(a, first_head + g, run_m, run_l, run_acc[s][0]));
    store_any(a.out, a.out_dtype, out_offset + 1, finish_row(a, first_head + g, run_m, run_l, run_acc[s][1]));
  }
}

// Block (sequence, query head): folds the unit states of decode_kernel in order (chunks into
// partitions, partitions into the row) and writes the output. A thread owns one dim d and loads the
// states it folds kMergeBatch at a time, all before the first of them is folded: the fold is a chain
// through run_m, its loads are not (one at a time, each waited for, the 18 chunk states of a
// 576-key row took ~17 us a layer on an H200, the largest kernel of a Qwen3-0.6B decode step). The
// fold's order and arithmetic are the single pass's.
constexpr int kMergeBatch = 8;

__global__ void __launch_bounds__(kThreads) decode_merge_kernel(AttentionArgs a, int unit_chunks, int64_t num_units,
                                                                const float* __restrict__ partials) {
  const int num_heads = static_cast<int>(a.num_heads);  // 32-bit division (see decode_kernel)
  const int64_t seq = static_cast<int>(blockIdx.x) / num_heads, head = static_cast<int>(blockIdx.x) % num_heads;
  const int64_t row = a.cu_seqlens_q[seq];
  if (a.cu_seqlens_q[seq + 1] - row != 1) return;
  const int64_t head_dim = a.k_layout.head_dim, state_size = head_dim + 2;
  const DecodeKeys keys = decode_keys(a, seq, num_units * unit_chunks);
  const float* states = partials + (row * a.num_heads + head) * num_units * state_size;
  const int64_t out_offset = row * a.out_stride_row + head * a.out_stride_head;
  // The units holding this row's states: its chunks, or the partitions over them.
  const bool per_chunk = unit_chunks == 1;
  const int64_t unit_begin = per_chunk ? keys.chunk_begin : keys.chunk_begin / kChunksPerPartition;
  const int64_t unit_end = keys.chunk_end == keys.chunk_begin ? unit_begin
                           : per_chunk ? keys.chunk_end
                                       : (keys.chunk_end + kChunksPerPartition - 1) / kChunksPerPartition;
  for (int64_t d = threadIdx.x; d < head_dim; d += kThreads) {
    float run_m = -INFINITY, run_l = 0.0f, run_acc = 0.0f;
    float part_m = -INFINITY, part_l = 0.0f, part_acc = 0.0f;
    for (int64_t u0 = unit_begin; u0 < unit_end; u0 += kMergeBatch) {
      float m[kMergeBatch], l[kMergeBatch], acc[kMergeBatch];
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const float* state = states + (u0 + j) * state_size;
        const bool in = u0 + j < unit_end;
        m[j] = in ? state[head_dim] : -INFINITY;
        l[j] = in ? state[head_dim + 1] : 0.0f;
        acc[j] = in ? state[d] : 0.0f;  // a chunk without keys (m = -inf) has an acc that is never used
      }
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const int64_t unit = u0 + j;
        if (unit >= unit_end) break;
        float run_scale, part_scale;
        if (per_chunk) {  // chunk `unit` into its partition; the partition into the row at its last chunk
          if (m[j] != -INFINITY) {
            fold_scalars(part_m, part_l, m[j], l[j], run_scale, part_scale);
            part_acc = fold_acc(part_acc, acc[j], run_scale, part_scale);
          }
          if ((unit + 1) % kChunksPerPartition != 0 && unit + 1 != unit_end) continue;
        } else {
          part_m = m[j], part_l = l[j], part_acc = acc[j];
        }
        if (part_m != -INFINITY) {
          fold_scalars(run_m, run_l, part_m, part_l, run_scale, part_scale);
          run_acc = fold_acc(run_acc, part_acc, run_scale, part_scale);
        }
        part_m = -INFINITY, part_l = 0.0f, part_acc = 0.0f;
      }
    }
    store_any(a.out, a.out_dtype, out_offset + d, finish_row(a, head, run_m, run_l, run_acc));
  }
}

template <typename T, typename C, int V>
cudaError_t run_attention(const AttentionArgs& a, const AttentionPlan& plan, float* partials, cudaStream_t stream) {
  const int64_t head_dim = a.k_layout.head_dim;
  if (plan.general) {
    // Wide loads need head_dim % V == 0 and every row start aligned to V elements (up to 16 bytes).
    const uintptr_t q_align = (V * sizeof(T)) >= 16 ? 16 : V * sizeof(T);
    const uintptr_t kv_align = (V * sizeof(C)) >= 16 ? 16 : V * sizeof(C);
    const bool strides_ok = head_dim % V == 0 && a.q_stride_row % V == 0 && a.q_stride_head % V == 0 &&
                            a.k_layout.stride_block % V == 0 && a.k_layout.stride_slot % V == 0 &&
                            a.k_layout.stride_head % V == 0 && a.v_layout.stride_block % V == 0 &&
                            a.v_layout.stride_slot % V == 0 && a.v_layout.stride_head % V == 0;
    const bool vector_ok = strides_ok && reinterpret_cast<uintptr_t>(a.q) % q_align == 0 &&
                           reinterpret_cast<uintptr_t>(a.k_cache) % kv_align == 0 &&
                           reinterpret_cast<uintptr_t>(a.v_cache) % kv_align == 0;
    const int num_splits = static_cast<int>(plan.splits);
    const dim3 grid(static_cast<unsigned>(a.num_tokens * a.num_heads), static_cast<unsigned>(num_splits));
    attention_kernel<T, C, V><<<grid, kThreads, 0, stream>>>(a, vector_ok, num_splits, plan.general_skips_decode, partials);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    if (num_splits > 1) {
      merge_kernel<<<static_cast<unsigned>(a.num_tokens * a.num_heads), kThreads, 0, stream>>>(
          a, num_splits, plan.general_skips_decode, partials);
      status = cudaGetLastError();
      if (status != cudaSuccess) return status;
    }
  }
  if (plan.decode_splits > 0) {
    const int64_t smem = plan.decode_smem_bytes;
    if (smem > 48 * 1024) {
      static std::atomic<uint64_t> raised{0};  // per device: each GPU of a process needs its own
      const cudaError_t attribute = allow_dynamic_smem(decode_kernel<T, C, V>, smem_optin_limit(), raised);
      if (attribute != cudaSuccess) return attribute;
    }
    const int head_parts = static_cast<int>(plan.decode_head_parts);
    const int group = static_cast<int>(a.num_heads / a.k_layout.num_kv_heads) / head_parts;
    const int row_bytes = static_cast<int>(head_dim * static_cast<int64_t>(sizeof(C))) + 16;
    const int num_splits = static_cast<int>(plan.decode_splits);
    const dim3 grid(static_cast<unsigned>(a.num_seqs * a.k_layout.num_kv_heads * head_parts),
                    static_cast<unsigned>(num_splits));
    decode_kernel<T, C, V><<<grid, kThreads, static_cast<size_t>(smem), stream>>>(
        a, group, head_parts, row_bytes, num_splits, static_cast<int>(plan.decode_unit_chunks), plan.decode_units,
        partials);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess || num_splits <= 1) return status;
    decode_merge_kernel<<<static_cast<unsigned>(a.num_seqs * a.num_heads), kThreads, 0, stream>>>(
        a, static_cast<int>(plan.decode_unit_chunks), plan.decode_units, partials);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_write_kv(DType dtype, KvFormat format, void* k_cache, void* v_cache, CacheLayout cache, Rows k,
                            Rows v, const int64_t* slot_mapping, int64_t num_tokens, cudaStream_t stream) {
  const int64_t n = num_tokens * cache.num_kv_heads * cache.head_dim;
  if (n == 0) return cudaSuccess;
  const unsigned max_blocks = 132 * 16;
  const unsigned blocks = blocks_for(n, 256) < max_blocks ? blocks_for(n, 256) : max_blocks;
  return dispatch_kv(dtype, format.cache_dtype, [&](auto t, auto c) {
    using T = decltype(t);
    using C = decltype(c);
    write_kv_kernel<T, C><<<blocks, 256, 0, stream>>>(static_cast<C*>(k_cache), static_cast<C*>(v_cache), cache,
                                                      format, k, v, slot_mapping, num_tokens);
    return cudaGetLastError();
  });
}

AttentionPlan plan_attention(DType dtype, const AttentionArgs& a, int64_t max_keys, int32_t max_seqlen_q, int num_sms,
                             const KernelOptions& options, bool short_rows_split_keys) {
  AttentionPlan plan;
  const int64_t head_dim = a.k_layout.head_dim;
  const int64_t row_heads = a.num_tokens * a.num_heads;
  const int64_t num_partitions = (max_keys + kAttentionPartition - 1) / kAttentionPartition;
  if (num_partitions >= 2 && row_heads < 2 * num_sms && num_partitions <= 65535) plan.splits = num_partitions;

  // The decode kernel: 16-byte rows (cp.async), pairs of dims per thread, its shared memory.
  const bool enabled = options.decode_attention;
  // Bytes of a cache element (the decode kernel's rows) and of a q element.
  const DType cache_dtype = a.kv_format.cache_dtype;
  const int64_t elem = cache_dtype == DType::kF32 ? 4 : cache_dtype == DType::kF8E4M3 ? 1 : 2;
  const int64_t q_elem = dtype == DType::kF32 ? 4 : 2;
  const int64_t kv_heads = a.k_layout.num_kv_heads;
  const int64_t group = kv_heads > 0 ? a.num_heads / kv_heads : 0;
  const int64_t row_bytes = head_dim * elem + 16;
  const int64_t smem = kDecodeStages * 2 * kChunk * row_bytes + group * head_dim * 4 + group * kChunk * 4 +
                       group * kScalars * 4;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  auto strides_ok = [&](const CacheLayout& c) {
    return (c.stride_block * elem) % 16 == 0 && (c.stride_slot * elem) % 16 == 0 && (c.stride_head * elem) % 16 == 0;
  };
  const bool decode_ok = enabled && (dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16) && group > 0 && head_dim % 8 == 0 &&
                         (head_dim * elem) % 16 == 0 && head_dim <= 256 &&
                         group * head_dim <= 2 * kThreads * kDecodeMaxSlots && smem <= smem_optin_limit() &&
                         aligned(a.k_cache) && aligned(a.v_cache) && strides_ok(a.k_layout) && strides_ok(a.v_layout) &&
                         max_keys > 0;
  const bool decode_only = decode_ok && max_seqlen_q == 1;
  const bool mixed = decode_ok && !decode_only && a.num_seqs >= 2;  // decode rows go to the decode kernel
  const int64_t prefill_smem = prefill_attention_smem_bytes(head_dim);
  // Verification rows of a few tokens (speculation: 1 + k) fill a few of the prefill kernel's 64-row
  // tiles and get one block per (sequence, head) for all their keys; the general kernel splits their
  // keys over the GPU. Measured on an H100 (Qwen3-0.6B shape, batch 1, 4-token rows at ~400 keys):
  // 3.1 ms per step on the prefill kernel, 2.1 ms on the general one. Prompt chunks stay on the
  // prefill kernel whatever their length: its rows do not depend on how a prompt is chunked.
  constexpr int32_t kShortRowsMaxQ = 8;
  const bool short_rows_split = short_rows_split_keys && max_seqlen_q <= kShortRowsMaxQ;
  plan.prefill = decode_ok && max_seqlen_q >= 2 && !short_rows_split && dtype == DType::kBF16 &&
                 (cache_dtype == DType::kBF16 || cache_dtype == DType::kF8E4M3) &&
                 options.prefill_attention && prefill_smem > 0 &&
                 prefill_smem <= smem_optin_limit() && aligned(a.q) && (a.q_stride_row * q_elem) % 16 == 0 &&
                 (a.q_stride_head * q_elem) % 16 == 0;
  plan.general = !decode_only && !plan.prefill;
  plan.general_skips_decode = mixed;
  if (plan.general && plan.splits > 1) plan.partial_floats = row_heads * plan.splits * (head_dim + 2);
  if (!decode_only && !mixed) return plan;  // one sequence of unknown or longer q_len: the general kernel alone
  plan.decode_smem_bytes = smem;
  // Split the keys when (sequence, kv head) blocks alone cannot fill the GPU: aim at ~4 blocks per SM.
  const int64_t blocks = a.num_seqs * kv_heads;
  plan.decode_splits = 1;
  if (blocks < 2 * num_sms) {
    const int64_t chunks = (max_keys + kChunk - 1) / kChunk;
    const int64_t rows = a.num_tokens * a.num_heads;
    // States per 32-key chunk, or per partition when that scratch would pass 64 MiB.
    // (KernelOptions::decode_partition_units forces partitions: the tests cover both.)
    const bool per_chunk = rows * chunks * (head_dim + 2) * 4 <= (int64_t{64} << 20) && !options.decode_partition_units;
    plan.decode_unit_chunks = per_chunk ? 1 : kChunksPerPartition;
    plan.decode_units = per_chunk ? chunks : (chunks + kChunksPerPartition - 1) / kChunksPerPartition;
    const int64_t want = (4 * num_sms + blocks - 1) / blocks;
    plan.decode_splits = std::min<int64_t>(std::min<int64_t>(want, plan.decode_units), 65535);
  }
  // Then split each kv head's query heads over blocks while the blocks are still few (batch 1-2: a
  // block's serial work is over all of its group's heads). Each part reads the kv head's keys again,
  // so only where the splits were wanted too: at batch 64 of the Qwen3-0.6B shape (512 blocks), two
  // parts made the H100 decode step 1.4x slower, the KV read twice.
  while (blocks < 2 * num_sms && group % (2 * plan.decode_head_parts) == 0 &&
         blocks * plan.decode_splits * plan.decode_head_parts < 4 * num_sms)
    plan.decode_head_parts *= 2;
  const int64_t part_group = group / plan.decode_head_parts;
  plan.decode_smem_bytes = kDecodeStages * 2 * kChunk * row_bytes + part_group * head_dim * 4 + part_group * kChunk * 4 +
                           part_group * kScalars * 4;
  if (plan.decode_splits > 1) {
    plan.partial_floats = std::max(plan.partial_floats, a.num_tokens * a.num_heads * plan.decode_units * (head_dim + 2));
  } else {
    plan.decode_units = (max_keys + kChunk - 1) / kChunk;  // bounds the keys in one pass too
    plan.decode_unit_chunks = 1;
  }
  return plan;
}

// The one dispatch point: q's dtype, the cache element type and dims per lane (head_dim <= 32 * V)
// become template parameters.
cudaError_t launch_attention(DType dtype, const AttentionArgs& args, const AttentionPlan& plan, float* partials,
                             cudaStream_t stream) {
  if (args.num_tokens * args.num_heads == 0) return cudaSuccess;
  const int64_t head_dim = args.k_layout.head_dim;
  if (plan.prefill) {
    const cudaError_t status = launch_prefill_attention(dtype, args, stream);
    if (status != cudaSuccess) return status;
  }
  return dispatch_kv(dtype, args.kv_format.cache_dtype, [&](auto t, auto c) {
    using T = decltype(t);
    using C = decltype(c);
    if (head_dim <= 32) return run_attention<T, C, 1>(args, plan, partials, stream);
    if (head_dim <= 64) return run_attention<T, C, 2>(args, plan, partials, stream);
    if (head_dim <= 128) return run_attention<T, C, 4>(args, plan, partials, stream);
    if (head_dim <= 256) return run_attention<T, C, 8>(args, plan, partials, stream);
    return cudaErrorInvalidValue;
  });
}

}  // namespace pagellm::cuda
