// The CPU GEMM (src/backend/cpu/gemm.h): out = x . w^T agrees with a double-precision reference,
// and each output row is BITWISE the same whatever the batch size M, the row's position in the
// batch, the thread count and the kernel (AVX2 or portable); strided and bf16/f16 operands.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/thread_pool.h"

namespace pagellm {
namespace {

std::vector<float> random_floats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& f : v) f = dist(rng);
  return v;
}

// ref[i][j] = sum_k x[i][k] w[j][k] in double, and the sum of |terms| (the error scale).
struct Reference {
  std::vector<double> value, scale;
};

Reference reference(const float* x, int64_t ldx, const float* w, int64_t m, int64_t n, int64_t k) {
  Reference r{std::vector<double>(static_cast<size_t>(m * n)), std::vector<double>(static_cast<size_t>(m * n))};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, a = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double t = static_cast<double>(x[i * ldx + kk]) * static_cast<double>(w[j * k + kk]);
        s += t;
        a += std::fabs(t);
      }
      r.value[static_cast<size_t>(i * n + j)] = s;
      r.scale[static_cast<size_t>(i * n + j)] = a;
    }
  return r;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Bitwise equality of an m x n block (row strides lda, ldb).
::testing::AssertionResult same_bits(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (bits_of(a[i * lda + j]) != bits_of(b[i * ldb + j]))
        return ::testing::AssertionFailure() << "row " << i << " col " << j << ": " << a[i * lda + j] << " vs "
                                             << b[i * ldb + j];
  return ::testing::AssertionSuccess();
}

TEST(CpuGemm, MatchesDoubleReference) {
  struct Case {
    int64_t m, n, k;
  };
  for (const Case c : {Case{1, 1, 1}, Case{1, 5, 7}, Case{3, 4, 8}, Case{2, 13, 9}, Case{5, 37, 100},
                       Case{7, 130, 1029}, Case{17, 64, 256}, Case{4, 3, 3}, Case{33, 19, 64}, Case{1, 300, 1024}}) {
    SCOPED_TRACE(testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k);
    const auto x = random_floats(static_cast<size_t>(c.m * c.k), 1);
    const auto w = random_floats(static_cast<size_t>(c.n * c.k), 2);
    std::vector<float> out(static_cast<size_t>(c.m * c.n), -1.0f);
    cpu::gemm_f32(c.m, c.n, c.k, x.data(), c.k, w.data(), c.k, out.data(), c.n);
    const Reference ref = reference(x.data(), c.k, w.data(), c.m, c.n, c.k);
    for (size_t e = 0; e < out.size(); ++e)
      ASSERT_NEAR(out[e], ref.value[e], 1e-5 * ref.scale[e] + 1e-30) << "element " << e;
  }
}

TEST(CpuGemm, KZeroGivesZeros) {
  std::vector<float> out(6, 7.0f);
  const float dummy = 0;
  cpu::gemm_f32(2, 3, 0, &dummy, 0, &dummy, 0, out.data(), 3);
  for (float f : out) EXPECT_EQ(f, 0.0f);
}

