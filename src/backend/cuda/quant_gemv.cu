// The decode-sized product with quantized weights (quant_gemv.h): out[M, N] = x[M, K] . W^T, M <= 8,
// x and out bf16/f16, W block-scaled FP8 (1 byte a weight) or group-quantized INT4 (half a byte).
//
// At decode the product is a stream of W through the SMs, so the kernel reads W once, in 16-byte
// pieces per lane, and dequantizes in registers; the arithmetic is gemv.cu's (read that first): one
// mma.sync.m16n8k16 multiplies 8 rows of W by all 8 rows of x over 16 k, so the cost per byte of W
// is the same for every M <= 8 and the SM's issue slots go to conversions and loads, not FMAs.
//
// Exact conversions, scales on the accumulators: the mma multiplies x by the *unscaled* quantized
// values, which T (bf16/f16) holds exactly, and each step's f32 sums are multiplied by the step's
// scale once (quant_pairs.cuh):
//   fp8:  e4m3 bits moved into T's fields, times 2^120 (bf16) / 2^8 (f16): exact, subnormals included
//   int4: T(128 + q) or T(1024 + q) by OR-ing the nibble into the bits of 128.0 (bf16) / 1024.0 (f16),
//         minus T(128 + zero): the integer q - zero in [-15, 15], exact in T.
// So a step must lie inside one scale block: a step is 4 lanes' pieces of k (lane t of a row reads
// piece t), 4 * kElems consecutive k, and the launcher only takes blocks/groups that are multiples
// of it (quant_gemv_lane_bytes). The result differs from the CPU's (dequantize in f32, then multiply)
// only in the order of the f32 sums: within the bf16 tolerance of the tests.
//
// Mapping (per warp, one "step" = 8 rows of W x 4 * kElems k), lane = 4 g + t:
//   the lane takes kLaneBytes of W row n0 + g (kElems weights starting at k0 + kElems t) and the
//   same kElems elements of x row g (zeros when g >= M), and turns both into kElems / 2 registers of
//   two T each, "pairs" p, with x and W in the same order; mma r takes pairs 2r and 2r + 1 as its
//   A/B fragments (gemv.cu: any bijection between a lane's elements and the mma's logical k works if
//   A and B share it). fp8 pairs of word u are (4u, 4u + 2) and (4u + 1, 4u + 3); int4 pairs of word
//   u are (8u + p, 8u + p + 4), p < 4 (what the bit tricks leave in the two halves), and x's pairs
//   are permuted to match with one byte_perm each.
//   C lane (g, t) holds out[g, n0 + 2t] and out[g, n0 + 2t + 1]: the scales of those two columns.
//
// Memory: each warp keeps kStages - 1 steps of W and of x in flight in a cp.async ring in shared
// memory (no registers held while the loads fly; a lane reads back only the bytes it copied, so its
// own wait_group is the only synchronization), and the block stages the scales and zero points of
// its rows once while the ring fills. Split K and batch invariance as gemv.cu: a block owns kTiles
// tiles of 8 rows of W, warps take contiguous ranges of steps (their number depends on N and K only),
// partial sums added in warp order.
#include <atomic>
#include <cstdint>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/mma_16816.cuh"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/quant_pairs.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kTileRows = 8;  // rows of W (columns of out) per tile: the mma's N
// The geometry, measured on an H100 (docs/PERFORMANCE.md, PrintsGemvBandwidth): blocks of kTiles
// tiles, kStages steps per warp's ring, and enough split-K warps per block (kMaxWarps at most) that
// the grid has about kTargetWarps warps, so every SM is busy even for a small W. Summed over Qwen3-8B's
// four shapes at M = 1 and 8, 6 stages, 4 tiles, or 4 warps of 8 stages took 3-6% longer for fp8;
// for int4 4 tiles took 11% less (up to 20% at M = 8), not taken as the tests ran 2 tiles.
constexpr int kTiles = 2, kStages = 4, kMaxWarps = 8, kTargetWarps = 2048;
constexpr int64_t kMaxSmemBytes = 160 * 1024;  // dynamic shared memory of a block (A100: 163 KiB, H100: 227)

template <QuantFormat F>
constexpr int kElemsPerByte = F == QuantFormat::kInt4 ? 2 : 1;

