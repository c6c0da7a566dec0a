// The INT4 product of more than 16 rows (int4_gemm.h): out[M, N] = x[M, K] . W^T with W group-quantized
// 4-bit, dequantized in registers on its way into the tensor cores (Marlin's idea), so W is read as
// 4-bit words instead of being expanded into a 16-bit copy that cuBLASLt then reads again.
//
// Tiles: a block computes out[64 rows of x, 128 rows of W]; 8 warps in 2 x 4, each 32 x 32 (2 x 4
// mma.m16n8k16 tiles). K runs in tiles of 64 through a 4-stage cp.async ring of x (64 x 64 T, rows
// padded by 16 bytes so the fragment loads of 8 rows hit distinct banks) and W (128 rows x 32 bytes).
// The block's scales and zero points for all of K are staged once, while the ring fills. There is no
// split K: the grid is ceil(N / 128) x ceil(M / 64) blocks, so the dispatch takes only weights
// with at least one column of blocks per SM (int4_gemm_applies).
//
// Exactness as quant_gemv.cu: (q - zero) is exact in T (int4x8_to_pairs); each k tile lies in one
// group (group % 64 == 0), its mma sums start at zero and are multiplied by the group's scale into
// the f32 accumulators: the CPU twin's math (f32 dequantized W) up to the order of the f32 sums.
//
// The k order inside a tile: lane (g, t) owns words 2t and 2t + 1 of its W row (k 16t .. 16t + 15);
// mma step s (0..3) takes word s / 2's pairs 2 (s % 2) and 2 (s % 2) + 1, i.e. physical k
// 16t + 8 (s / 2) + {p, p + 4} and {p + 1, p + 5}, p = 2 (s % 2), as logical k {2t, 2t + 1} and
// {2t + 8, 2t + 9}. The A fragments take x at the same physical k (two byte_perms of one 16-byte
// load), so each mma is an ordinary product over a permutation of its 16 k.
#include "backend/cuda/int4_gemm.h"

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/mma_16816.cuh"
#include "backend/cuda/quant_pairs.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kBlockM = 64, kBlockN = 128, kTileK = 64, kStages = 4;
constexpr int kWarpsN = 4, kThreads = 256;  // 2 x 4 warps of 32 x 32
constexpr int kXPitch = kTileK * 2 + 16;    // bytes per x row in the ring (16 of padding)
constexpr int kWPitch = kTileK / 2;         // bytes per W row in the ring
constexpr int kXStageBytes = kBlockM * kXPitch;
constexpr int kStageBytes = kXStageBytes + kBlockN * kWPitch;