// Rows [first, first + m) of a 130-row x against w, for several w shapes.
class CpuGemmInvariance : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(CpuGemmInvariance, RowsAreBitwiseEqualAcrossBatchSizesPositionsAndThreads) {
  const auto [n, k] = GetParam();
  constexpr int64_t kRows = 130 + 5;
  const auto x = random_floats(static_cast<size_t>(kRows * k), 3);
  const auto w = random_floats(static_cast<size_t>(n * k), 4);
  // The reference bits: every row computed alone (M = 1).
  std::vector<float> alone(static_cast<size_t>(kRows * n));
  for (int64_t r = 0; r < kRows; ++r)
    cpu::gemm_f32(1, n, k, x.data() + r * k, k, w.data(), k, alone.data() + r * n, n);
  std::vector<float> out;
  for (const int64_t m : {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 33, 64, 130}) {
    for (const int64_t first : {int64_t{0}, int64_t{1}, int64_t{5}}) {
      out.assign(static_cast<size_t>(m * n), 0.0f);
      cpu::gemm_f32(m, n, k, x.data() + first * k, k, w.data(), k, out.data(), n);
      ASSERT_TRUE(same_bits(out.data(), n, alone.data() + first * n, n, m, n)) << "M=" << m << " first=" << first;
    }
  }
  // Thread counts (local pools; the splitting of N into blocks changes with them).
  for (const int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (const int64_t m : {1, 4, 64}) {
      out.assign(static_cast<size_t>(m * n), 0.0f);
      cpu::gemm_f32(m, n, k, x.data(), k, w.data(), k, out.data(), n, &pool);
      ASSERT_TRUE(same_bits(out.data(), n, alone.data(), n, m, n)) << "threads=" << threads << " M=" << m;
    }
  }
  // The portable kernel gives the very same bits as the AVX2 one.
  if (cpu::gemm_isa() == cpu::GemmIsa::kAvx2) {
    for (const int64_t m : {1, 3, 17}) {
      out.assign(static_cast<size_t>(m * n), 0.0f);
      cpu::gemm_f32_isa(cpu::GemmIsa::kPortable, m, n, k, x.data(), k, w.data(), k, out.data(), n);
      ASSERT_TRUE(same_bits(out.data(), n, alone.data(), n, m, n)) << "portable M=" << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuGemmInvariance,
                         ::testing::Values(std::pair<int64_t, int64_t>{37, 1029}, std::pair<int64_t, int64_t>{3, 5},
                                           std::pair<int64_t, int64_t>{130, 64},
                                           std::pair<int64_t, int64_t>{1000, 1024}));

// The Backend::matmul entry with tensors: strided x (a column slice of a wider buffer) and strided
// out (written into a wider buffer, the rest untouched), bf16/f16 x and bf16 out.
struct MatmulCase {
  int64_t m = 5, n = 37, k = 45;
  std::vector<float> x = random_floats(static_cast<size_t>(m * k), 5);
  Tensor w = Tensor::cpu({n, k}, DType::kF32);
  MatmulCase() {
    const auto wv = random_floats(static_cast<size_t>(n * k), 6);
    std::copy(wv.begin(), wv.end(), w.ptr<float>());
  }
};

TEST(CpuGemm, StridedXAndOut) {
  MatmulCase c;
  CpuBackend backend;
  constexpr int64_t kPadX = 11, kPadOut = 6;
  Tensor xbuf = Tensor::cpu({c.m, c.k + kPadX}, DType::kF32);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t kk = 0; kk < c.k + kPadX; ++kk)
      xbuf.ptr<float>()[i * (c.k + kPadX) + kk] = kk < c.k ? c.x[static_cast<size_t>(i * c.k + kk)] : NAN;
  TensorView xv = xbuf.view();
  xv.shape = Shape{c.m, c.k};
  Tensor obuf = Tensor::cpu({c.m, c.n + kPadOut}, DType::kF32);
  for (int64_t e = 0; e < obuf.numel(); ++e) obuf.ptr<float>()[e] = 42.0f;
  TensorView ov = obuf.view();
  ov.shape = Shape{c.m, c.n};
  ov.data = obuf.ptr<float>() + 3;  // columns [3, 3 + n) of each row
  backend.matmul(ov, xv, c.w);
  std::vector<float> dense(static_cast<size_t>(c.m * c.n));
  cpu::gemm_f32(c.m, c.n, c.k, c.x.data(), c.k, c.w.ptr<float>(), c.k, dense.data(), c.n);
  EXPECT_TRUE(same_bits(obuf.ptr<float>() + 3, c.n + kPadOut, dense.data(), c.n, c.m, c.n));
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n + kPadOut; ++j)
      if (j < 3 || j >= 3 + c.n) {
        EXPECT_EQ(obuf.ptr<float>()[i * (c.n + kPadOut) + j], 42.0f) << i << "," << j;
      }
}