// One lane's piece of one step as pairs (kElems / 2 registers each of x and W, the same order).
template <typename T, QuantFormat F, int kLaneBytes>
struct Piece {
  static constexpr int kElems = kLaneBytes * kElemsPerByte<F>;
  static constexpr int kWords = kLaneBytes / 4;
  static constexpr int kPairs = kElems / 2;
  uint32_t x[kPairs];
  uint32_t w[kPairs];

  // v: kElems elements of x as loaded (zeros outside the product).
  __device__ __forceinline__ void set_x(const uint4 (&v)[kElems / 8]) {
#pragma unroll
    for (int j = 0; j < kElems / 8; ++j) {
      if constexpr (F == QuantFormat::kFp8Block) {  // per 4 elements, pairs (0, 2) and (1, 3)
        x[4 * j] = __byte_perm(v[j].x, v[j].y, 0x5410);
        x[4 * j + 1] = __byte_perm(v[j].x, v[j].y, 0x7632);
        x[4 * j + 2] = __byte_perm(v[j].z, v[j].w, 0x5410);
        x[4 * j + 3] = __byte_perm(v[j].z, v[j].w, 0x7632);
      } else {  // pairs (8j + p, 8j + p + 4): low halves of (v.x, v.z), high halves, then (v.y, v.w)
        x[4 * j] = __byte_perm(v[j].x, v[j].z, 0x5410);
        x[4 * j + 1] = __byte_perm(v[j].x, v[j].z, 0x7632);
        x[4 * j + 2] = __byte_perm(v[j].y, v[j].w, 0x5410);
        x[4 * j + 3] = __byte_perm(v[j].y, v[j].w, 0x7632);
      }
    }
  }

  // raw: the piece's bytes as loaded; zero: the int4 zero point of this row and step (0..15).
  __device__ __forceinline__ void convert_w(const uint32_t (&raw)[kWords], uint32_t zero) {
#pragma unroll
    for (int j = 0; j < kWords; ++j) {
      if constexpr (F == QuantFormat::kFp8Block) {
        e4m3x4_to_pairs<T>(raw[j], w[2 * j], w[2 * j + 1]);
      } else {
        int4x8_to_pairs<T>(raw[j], zero, &w[4 * j]);
      }
    }
  }
};

// Split-K warps per block for a grid of `blocks` blocks and a K of `steps` steps: from N and K only, so
// a row's result does not depend on M.
inline int64_t split_warps(int64_t blocks, int64_t steps) {
  int64_t warps = (kTargetWarps + blocks - 1) / blocks;
  warps = warps > kMaxWarps ? kMaxWarps : warps;
  warps = warps > steps ? steps : warps;
  return warps < 1 ? 1 : warps;
}

