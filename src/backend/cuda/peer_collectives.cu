// Collectives over peer memory (peer_collectives.h). Block b of every rank handles slice b of the
// message; the blocks of one index on all ranks meet through flags (release / acquire at system scope)
// that count up with each collective, so no flag is ever reset.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/peer_collectives.h"

namespace pagellm::cuda {

namespace {

constexpr int kThreads = 512;
// A rank that waits this long for another has lost it (a bug, or a rank that died): trap rather than
// hang the GPU.
constexpr uint64_t kPeerWaitLimitNs = uint64_t{60} * 1000 * 1000 * 1000;

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Another GPU's data, read past this SM's L1 (written by the other GPU during this kernel).
__device__ __forceinline__ uint4 load_cg(const uint4* p) { return __ldcg(p); }
__device__ __forceinline__ float load_cg(const float* p) { return __ldcg(p); }
__device__ __forceinline__ __nv_bfloat16 load_cg(const __nv_bfloat16* p) {
  return __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ __half load_cg(const __half* p) {
  return __ushort_as_half(__ldcg(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ uint16_t load_cg(const uint16_t* p) { return __ldcg(p); }
__device__ __forceinline__ uint32_t load_cg(const uint32_t* p) { return __ldcg(p); }

// Every rank's block blockIdx.x has reached `value` once this returns (the writes each made before
// it are visible to the others' reads after it).
__device__ void meet_peers(const PeerGroup& g, uint32_t value) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x < g.num_ranks && threadIdx.x != g.rank) {
    const int peer = threadIdx.x;
    store_release_sys(g.flags[peer] + blockIdx.x * PeerGroup::kMaxRanks + g.rank, value);
    const uint32_t* mine = g.flags[g.rank] + blockIdx.x * PeerGroup::kMaxRanks + peer;
    const uint64_t start = global_time_ns();
    while (load_acquire_sys(mine) < value) {
      if (global_time_ns() - start > kPeerWaitLimitNs) __trap();
    }
  }
  __syncthreads();
}

// One load or store (Raw: uint4, uint2, or T itself) seen as the elements of T it carries.
template <typename Raw, typename T>
union Lanes {
  Raw raw;
  T v[sizeof(Raw) / sizeof(T)];
};

// [begin, end) of slice `block` of n elements cut into `blocks` slices of a multiple of `align`.
struct Slice {
  int64_t begin, end;
};
__device__ __forceinline__ Slice slice_of(int64_t n, int blocks, int block, int64_t align) {
  int64_t per = (n + blocks - 1) / blocks;
  per = (per + align - 1) / align * align;
  const int64_t begin = min(n, per * block);
  return {begin, min(n, begin + per)};
}

// kVec elements move as one 16-byte vector (kVec == 1: element by element, for unaligned data).
template <typename T, int64_t kVec>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(PeerGroup g, T* data, int64_t count) {
  const uint32_t n = g.epochs[blockIdx.x];
  // Slices of whole 16-byte vectors on every rank, whatever this rank's alignment (kVec).
  const Slice s = slice_of(count, gridDim.x, blockIdx.x, 16 / sizeof(T));
  T* mine = static_cast<T*>(g.buffers[g.rank]);
  const int64_t vec_end = s.begin + (s.end - s.begin) / kVec * kVec;
  using Vec = std::conditional_t<kVec == 1, T, uint4>;
  for (int64_t i = s.begin + threadIdx.x * kVec; i < vec_end; i += kThreads * kVec)
    *reinterpret_cast<Vec*>(mine + i) = *reinterpret_cast<const Vec*>(data + i);
  for (int64_t i = vec_end + threadIdx.x; i < s.end; i += kThreads) mine[i] = data[i];
  meet_peers(g, 2 * n + 1);
  for (int64_t i = s.begin + threadIdx.x * kVec; i < vec_end; i += kThreads * kVec) {
    float sum[kVec] = {};
    for (int r = 0; r < g.num_ranks; ++r) {
      Lanes<Vec, T> part;
      part.raw = load_cg(reinterpret_cast<const Vec*>(static_cast<const T*>(g.buffers[r]) + i));
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum[k] += to_f32(part.v[k]);
    }
    Lanes<Vec, T> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = from_f32<T>(sum[k]);
    *reinterpret_cast<Vec*>(data + i) = out.raw;
  }
  for (int64_t i = vec_end + threadIdx.x; i < s.end; i += kThreads) {
    float sum = 0.0f;
    for (int r = 0; r < g.num_ranks; ++r) sum += to_f32(load_cg(static_cast<const T*>(g.buffers[r]) + i));
    data[i] = from_f32<T>(sum);
  }
  meet_peers(g, 2 * n + 2);  // nobody reads a buffer a later collective overwrites
  if (threadIdx.x == 0) g.epochs[blockIdx.x] = n + 1;
}

constexpr int kPushThreads = 256;

__device__ __forceinline__ void store_line_volatile(void* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 load_line_volatile(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)
               : "memory");
  return v;
}

// Line `line` of sender `sender` in half `half` of rank `owner`'s inbox.
__device__ __forceinline__ uint4* inbox_line(const PeerGroup& g, int owner, uint32_t half, int sender, int64_t line) {
  return static_cast<uint4*>(g.inboxes[owner]) + (static_cast<int64_t>(half) * g.num_ranks + sender) * kPushLines + line;
}

// The 8 bytes of `data` in line `line` (zeros past count), as two words.
template <typename T>
__device__ __forceinline__ uint2 read_line(const T* data, int64_t line, int64_t count, bool whole_lines) {
  constexpr int kPerLine = 8 / sizeof(T);
  const int64_t first = line * kPerLine;
  if (whole_lines) return *reinterpret_cast<const uint2*>(data + first);
  Lanes<uint2, T> out;
  out.raw = make_uint2(0, 0);
  for (int k = 0; k < kPerLine && first + k < count; ++k) out.v[k] = data[first + k];
  return out.raw;
}

template <typename T>
__global__ void __launch_bounds__(kPushThreads) peer_push_all_reduce_kernel(PeerGroup g, T* data, int64_t count) {
  constexpr int kPerLine = 8 / sizeof(T);
  const uint32_t n = g.push_counters[0], flag = n + 1, half = n & 1;
  const int64_t lines = (count + kPerLine - 1) / kPerLine;
  const bool whole_lines = count % kPerLine == 0 && reinterpret_cast<uintptr_t>(data) % 8 == 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kPushThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kPushThreads + threadIdx.x;
  for (int64_t line = first; line < lines; line += stride) {
    const uint2 mine = read_line(data, line, count, whole_lines);
    for (int peer = 0; peer < g.num_ranks; ++peer)
      if (peer != g.rank) store_line_volatile(inbox_line(g, peer, half, g.rank, line), make_uint4(mine.x, flag, mine.y, flag));
  }
  for (int64_t line = first; line < lines; line += stride) {
    float sum[kPerLine] = {};
    for (int r = 0; r < g.num_ranks; ++r) {
      Lanes<uint2, T> part;
      if (r == g.rank) {
        part.raw = read_line(data, line, count, whole_lines);
      } else {
        const uint4* from = inbox_line(g, g.rank, half, r, line);
        uint4 v = load_line_volatile(from);
        const uint64_t start = global_time_ns();
        while (v.y != flag || v.w != flag) {
          if (global_time_ns() - start > kPeerWaitLimitNs) __trap();
          v = load_line_volatile(from);
        }
        part.raw = make_uint2(v.x, v.z);
      }
#pragma unroll
      for (int k = 0; k < kPerLine; ++k) sum[k] += to_f32(part.v[k]);
    }
    const int64_t base = line * kPerLine;
    for (int k = 0; k < kPerLine && base + k < count; ++k) data[base + k] = from_f32<T>(sum[k]);
  }
  // The last block to finish moves the count on (the next collective in stream order reads it).
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&g.push_counters[1], 1u) == gridDim.x - 1) {
      g.push_counters[1] = 0;
      g.push_counters[0] = n + 1;
    }
  }
}