// Bytes of dynamic shared memory: the ring, then scales [groups][kBlockN] f32 and zero points
// [groups][kBlockN] u8.
int64_t smem_bytes(int64_t groups) { return int64_t{kStages} * kStageBytes + groups * kBlockN * 5; }

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    int4_gemm_kernel(T* __restrict__ out, int64_t ld_out, const T* __restrict__ x, int64_t ld_x, QuantWeight w,
                     int64_t m) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t groups = w.k / w.block_k, k_tiles = w.k / kTileK, row_bytes = w.k / 2;
  float* block_scales = reinterpret_cast<float*>(smem + int64_t{kStages} * kStageBytes);  // [groups][kBlockN]
  uint8_t* block_zeros = reinterpret_cast<uint8_t*>(block_scales + groups * kBlockN);    // [groups][kBlockN]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_m = 32 * (warp / kWarpsN), warp_n = 32 * (warp % kWarpsN);  // the warp's 32 x 32 in the block
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockN, m0 = static_cast<int64_t>(blockIdx.y) * kBlockM;
  const uint8_t* w_bytes = static_cast<const uint8_t*>(w.data);

  // k tile kt of x (rows past M zero) and W (rows past N zero) into stage kt % kStages; one group each.
  auto issue = [&](int64_t kt) {
    if (kt < k_tiles) {
      uint8_t* stage = smem + static_cast<int>(kt % kStages) * kStageBytes;
      for (int c = static_cast<int>(threadIdx.x); c < kBlockM * 8; c += kThreads) {  // 8 x 16 bytes a row
        const int r = c / 8, q = c % 8;
        const bool ok = m0 + r < m;
        cp_async<16>(stage + r * kXPitch + 16 * q, ok ? x + (m0 + r) * ld_x + kt * kTileK + 8 * q : x, ok);
      }
      for (int c = static_cast<int>(threadIdx.x); c < kBlockN * 2; c += kThreads) {  // 2 x 16 bytes a row
        const int r = c / 2, q = c % 2;
        const bool ok = n0 + r < w.n;
        cp_async<16>(stage + kXStageBytes + r * kWPitch + 16 * q,
                     ok ? w_bytes + (n0 + r) * row_bytes + kt * kTileK / 2 + 16 * q : w_bytes, ok);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);

  // Scales and zero points of the block's rows, each thread's loads of a round issued together.
  constexpr int kStageBatch = 8;
  const int64_t stage_count = groups * kBlockN;
  for (int64_t base = 0; base < stage_count; base += kStageBatch * kThreads) {
    float scale[kStageBatch];
    uint8_t zero[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      const int64_t group = i / kBlockN, row = n0 + (i - group * kBlockN);
      const bool ok = i < stage_count && row < w.n;
      scale[u] = ok ? __ldg(w.scales + row * groups + group) : 0.0f;
      zero[u] = ok ? __ldg(w.zeros + row * groups + group) : 0;
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      if (i < stage_count) block_scales[i] = scale[u], block_zeros[i] = zero[u];
    }
  }

  float acc[2][4][4] = {};  // [m16 tile][n8 tile][C fragment]
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // tile kt has landed (this thread's copies)
    __syncthreads();               // everyone's copies; everyone is done with the stage issue() reuses
    issue(kt + kStages - 1);
    const uint8_t* stage = smem + static_cast<int>(kt % kStages) * kStageBytes;
    const int64_t group = kt * kTileK / w.block_k;
    // B: per n8 tile j, W row warp_n + 8 j + g, words 2t and 2t + 1 (converted one word at a time).
    uint2 words[4];
    uint32_t zeros[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = warp_n + 8 * j + g;
      words[j] = *reinterpret_cast<const uint2*>(stage + kXStageBytes + col * kWPitch + 8 * t);
      zeros[j] = block_zeros[group * kBlockN + col];
    }
    float part[2][4][4] = {};
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      uint32_t b[4][4];  // [j][pair (i, i + 4) of word 2t + u]
#pragma unroll
      for (int j = 0; j < 4; ++j) int4x8_to_pairs<T>(u == 0 ? words[j].x : words[j].y, zeros[j], b[j]);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        // A: rows warp_m + 16 i + g (+ 8), x at k 16t + 8u .. + 8
        const uint4 lo = *reinterpret_cast<const uint4*>(stage + (warp_m + 16 * i + g) * kXPitch + 32 * t + 16 * u);
        const uint4 hi = *reinterpret_cast<const uint4*>(stage + (warp_m + 16 * i + 8 + g) * kXPitch + 32 * t + 16 * u);
#pragma unroll
        for (int p = 0; p < 4; p += 2) {  // mma step s = 2u + p / 2: pairs (p, p + 4) and (p + 1, p + 5)
          const uint32_t lo_p = p == 0 ? lo.x : lo.y, lo_p4 = p == 0 ? lo.z : lo.w;
          const uint32_t hi_p = p == 0 ? hi.x : hi.y, hi_p4 = p == 0 ? hi.z : hi.w;
          const uint32_t a0 = __byte_perm(lo_p, lo_p4, 0x5410), a2 = __byte_perm(lo_p, lo_p4, 0x7632);
          const uint32_t a1 = __byte_perm(hi_p, hi_p4, 0x5410), a3 = __byte_perm(hi_p, hi_p4, 0x7632);
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_16816_rows16<T>(part[i][j], a0, a1, a2, a3, b[j][p], b[j][p + 1]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = warp_n + 8 * j + 2 * t;
      const float s0 = block_scales[group * kBlockN + col], s1 = block_scales[group * kBlockN + col + 1];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        acc[i][j][0] = fmaf(part[i][j][0], s0, acc[i][j][0]);
        acc[i][j][1] = fmaf(part[i][j][1], s1, acc[i][j][1]);
        acc[i][j][2] = fmaf(part[i][j][2], s0, acc[i][j][2]);
        acc[i][j][3] = fmaf(part[i][j][3], s1, acc[i][j][3]);
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = m0 + warp_m + 16 * i + 8 * h + g;
      if (row >= m) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t col = n0 + warp_n + 8 * j + 2 * t;
        if (col < w.n) out[row * ld_out + col] = from_f32<T>(acc[i][j][2 * h]);
        if (col + 1 < w.n) out[row * ld_out + col + 1] = from_f32<T>(acc[i][j][2 * h + 1]);
      }
    }
}

}  // namespace

bool int4_gemm_applies(DType dtype, const QuantWeight& w, const void* x, int64_t ld_x, int64_t m, int num_sms) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return false;
  if (w.format != QuantFormat::kInt4 || m <= kQuantGemvMaxRows || m > kInt4GemmMaxRows) return false;
  if ((w.n + kBlockN - 1) / kBlockN < num_sms) return false;  // no split K yet: a smaller grid idles SMs
  if (w.data == nullptr || w.scales == nullptr || w.zeros == nullptr || w.n <= 0 || w.block_n != 1) return false;
  if (w.k <= 0 || w.k % kTileK != 0 || w.block_k <= 0 || w.block_k % kTileK != 0 || w.k % w.block_k != 0) return false;
  if (ld_x % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0)
    return false;
  return smem_bytes(w.k / w.block_k) <= kInt4GemmMaxSmemBytes;
}

bool int4_gemm_device_supported(int device) {
  int major = 0, smem_optin = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 8 &&
         cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
         smem_optin >= kInt4GemmMaxSmemBytes;
}

cudaError_t launch_int4_gemm(DType dtype, void* out, int64_t ld_out, const void* x, int64_t ld_x, const QuantWeight& w,
                             int64_t m, int num_sms, cudaStream_t stream) {
  if (!int4_gemm_applies(dtype, w, x, ld_x, m, num_sms)) return cudaErrorInvalidValue;
  const int64_t blocks_n = (w.n + kBlockN - 1) / kBlockN, blocks_m = (m + kBlockM - 1) / kBlockM;
  if (blocks_n > 0x7fffffff || blocks_m > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks_n), static_cast<unsigned>(blocks_m));
  const size_t bytes = static_cast<size_t>(smem_bytes(w.k / w.block_k));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    auto kernel = int4_gemm_kernel<T>;
    static std::atomic<uint64_t> raised{0};
    const cudaError_t e = allow_dynamic_smem(kernel, kInt4GemmMaxSmemBytes, raised);
    if (e != cudaSuccess) return e;
    kernel<<<grid, kThreads, bytes, stream>>>(static_cast<T*>(out), ld_out, static_cast<const T*>(x), ld_x, w, m);
    return cudaGetLastError();
  };
  return dtype == DType::kBF16 ? run(__nv_bfloat16{}) : run(__half{});
}

}  // namespace pagellm::cuda
