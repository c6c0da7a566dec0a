#include "backend/cpu/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/rows.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagellm::cpu {

namespace {

// One call's operands (unit column strides): x in f32, w in f32 or bf16 (WT = uint16_t holds bf16
// bits; a bf16 weight widens exactly to f32, so both give the same bits for the same values, and
// bf16 halves the bytes a memory-bound decode reads).
template <typename WT>
struct Gemm {
  int64_t m, n, k;
  const float* x;
  int64_t ldx;
  const WT* w;
  int64_t ldw;
};

inline float widen(float w) { return w; }
inline float widen(uint16_t bf16_bits) { return bf16_bits_to_f32(bf16_bits); }

// ----- The portable kernel: the definition of the result, one output element at a time.

inline float reduce_lanes(const float* a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

template <typename WT>
inline float dot_portable(const float* x, const WT* w, int64_t k) {
  float acc[8] = {};
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8)
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(x[kk + l], widen(w[kk + l]), acc[l]);
  if (kk < k) {
    for (int l = 0; l < 8; ++l) {
      const bool in = kk + l < k;
      acc[l] = std::fma(in ? x[kk + l] : 0.0f, in ? widen(w[kk + l]) : 0.0f, acc[l]);
    }
  }
  return reduce_lanes(acc);
}

// Output columns [j0, j1) of every row into out (out[i * ldo + (j - j0)]).
template <typename WT>
void block_portable(const Gemm<WT>& g, int64_t j0, int64_t j1, float* out, int64_t ldo) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = j0; j < j1; ++j) out[i * ldo + (j - j0)] = dot_portable(g.x + i * g.ldx, g.w + j * g.ldw, g.k);
}

// ----- The AVX2 kernel: tiles of MR rows x NR columns, one 8-lane accumulator per output, the
// same per-lane FMA sequence and the same reduction tree as dot_portable.