// Elements of `E` bytes, moved as unsigned integers of that size.
template <typename E>
__global__ void __launch_bounds__(kThreads) peer_gather_columns_kernel(PeerGroup g, E* out, int64_t total_columns,
                                                                       const E* in, int64_t rows, ColumnParts parts,
                                                                       int root) {
  const uint32_t n = g.epochs[blockIdx.x];
  const bool is_root = g.rank == root;
  if (!is_root) {
    const Slice s = slice_of(rows * parts.columns[g.rank], gridDim.x, blockIdx.x, 1);
    E* mine = static_cast<E*>(g.buffers[g.rank]);
    for (int64_t i = s.begin + threadIdx.x; i < s.end; i += kThreads) mine[i] = in[i];
  }
  meet_peers(g, 2 * n + 1);
  if (is_root) {
    for (int r = 0; r < g.num_ranks; ++r) {
      const int64_t columns = parts.columns[r];
      const Slice s = slice_of(rows * columns, gridDim.x, blockIdx.x, 1);
      const E* from = r == root ? in : static_cast<const E*>(g.buffers[r]);
      for (int64_t i = s.begin + threadIdx.x; i < s.end; i += kThreads)
        out[(i / columns) * total_columns + parts.offsets[r] + i % columns] = load_cg(from + i);
    }
  }
  meet_peers(g, 2 * n + 2);
  if (threadIdx.x == 0) g.epochs[blockIdx.x] = n + 1;
}