// kBytes of this lane's own ring slot (written by its own cp.async: no other lane's data is read, so
// the wait_group of the lane is all the synchronization a slot needs).
template <int kBytes>
__device__ __forceinline__ void load_slot(const uint8_t* p, uint32_t (&r)[kBytes / 4]) {
  if constexpr (kBytes == 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
  } else if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    r[0] = v.x, r[1] = v.y;
  } else {
    r[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

// Byte offsets of one block's dynamic shared memory: the ring [warps][stages][slot] (a slot: W
// [tiles][32 lanes][lane_bytes], then x [m rows x 4 lanes][lane's elements] of 16-bit T), the block's
// scales [8 tiles columns][k_blocks] f32, its zero points [8 tiles rows][k_blocks] u8 (int4), the
// warps' partial sums [warps][8][8 tiles] f32.
struct GemvSmem {
  int64_t slot = 0, x_in_slot = 0, scales = 0, zeros = 0, partial = 0, total = 0;
};
__host__ __device__ __forceinline__ GemvSmem gemv_smem(int lane_bytes, int warps, int64_t k_blocks, bool int4,
                                                       int m) {
  constexpr int64_t block_rows = kTileRows * kTiles;
  auto align16 = [](int64_t bytes) { return (bytes + 15) / 16 * 16; };
  GemvSmem s;
  s.x_in_slot = int64_t{kTiles} * 32 * lane_bytes;
  s.slot = s.x_in_slot + static_cast<int64_t>(m) * 4 * lane_bytes * (int4 ? 2 : 1) * 2;
  s.scales = static_cast<int64_t>(warps) * kStages * s.slot;
  s.zeros = s.scales + align16(block_rows * k_blocks * 4);
  s.partial = s.zeros + (int4 ? align16(block_rows * k_blocks) : 0);
  s.total = s.partial + static_cast<int64_t>(warps) * kTileRows * block_rows * 4;
  return s;
}

// A block owns kTiles tiles of 8 rows of W (every k); its warps split K into contiguous ranges of
// steps_per_warp steps, each with kStages - 1 steps of W and x in flight in its ring.
template <typename T, QuantFormat F, int kLaneBytes>
__global__ void __launch_bounds__(kMaxWarps * 32, 2)
    quant_gemv_kernel(T* __restrict__ out, int64_t ld_out, const T* __restrict__ x, int64_t ld_x, QuantWeight wq,
                      int m, int64_t steps_per_warp) {
  using P = Piece<T, F, kLaneBytes>;
  constexpr int kElems = P::kElems;
  constexpr int kXVecs = kElems / 8;  // 16-byte pieces of x a lane loads per step
  constexpr int64_t kStepK = 4 * kElems;
  constexpr int kBlockRows = kTileRows * kTiles;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int64_t k_blocks = (wq.k + wq.block_k - 1) / wq.block_k;
  const GemvSmem layout = gemv_smem(kLaneBytes, warps, k_blocks, F == QuantFormat::kInt4, m);
  const int slot_bytes = static_cast<int>(layout.slot);
  uint8_t* ring = smem + static_cast<int64_t>(warp) * kStages * slot_bytes;
  // This lane's parts of a slot: its W pieces (tile j at + j * 32 * kLaneBytes) and its x piece.
  const int w_in_slot = lane * kLaneBytes, x_in_slot = static_cast<int>(layout.x_in_slot) + lane * kElems * 2;
  float* block_scales = reinterpret_cast<float*>(smem + layout.scales);  // [kBlockRows][k_blocks]
  uint8_t* block_zeros = smem + layout.zeros;                            // [kBlockRows][k_blocks]
  float* partial = reinterpret_cast<float*>(smem + layout.partial);      // [warps][8][kBlockRows]

  const int64_t row_bytes = wq.k / kElemsPerByte<F>;
  const int64_t total_steps = (wq.k + kStepK - 1) / kStepK;
  const int64_t first_step = warp * steps_per_warp;
  const int64_t left = total_steps - first_step;
  const int64_t my_steps = left < 0 ? 0 : (left < steps_per_warp ? left : steps_per_warp);  // warp-uniform
  const uint8_t* w_lane[kTiles];  // this lane's W row n0 + 8 j + g, null past N
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int64_t row = n0 + kTileRows * j + g;
    w_lane[j] = row < wq.n ? static_cast<const uint8_t*>(wq.data) + row * row_bytes + t * kLaneBytes : nullptr;
  }
  // x rows past M are zeros (W's converted zeros are (0 - zero) outside the product, x = 0 cancels them).
  const bool x_row_ok = g < m;
  const T* x_lane = x + (x_row_ok ? g * ld_x : 0) + t * kElems;
  // Step i of the warp (W, and x of rows < M) into ring slot i % kStages: one commit group per step
  // (empty past the range, so the wait below always counts kStages - 1 newer groups).
  auto issue = [&](int64_t i) {
    if (i < my_steps) {
      const int64_t k0 = (first_step + i) * kStepK;
      const bool piece_ok = k0 + kElems * t < wq.k;  // k % kElems == 0: a piece is all in or out
      uint8_t* slot = ring + static_cast<int>(i % kStages) * slot_bytes;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const bool ok = piece_ok && w_lane[j] != nullptr;
        cp_async<kLaneBytes>(slot + w_in_slot + j * 32 * kLaneBytes, ok ? w_lane[j] + k0 / kElemsPerByte<F> : wq.data,
                             ok);
      }
      if (x_row_ok) {
#pragma unroll
        for (int q = 0; q < kXVecs; ++q)
          cp_async<16>(slot + x_in_slot + 16 * q, piece_ok ? x_lane + k0 + 8 * q : x, piece_ok);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  // The block's scales (per output column: W row n0 + r) and zero points (per W row), staged once
  // while the ring fills, each thread's loads issued together (one memory latency, where a load per
  // step or per loop trip would put one on every step).
  constexpr int kStageBatch = 8;
  const int64_t stage_count = kBlockRows * k_blocks;
  for (int64_t base = 0; base < stage_count; base += kStageBatch * static_cast<int64_t>(blockDim.x)) {
    float scale[kStageBatch];
    uint8_t zero[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int64_t i = base + u * static_cast<int64_t>(blockDim.x) + threadIdx.x;
      const int64_t r = i / k_blocks, b = i - r * k_blocks, row = n0 + r;
      const bool ok = i < stage_count && row < wq.n;
      scale[u] = ok ? __ldg(wq.scales + (row / wq.block_n) * k_blocks + b) : 0.0f;
      zero[u] = F == QuantFormat::kInt4 && ok ? __ldg(wq.zeros + row * k_blocks + b) : 0;
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int64_t i = base + u * static_cast<int64_t>(blockDim.x) + threadIdx.x;
      if (i >= stage_count) break;
      block_scales[i] = scale[u];
      if constexpr (F == QuantFormat::kInt4) block_zeros[i] = zero[u];
    }
  }
  __syncthreads();

  float c0[kTiles], c1[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) c0[j] = c1[j] = 0.0f;
  for (int64_t i = 0; i < my_steps; ++i) {
    issue(i + kStages - 1);
    cp_async_wait<kStages - 1>();  // step i's group has landed
    const int64_t block = (first_step + i) * kStepK / wq.block_k;  // the step's scale block (one)
    const uint8_t* slot = ring + static_cast<int>(i % kStages) * slot_bytes;
    uint4 xv[kXVecs];
#pragma unroll
    for (int q = 0; q < kXVecs; ++q)
      xv[q] = x_row_ok ? *reinterpret_cast<const uint4*>(slot + x_in_slot + 16 * q) : make_uint4(0, 0, 0, 0);
    P piece;
    piece.set_x(xv);
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      uint32_t raw[P::kWords];
      load_slot<kLaneBytes>(slot + w_in_slot + j * 32 * kLaneBytes, raw);
      const uint32_t zero = F == QuantFormat::kInt4 ? block_zeros[(kTileRows * j + g) * k_blocks + block] : 0u;
      piece.convert_w(raw, zero);
      float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int r = 0; r < kElems / 4; ++r)
        mma_16816<T>(sums, piece.x[2 * r], piece.x[2 * r + 1], piece.w[2 * r], piece.w[2 * r + 1]);
      // sums[0..1]: out[g, col0], out[g, col1] of this step; sums[2..3] are A's zero rows 8..15.
      const int col0 = kTileRows * j + 2 * t;
      c0[j] = fmaf(sums[0], block_scales[col0 * k_blocks + block], c0[j]);
      c1[j] = fmaf(sums[1], block_scales[(col0 + 1) * k_blocks + block], c1[j]);
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    partial[(warp * kTileRows + g) * kBlockRows + kTileRows * j + 2 * t] = c0[j];
    partial[(warp * kTileRows + g) * kBlockRows + kTileRows * j + 2 * t + 1] = c1[j];
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < kTileRows * kBlockRows; i += static_cast<int>(blockDim.x)) {
    const int row = i / kBlockRows, col = i % kBlockRows;
    if (row < m && n0 + col < wq.n) {
      float sum = partial[row * kBlockRows + col];
      // warp order: fixed by N and K alone
      for (int v = 1; v < warps; ++v) sum += partial[(v * kTileRows + row) * kBlockRows + col];
      out[row * ld_out + n0 + col] = from_f32<T>(sum);
    }
  }
}

template <typename T, QuantFormat F, int kLaneBytes>
cudaError_t launch_typed(void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w, int m,
                         cudaStream_t stream) {
  constexpr int64_t kStepK = 4 * kLaneBytes * kElemsPerByte<F>;
  const int64_t num_blocks = (w.n + kTileRows * kTiles - 1) / (kTileRows * kTiles);
  if (num_blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const int64_t steps = (w.k + kStepK - 1) / kStepK;
  const int64_t warps = split_warps(num_blocks, steps);
  const int64_t steps_per_warp = (steps + warps - 1) / warps;
  const int64_t k_blocks = (w.k + w.block_k - 1) / w.block_k;
  const int64_t smem_bytes = gemv_smem(kLaneBytes, static_cast<int>(warps), k_blocks, F == QuantFormat::kInt4, m).total;
  if (smem_bytes > kMaxSmemBytes) return cudaErrorInvalidValue;
  auto kernel = quant_gemv_kernel<T, F, kLaneBytes>;
  static std::atomic<uint64_t> raised{0};
  const cudaError_t e = allow_dynamic_smem(kernel, kMaxSmemBytes, raised);
  if (e != cudaSuccess) return e;
  kernel<<<dim3(static_cast<unsigned>(num_blocks)), dim3(static_cast<unsigned>(warps * 32)),
           static_cast<size_t>(smem_bytes), stream>>>(static_cast<T*>(out), ld_out, static_cast<const T*>(x), ld_x, w,
                                                      m, steps_per_warp);
  return cudaGetLastError();
}

// The one dispatch point: format and piece width, then dtype.
template <typename T>
cudaError_t launch_for(void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w, int m,
                       int lane_bytes, cudaStream_t stream) {
  if (w.format == QuantFormat::kFp8Block) {
    if (lane_bytes == 16) return launch_typed<T, QuantFormat::kFp8Block, 16>(out, ld_out, x, ld_x, w, m, stream);
    if (lane_bytes == 8) return launch_typed<T, QuantFormat::kFp8Block, 8>(out, ld_out, x, ld_x, w, m, stream);
  } else {
    if (lane_bytes == 16) return launch_typed<T, QuantFormat::kInt4, 16>(out, ld_out, x, ld_x, w, m, stream);
    if (lane_bytes == 8) return launch_typed<T, QuantFormat::kInt4, 8>(out, ld_out, x, ld_x, w, m, stream);
    if (lane_bytes == 4) return launch_typed<T, QuantFormat::kInt4, 4>(out, ld_out, x, ld_x, w, m, stream);
  }
  return cudaErrorInvalidValue;
}

// The piece width whose layout the weight allows (widest first), 0 when none.
int layout_lane_bytes(const QuantWeight& w) {
  const int elems_per_byte = w.format == QuantFormat::kInt4 ? 2 : 1;
  for (int lane_bytes : {16, 8, 4}) {
    if (w.format == QuantFormat::kFp8Block && lane_bytes == 4) continue;  // x pieces stay whole 16-byte loads
    const int64_t elems = static_cast<int64_t>(lane_bytes) * elems_per_byte, step_k = 4 * elems;
    if (w.k % elems == 0 && w.block_k % step_k == 0) return lane_bytes;
  }
  return 0;
}

bool fits_shared_memory(const QuantWeight& w, int lane_bytes) {
  const int64_t step_k = 4 * static_cast<int64_t>(lane_bytes) * (w.format == QuantFormat::kInt4 ? 2 : 1);
  const int64_t blocks = (w.n + kTileRows * kTiles - 1) / (kTileRows * kTiles);
  const int64_t warps = split_warps(blocks, (w.k + step_k - 1) / step_k);
  const int64_t k_blocks = (w.k + w.block_k - 1) / w.block_k;
  // At the most rows: whether the GEMV takes a product must not depend on M (batch invariance).
  return gemv_smem(lane_bytes, static_cast<int>(warps), k_blocks, w.format == QuantFormat::kInt4, kQuantGemvMaxRows)
             .total <= kMaxSmemBytes;
}

}  // namespace

int quant_gemv_lane_bytes(DType dtype, const QuantWeight& w, const void* x, int64_t ld_x, int64_t m) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return 0;
  if (w.format == QuantFormat::kMxfp4) return 0;
  if (m < 1 || m > kQuantGemvMaxRows || w.n < 0 || w.k <= 0 || w.block_n <= 0 || w.block_k <= 0) return 0;
  if (w.data == nullptr || w.scales == nullptr || (w.format == QuantFormat::kInt4 && w.zeros == nullptr)) return 0;
  if ((m > 1 && ld_x % 8 != 0) || reinterpret_cast<uintptr_t>(x) % 16 != 0) return 0;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return 0;
  const int lane_bytes = layout_lane_bytes(w);
  if (lane_bytes == 0 || !fits_shared_memory(w, lane_bytes)) return 0;
  return lane_bytes;
}

bool quant_gemv_device_supported(int device) {
  int major = 0, smem_optin = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 8 &&
         cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
         smem_optin >= kMaxSmemBytes;
}

cudaError_t launch_quant_gemv(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x,
                              const QuantWeight& w, int64_t m, cudaStream_t stream) {
  const int lane_bytes = quant_gemv_lane_bytes(dtype, w, x, ld_x, m);
  if (lane_bytes == 0) return cudaErrorInvalidValue;
  if (w.n == 0) return cudaSuccess;
  const int rows = static_cast<int>(m);
  switch (dtype) {
    case DType::kBF16: return launch_for<__nv_bfloat16>(out, ld_out, x, ld_x, w, rows, lane_bytes, stream);
    case DType::kF16: return launch_for<__half>(out, ld_out, x, ld_x, w, rows, lane_bytes, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace pagellm::cuda