// Sums of 4 accumulators: r[c] = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) of acc c.
[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m128 reduce4_avx2(__m256 c0, __m256 c1, __m256 c2,
                                                                            __m256 c3) {
  // hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7]
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(c0, c1), _mm256_hadd_ps(c2, c3));
  // h = [c0:(01+23), c1:(01+23), c2:.., c3:.. | c0:(45+67), c1:.., c2:.., c3:..]
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// 8 weights from w (f32, or bf16 widened exactly: the bits shifted into the high half).
[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m256 load8(const float* w) { return _mm256_loadu_ps(w); }
[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m256 load8(const uint16_t* w) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
// The first `count` (< 8) weights, zeros after.
[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m256 load_tail(const float* w, __m256i tail_mask, int) {
  return _mm256_maskload_ps(w, tail_mask);
}
[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m256 load_tail(const uint16_t* w, __m256i, int count) {
  alignas(16) uint16_t tmp[8] = {};
  for (int c = 0; c < count; ++c) tmp[c] = w[c];
  return load8(tmp);
}

template <int MR, int NR, typename WT>
[[gnu::target("avx2,fma")]] void tile_avx2(const float* x, int64_t ldx, const WT* const* w, int64_t k,
                                           __m256i tail_mask, float* out, int64_t ldo, int valid_cols) {
  static_assert(NR % 4 == 0 && MR * NR <= 12);
  __m256 acc[MR][NR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t k_full = k & ~int64_t{7};
  for (int64_t kk = 0; kk < k_full; kk += 8) {
    __m256 xv[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + kk);
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) {
      __m256 wv = load8(w[j] + kk);
      // One load per weight vector: without this GCC folds it into each FMA (MR loads instead of 1).
      if constexpr (MR > 1) asm("" : "+x"(wv));
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (k_full < k) {  // zeros past k in both operands: fma(0, 0, acc), as dot_portable
    __m256 xv[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_maskload_ps(x + i * ldx + k_full, tail_mask);
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = load_tail(w[j] + k_full, tail_mask, static_cast<int>(k - k_full));
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < NR; j += 4) {
      const __m128 r = reduce4_avx2(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
      float* dst = out + i * ldo + j;
      if (j + 4 <= valid_cols) {
        _mm_storeu_ps(dst, r);
      } else {
        alignas(16) float lanes[4];
        _mm_store_ps(lanes, r);
        for (int c = 0; c < valid_cols - j; ++c) dst[c] = lanes[c];
      }
    }
  }
}

// Columns [j0, j1) of rows [i, i + MR) in tiles of NR columns; a last partial tile repeats the last
// column's weights in its unused slots (their results are dropped).
template <int MR, int NR, typename WT>
[[gnu::target("avx2,fma")]] void row_strip_avx2(const Gemm<WT>& g, int64_t i, int64_t j0, int64_t j1,
                                                __m256i tail_mask, float* out, int64_t ldo) {
  const float* x = g.x + i * g.ldx;
  for (int64_t j = j0; j < j1; j += NR) {
    const WT* w[NR];
    for (int c = 0; c < NR; ++c) w[c] = g.w + std::min(j + c, j1 - 1) * g.ldw;
    tile_avx2<MR, NR, WT>(x, g.ldx, w, g.k, tail_mask, out + i * ldo + (j - j0), ldo,
                          static_cast<int>(std::min<int64_t>(NR, j1 - j)));
  }
}

// Rows in strips of 3 (12 accumulators); 4 left = 2 + 2, 2 = 2, 1 = 1 (with NR1 columns).
template <int NR1, typename WT>
[[gnu::target("avx2,fma")]] void strips_avx2(const Gemm<WT>& g, int64_t j0, int64_t j1, __m256i tail_mask,
                                             float* out, int64_t ldo) {
  for (int64_t i = 0; i < g.m;) {
    const int64_t left = g.m - i;
    if (left == 4 || left == 2) {
      row_strip_avx2<2, 4, WT>(g, i, j0, j1, tail_mask, out, ldo);
      i += 2;
    } else if (left == 1) {
      row_strip_avx2<1, NR1, WT>(g, i, j0, j1, tail_mask, out, ldo);
      i += 1;
    } else {
      row_strip_avx2<3, 4, WT>(g, i, j0, j1, tail_mask, out, ldo);
      i += 3;
    }
  }
}

template <typename WT>
[[gnu::target("avx2,fma")]] void block_avx2(const Gemm<WT>& g, int64_t j0, int64_t j1, float* out, int64_t ldo) {
  const int tail = static_cast<int>(g.k & 7);
  const __m256i tail_mask =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  constexpr int64_t kSmallXBytes = 1 << 20;
  if (g.m == 1 || g.m * g.k * 4 > kSmallXBytes) {
    // Row strips over the whole block: the block's weights stay in L2 while x streams through.
    strips_avx2<8, WT>(g, j0, j1, tail_mask, out, ldo);
  } else {
    // Few rows (decode): x stays in L2 and each group of 4 weight rows, read from memory once, meets
    // every row of x while it is in L1, so the memory stream overlaps the arithmetic.
    for (int64_t j = j0; j < j1; j += 4)
      strips_avx2<4, WT>(g, j, std::min(j + 4, j1), tail_mask, out + (j - j0), ldo);
  }
}

bool cpu_has_avx2_fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// Columns per block: the block's weights (cols * k floats) stay in L2 while all rows stream through
// it, so w is read from memory once per call; enough blocks that every thread gets some.
int64_t block_cols(int64_t n, int64_t k, int64_t w_bytes, int threads) {
  constexpr int64_t kBlockBytes = 512 * 1024;
  int64_t cols = std::max<int64_t>(8, kBlockBytes / (std::max<int64_t>(k, 1) * w_bytes) / 8 * 8);
  const int64_t per_thread = (n + threads - 1) / threads;
  cols = std::min(cols, std::max<int64_t>(8, (per_thread + 7) / 8 * 8));
  return cols;
}

// Runs fn(j0, j1, out_ptr, ldo) over the column blocks on the pool; fn writes block outputs either
// straight into out (f32) or into a per-chunk scratch the caller's `finish` then narrows.
template <typename WT, typename BlockFn, typename FinishFn>
void run_blocks(const Gemm<WT>& g, ThreadPool* pool, float* out, int64_t ldo, BlockFn block, FinishFn finish) {
  ThreadPool& tp = pool ? *pool : ThreadPool::global();
  const int64_t cols = block_cols(g.n, g.k, static_cast<int64_t>(sizeof(WT)), tp.num_threads());
  const int64_t num_blocks = (g.n + cols - 1) / cols;
  tp.parallel_for(num_blocks, [&](int64_t b0, int64_t b1) {
    std::vector<float> scratch;
    if (!out) scratch.resize(static_cast<size_t>(g.m * cols));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t j0 = b * cols, j1 = std::min(g.n, j0 + cols);
      if (out) {
        block(g, j0, j1, out + j0, ldo);
      } else {
        block(g, j0, j1, scratch.data(), cols);
        finish(j0, j1, scratch.data(), cols);
      }
    }
  });
}

template <typename WT, typename FinishFn>
void gemm_any(GemmIsa isa, const Gemm<WT>& g, ThreadPool* pool, float* out, int64_t ldo, FinishFn finish) {
  if (g.m <= 0 || g.n <= 0) return;
  if (isa == GemmIsa::kAvx2) {
    CHECK_MSG(cpu_has_avx2_fma(), "[gemm] the AVX2 kernel needs a CPU with AVX2 and FMA");
    run_blocks(g, pool, out, ldo, &block_avx2<WT>, finish);
  } else {
    run_blocks(g, pool, out, ldo, &block_portable<WT>, finish);
  }
}

void no_finish(int64_t, int64_t, const float*, int64_t) {}

}  // namespace

GemmIsa gemm_isa() {
  static const GemmIsa isa = cpu_has_avx2_fma() ? GemmIsa::kAvx2 : GemmIsa::kPortable;
  return isa;
}

void gemm_f32_isa(GemmIsa isa, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                  int64_t ldw, float* out, int64_t ldo, ThreadPool* pool) {
  CHECK(out != nullptr || m <= 0 || n <= 0);
  gemm_any(isa, Gemm<float>{m, n, k, x, ldx, w, ldw}, pool, out, ldo, &no_finish);
}

void gemm_bf16w_isa(GemmIsa isa, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const uint16_t* w,
                    int64_t ldw, float* out, int64_t ldo, ThreadPool* pool) {
  CHECK(out != nullptr || m <= 0 || n <= 0);
  gemm_any(isa, Gemm<uint16_t>{m, n, k, x, ldx, w, ldw}, pool, out, ldo, &no_finish);
}

void gemm_f32(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
              float* out, int64_t ldo, ThreadPool* pool) {
  gemm_f32_isa(gemm_isa(), m, n, k, x, ldx, w, ldw, out, ldo, pool);
}

namespace {

template <typename WT>
void matmul_with(TensorView out, const TensorView& x, const WT* w, ThreadPool* pool) {
  const int64_t m = x.size(0), k = x.size(1), n = out.size(1);
  std::vector<float> x_f32;
  const F32Rows rows = f32_rows(x, x_f32);
  const Gemm<WT> g{m, n, k, rows.data, rows.ld, w, k};
  if (out.dtype == DType::kF32) {
    gemm_any(gemm_isa(), g, pool, out.ptr<float>(), out.strides[0], &no_finish);
    return;
  }
  // Narrower out: each block is computed in f32 scratch and rounded once into out.
  const size_t elem = dtype_size_bytes(out.dtype);
  char* out_bytes = static_cast<char*>(out.data);
  const int64_t ldo = out.strides[0];
  const DType out_dtype = out.dtype;
  gemm_any(gemm_isa(), g, pool, nullptr, 0, [&](int64_t j0, int64_t j1, const float* block, int64_t ld) {
    for (int64_t r = 0; r < m; ++r)
      convert_from_f32(block + r * ld, out_bytes + static_cast<size_t>(r * ldo + j0) * elem, out_dtype,
                       static_cast<size_t>(j1 - j0));
  });
}

}  // namespace

void matmul(TensorView out, const TensorView& x, const TensorView& w, ThreadPool* pool) {
  CHECK_MSG((w.dtype == DType::kF32 || w.dtype == DType::kBF16) && w.is_contiguous(),
            "cpu matmul wants contiguous f32 or bf16 weights, got {}", dtype_name(w.dtype));
  CHECK(x.ndim() == 2 && w.ndim() == 2 && out.ndim() == 2);
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  CHECK_MSG(w.size(1) == k && out.size(0) == m && out.size(1) == n, "matmul shapes x{} w{} out{}",
            x.shape.to_string(), w.shape.to_string(), out.shape.to_string());
  CHECK_MSG(x.strides[1] == 1 && out.strides[1] == 1, "matmul wants unit column strides");
  if (m == 0 || n == 0) return;
  if (w.dtype == DType::kBF16) matmul_with(out, x, static_cast<const uint16_t*>(w.data), pool);
  else matmul_with(out, x, w.ptr<float>(), pool);
}

F32Rows f32_rows(const TensorView& x, std::vector<float>& storage) {
  const int64_t m = x.size(0), k = x.size(1);
  if (x.dtype == DType::kF32) return {x.ptr<float>(), m > 1 ? x.strides[0] : k};
  storage.resize(static_cast<size_t>(m * k));
  const size_t elem = dtype_size_bytes(x.dtype);
  for (int64_t r = 0; r < m; ++r)
    convert_to_f32(static_cast<const char*>(x.data) + static_cast<size_t>(r * x.strides[0]) * elem, x.dtype,
                   storage.data() + r * k, static_cast<size_t>(k));
  return {storage.data(), k};
}

}  // namespace pagellm::cpu