// The same number of blocks on every rank for the same message.
int peer_blocks(int64_t elements, int64_t per_block) {
  return static_cast<int>(std::clamp<int64_t>((elements + per_block - 1) / per_block, 1, PeerGroup::kMaxBlocks));
}

}  // namespace

cudaError_t launch_peer_all_reduce(DType dtype, const PeerGroup& group, void* data, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const int64_t bytes = count * static_cast<int64_t>(dtype_size_bytes(dtype));
  if (bytes > group.buffer_bytes) return cudaErrorInvalidValue;
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    if (bytes <= kPushMaxBytes && group.inboxes[group.rank] != nullptr) {
      const int64_t lines = (bytes + 7) / 8;
      const int blocks = peer_blocks(lines, kPushThreads * 2);
      peer_push_all_reduce_kernel<T><<<blocks, kPushThreads, 0, stream>>>(group, static_cast<T*>(data), count);
      return cudaGetLastError();
    }
    constexpr int64_t kVec = 16 / sizeof(T);
    // The block count depends on the count only: every rank slices alike, aligned or not.
    const int blocks = peer_blocks(count, kThreads * kVec);
    if (reinterpret_cast<uintptr_t>(data) % 16 == 0)
      peer_all_reduce_kernel<T, kVec><<<blocks, kThreads, 0, stream>>>(group, static_cast<T*>(data), count);
    else
      peer_all_reduce_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(group, static_cast<T*>(data), count);
    return cudaGetLastError();
  });
}

cudaError_t launch_peer_gather_columns(int64_t element_bytes, const PeerGroup& group, void* out, int64_t total_columns,
                                       const void* in, int64_t rows, const ColumnParts& parts, int root,
                                       cudaStream_t stream) {
  int64_t widest = 0;
  for (int r = 0; r < group.num_ranks; ++r) widest = std::max(widest, parts.columns[r]);
  if (rows * widest == 0) return cudaSuccess;
  if (rows * widest * element_bytes > group.buffer_bytes) return cudaErrorInvalidValue;
  const int blocks = peer_blocks(rows * widest, kThreads * 4);
  switch (element_bytes) {
    case 2:
      peer_gather_columns_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(
          group, static_cast<uint16_t*>(out), total_columns, static_cast<const uint16_t*>(in), rows, parts, root);
      break;
    case 4:
      peer_gather_columns_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(
          group, static_cast<uint32_t*>(out), total_columns, static_cast<const uint32_t*>(in), rows, parts, root);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace pagellm::cuda