TEST(CpuGemm, HalfPrecisionXWithF32Out) {
  MatmulCase c;
  CpuBackend backend;
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    Tensor x = Tensor::cpu({c.m, c.k}, dtype);
    convert_from_f32(c.x.data(), x.ptr<void>(), dtype, c.x.size());
    std::vector<float> widened(c.x.size());
    convert_to_f32(x.ptr<void>(), dtype, widened.data(), widened.size());
    Tensor out = Tensor::cpu({c.m, c.n}, DType::kF32);
    backend.matmul(out, x, c.w);
    std::vector<float> dense(static_cast<size_t>(c.m * c.n));
    cpu::gemm_f32(c.m, c.n, c.k, widened.data(), c.k, c.w.ptr<float>(), c.k, dense.data(), c.n);
    EXPECT_TRUE(same_bits(out.ptr<float>(), c.n, dense.data(), c.n, c.m, c.n)) << dtype_name(dtype);
    const Reference ref = reference(widened.data(), c.k, c.w.ptr<float>(), c.m, c.n, c.k);
    for (size_t e = 0; e < dense.size(); ++e) EXPECT_NEAR(out.ptr<float>()[e], ref.value[e], 1e-5 * ref.scale[e]);
  }
}

// bf16 weights (what the CPU backend keeps for bf16 checkpoints) widen exactly inside the kernel:
// the same bits as the f32 copy of the same weights, for decode-sized and prefill-sized M, K with
// and without a tail of 8, and bf16 activations in and out.
TEST(CpuGemm, Bf16WeightsGiveTheBitsOfTheirF32Copy) {
  CpuBackend backend;
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3 s : {Shape3{1, 37, 45}, Shape3{1, 300, 1024}, Shape3{3, 70, 64}, Shape3{7, 129, 200},
                         Shape3{600, 40, 520}}) {
    for (const DType x_dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "m " << s.m << " n " << s.n << " k " << s.k << " x " << dtype_name(x_dtype));
      const std::vector<float> xv = random_floats(static_cast<size_t>(s.m * s.k), 21);
      const std::vector<float> wv = random_floats(static_cast<size_t>(s.n * s.k), 22);
      Tensor x = Tensor::cpu({s.m, s.k}, x_dtype);
      convert_from_f32(xv.data(), x.ptr<void>(), x_dtype, xv.size());
      Tensor w_bf16 = Tensor::cpu({s.n, s.k}, DType::kBF16);
      convert_from_f32(wv.data(), w_bf16.ptr<void>(), DType::kBF16, wv.size());
      Tensor w_f32 = Tensor::cpu({s.n, s.k}, DType::kF32);
      convert_to_f32(w_bf16.ptr<void>(), DType::kBF16, w_f32.ptr<float>(), wv.size());
      Tensor out_bf16w = Tensor::cpu({s.m, s.n}, x_dtype), out_f32w = Tensor::cpu({s.m, s.n}, x_dtype);
      backend.matmul(out_bf16w, x, w_bf16);
      backend.matmul(out_f32w, x, w_f32);
      EXPECT_EQ(std::memcmp(out_bf16w.ptr<void>(), out_f32w.ptr<void>(), out_f32w.nbytes()), 0);
    }
  }
}

// Both kernels (portable, AVX2 where the CPU has it) over bf16 weights: the bits of the f32 copy.
TEST(CpuGemm, Bf16WeightKernelsAgreeWithTheF32Kernels) {
  const int64_t m = 5, n = 37, k = 45;
  const std::vector<float> x = random_floats(static_cast<size_t>(m * k), 31);
  const std::vector<float> wv = random_floats(static_cast<size_t>(n * k), 32);
  std::vector<uint16_t> w_bf16(wv.size());
  std::vector<float> w_f32(wv.size());
  for (size_t i = 0; i < wv.size(); ++i) {
    w_bf16[i] = f32_to_bf16_bits(wv[i]);
    w_f32[i] = bf16_bits_to_f32(w_bf16[i]);
  }
  std::vector<cpu::GemmIsa> isas = {cpu::GemmIsa::kPortable};
  if (cpu::gemm_isa() == cpu::GemmIsa::kAvx2) isas.push_back(cpu::GemmIsa::kAvx2);
  for (const cpu::GemmIsa isa : isas) {
    std::vector<float> from_bf16(static_cast<size_t>(m * n)), from_f32(static_cast<size_t>(m * n));
    cpu::gemm_bf16w_isa(isa, m, n, k, x.data(), k, w_bf16.data(), k, from_bf16.data(), n);
    cpu::gemm_f32_isa(isa, m, n, k, x.data(), k, w_f32.data(), k, from_f32.data(), n);
    EXPECT_TRUE(same_bits(from_bf16.data(), n, from_f32.data(), n, m, n)) << (isa == cpu::GemmIsa::kAvx2 ? "avx2" : "portable");
  }
}

TEST(CpuGemm, F32XWithBf16OutRoundsOnce) {
  MatmulCase c;
  CpuBackend backend;
  Tensor x = Tensor::cpu({c.m, c.k}, DType::kF32);
  std::copy(c.x.begin(), c.x.end(), x.ptr<float>());
  Tensor out = Tensor::cpu({c.m, c.n}, DType::kBF16);
  backend.matmul(out, x, c.w);
  std::vector<float> dense(static_cast<size_t>(c.m * c.n));
  cpu::gemm_f32(c.m, c.n, c.k, c.x.data(), c.k, c.w.ptr<float>(), c.k, dense.data(), c.n);
  const Reference ref = reference(c.x.data(), c.k, c.w.ptr<float>(), c.m, c.n, c.k);
  const uint16_t* bits = out.ptr<uint16_t>();
  for (size_t e = 0; e < dense.size(); ++e) {
    EXPECT_EQ(bits[e], f32_to_bf16_bits(dense[e])) << "element " << e;
    // Within one bf16 ulp of the exact value.
    const float got = bf16_bits_to_f32(bits[e]);
    const double ulp = std::ldexp(1.0, std::ilogb(std::fabs(ref.value[e]) + 1e-30) - 7);
    EXPECT_LE(std::fabs(got - ref.value[e]), ulp + 1e-5 * ref.scale[e]) << "element " << e;
  }
}

TEST(CpuGemm, BatchSizeZeroWritesNothing) {
  CpuBackend backend;
  Tensor x = Tensor::cpu({0, 16}, DType::kF32);
  Tensor w = Tensor::cpu({8, 16}, DType::kF32);
  Tensor out = Tensor::cpu({0, 8}, DType::kBF16);
  backend.matmul(out, x, w);
  std::vector<float> none;
  cpu::gemm_f32(0, 8, 16, none.data(), 16, w.ptr<float>(), 16, none.data(), 8);
}

TEST(CpuGemm, BackendRowsMatchAloneInsideABatch) {
  // Through CpuBackend with bf16 activations (what a bf16 checkpoint runs): row 0 alone == row 0 of 9.
  CpuBackend backend;
  constexpr int64_t kM = 9, kN = 77, kK = 200;
  Tensor x = Tensor::cpu({kM, kK}, DType::kBF16);
  const auto xv = random_floats(static_cast<size_t>(kM * kK), 8);
  convert_from_f32(xv.data(), x.ptr<void>(), DType::kBF16, xv.size());
  Tensor w = Tensor::cpu({kN, kK}, DType::kF32);
  const auto wv = random_floats(static_cast<size_t>(kN * kK), 9);
  std::copy(wv.begin(), wv.end(), w.ptr<float>());
  Tensor batch = Tensor::cpu({kM, kN}, DType::kBF16);
  backend.matmul(batch, x, w);
  for (int64_t r = 0; r < kM; ++r) {
    Tensor one = Tensor::cpu({1, kN}, DType::kBF16);
    backend.matmul(one, x.view().slice_rows(r, r + 1), w);
    EXPECT_EQ(std::memcmp(one.ptr<uint16_t>(), batch.ptr<uint16_t>() + r * kN, kN * 2), 0) << "row " << r;
  }
}

}  // namespace
}  // namespace pagellm
