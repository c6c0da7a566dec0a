// The CPU quantized matmuls (backend/cpu/quant_gemm.h) through CpuBackend: the dequantized weight
// is the format's definition (backend.h), the product matches an f64 reference, and it is bitwise
// CpuBackend::matmul on the f32-dequantized weight for every M and thread count (batch invariant).
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant_gemm.h"
#include "core/thread_pool.h"
#include "quant_test_data.h"

namespace pagellm::quant_test {
namespace {

struct Fp8Case {
  int64_t n, k, block_n, block_k;
};
// N and K not multiples of the block (partial last blocks in both dims), the DeepSeek 128 x 128
// blocks, non-square blocks, blocks larger than the matrix.
const Fp8Case kFp8Cases[] = {{200, 320, 128, 128}, {72, 200, 16, 64}, {33, 96, 8, 32}, {5, 24, 128, 128}};

struct Int4Case {
  int64_t n, k, group_size;
};
const Int4Case kInt4Cases[] = {{200, 384, 128}, {200, 320, 32}, {70, 320, 64}, {9, 64, 8}};

struct Mxfp4Case {
  int64_t n, k;
};
const Mxfp4Case kMxfp4Cases[] = {{192, 64}, {64, 96}, {7, 2880}, {1, 32}};

const int64_t kRows[] = {1, 3, 8, 33};
const DType kXTypes[] = {DType::kF32, DType::kBF16};

Tensor random_x(int64_t m, int64_t k, DType dtype, Rng& rng) {
  Tensor x = Tensor::cpu({m, k}, dtype);
  for (int64_t i = 0; i < x.numel(); ++i) store_float(x.view().data, dtype, i, rng.uniform(-1.0f, 1.0f));
  return x;
}

// Columns [col0, col0 + cols) of a 2-D tensor (a strided view).
TensorView columns(const Tensor& t, int64_t col0, int64_t cols) {
  TensorView v = t.view();
  v.data = static_cast<char*>(v.data) + col0 * static_cast<int64_t>(dtype_size_bytes(v.dtype));
  v.shape = Shape{t.size(0), cols};
  return v;
}

Tensor dense_copy(const TensorView& v) {
  Tensor out = Tensor::cpu(v.shape, v.dtype);
  for (int64_t r = 0; r < v.size(0); ++r)
    for (int64_t c = 0; c < v.size(1); ++c)
      store_float(out.view().data, v.dtype, r * v.size(1) + c, load_float(v.data, v.dtype, r * v.strides[0] + c));
  return out;
}

TEST(QuantGemm, Fp8DequantizationIsTheFormatsDefinition) {
  Rng rng(1);
  for (const Fp8Case& c : kFp8Cases) {
    const Fp8Weight f = random_fp8_weight(c.n, c.k, c.block_n, c.block_k, rng);
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t k = 0; k < c.k; ++k)
        ASSERT_EQ(f.dequantized.ptr<float>()[n * c.k + k], fp8_weight_by_definition(f, n, k))
            << fmt::format("n {} k {} of [{}, {}] in [{}, {}] blocks", n, k, c.n, c.k, c.block_n, c.block_k);
  }
}

TEST(QuantGemm, Int4DequantizationIsTheFormatsDefinition) {
  Rng rng(2);
  for (const Int4Case& c : kInt4Cases) {
    const Int4Weight f = random_int4_weight(c.n, c.k, c.group_size, rng);
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t k = 0; k < c.k; ++k)
        ASSERT_EQ(f.dequantized.ptr<float>()[n * c.k + k], int4_weight_by_definition(f, n, k))
            << fmt::format("n {} k {} of [{}, {}] group {}", n, k, c.n, c.k, c.group_size);
  }
}

TEST(QuantGemm, Mxfp4DequantizationIsTheFormatsDefinition) {
  Rng rng(12);
  for (const Mxfp4Case& c : kMxfp4Cases) {
    const Mxfp4Weight f = random_mxfp4_weight(c.n, c.k, rng);
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t k = 0; k < c.k; ++k)
        ASSERT_EQ(f.dequantized.ptr<float>()[n * c.k + k], mxfp4_weight_by_definition(f, n, k))
            << fmt::format("n {} k {} of [{}, {}]", n, k, c.n, c.k);
  }
}

// The op against the f64 product on the dequantized weight, and bitwise against CpuBackend::matmul
// on that weight in f32 (the same sums: quant_gemm.h).
void check_product(const std::string& what, const Tensor& x, const Tensor& w_f32,
                   const std::function<void(TensorView out, const TensorView& x)>& op) {
  CpuBackend cpu;
  const int64_t m = x.size(0), k = x.size(1), n = w_f32.size(0);
  Tensor got = Tensor::cpu({m, n}, x.dtype());
  op(got.view(), x.view());
  EXPECT_EQ(compare_to_reference(reference_product(x, w_f32), got, out_rounding(x.dtype()),
                                 static_cast<double>(k) * 0x1.0p-24),
            "")
      << what;
  Tensor want = Tensor::cpu({m, n}, x.dtype());
  cpu.matmul(want.view(), x.view(), w_f32.view());
  EXPECT_EQ(bitwise_diff(want, got), "") << what << " vs matmul on the dequantized weight";
}

TEST(QuantGemm, Fp8MatchesReferenceAndMatmulOnDequantizedWeight) {
  CpuBackend cpu;
  Rng rng(3);
  for (const Fp8Case& c : kFp8Cases) {
    const Fp8Weight f = random_fp8_weight(c.n, c.k, c.block_n, c.block_k, rng);
    for (DType dtype : kXTypes)
      for (int64_t m : kRows) {
        const Tensor x = random_x(m, c.k, dtype, rng);
        check_product(fmt::format("fp8 {} m {} n {} k {} blocks [{}, {}]", dtype_name(dtype), m, c.n, c.k, c.block_n,
                                  c.block_k),
                      x, f.dequantized, [&](TensorView out, const TensorView& xv) {
                        cpu.matmul_fp8_block(out, xv, f.w, f.w_scale, c.block_n, c.block_k);
                      });
      }
  }
}

TEST(QuantGemm, Int4MatchesReferenceAndMatmulOnDequantizedWeight) {
  CpuBackend cpu;
  Rng rng(4);
  for (const Int4Case& c : kInt4Cases) {
    const Int4Weight f = random_int4_weight(c.n, c.k, c.group_size, rng);
    for (DType dtype : kXTypes)
      for (int64_t m : kRows) {
        const Tensor x = random_x(m, c.k, dtype, rng);
        check_product(fmt::format("int4 {} m {} n {} k {} group {}", dtype_name(dtype), m, c.n, c.k, c.group_size), x,
                      f.dequantized, [&](TensorView out, const TensorView& xv) {
                        cpu.matmul_int4(out, xv, f.qweight, f.scales, f.zeros, c.group_size);
                      });
      }
  }
}

TEST(QuantGemm, Mxfp4MatchesReferenceAndMatmulOnDequantizedWeight) {
  CpuBackend cpu;
  Rng rng(13);
  for (const Mxfp4Case& c : kMxfp4Cases) {
    const Mxfp4Weight f = random_mxfp4_weight(c.n, c.k, rng);
    for (DType dtype : kXTypes)
      for (int64_t m : kRows) {
        const Tensor x = random_x(m, c.k, dtype, rng);
        check_product(fmt::format("mxfp4 {} m {} n {} k {}", dtype_name(dtype), m, c.n, c.k), x, f.dequantized,
                      [&](TensorView out, const TensorView& xv) { cpu.matmul_mxfp4(out, xv, f.blocks, f.scales); });
      }
  }
}

// Row r of an M-row product is the bits of x row r alone, whatever the thread count; x and out may be
// strided views (columns of wider buffers).
TEST(QuantGemm, RowsAreBatchAndThreadInvariantWithStridedOperands) {
  Rng rng(5);
  const Fp8Weight f8 = random_fp8_weight(200, 320, 128, 128, rng);
  const Int4Weight i4 = random_int4_weight(200, 384, 32, rng);
  ThreadPool three(3);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int which = 0; which < 2; ++which) {
      const int64_t k = which == 0 ? 320 : 384, n = 200, m = 33;
      const Tensor x_wide = random_x(m, k + 24, dtype, rng);
      const TensorView x = columns(x_wide, 8, k);
      auto run = [&](TensorView out, const TensorView& xv, ThreadPool* pool) {
        if (which == 0) cpu::matmul_fp8_block(out, xv, f8.w, f8.w_scale, 128, 128, pool);
        else cpu::matmul_int4(out, xv, i4.qweight, i4.scales, i4.zeros, 32, pool);
      };
      Tensor out_wide = Tensor::cpu({m, n + 5}, dtype);
      run(columns(out_wide, 0, n), x, nullptr);
      const Tensor batch = dense_copy(columns(out_wide, 0, n));
      for (int64_t r : {int64_t{0}, int64_t{7}, int64_t{32}}) {
        Tensor alone = Tensor::cpu({1, n}, dtype);
        TensorView x_row = x;
        x_row.data = static_cast<char*>(x.data) + r * x.strides[0] * static_cast<int64_t>(dtype_size_bytes(dtype));
        x_row.shape = Shape{1, k};
        run(alone.view(), x_row, &three);
        Tensor batch_row = Tensor::cpu({1, n}, dtype);
        std::memcpy(batch_row.view().data, batch.view().ptr<char>() + r * n * dtype_size_bytes(dtype),
                    static_cast<size_t>(n) * dtype_size_bytes(dtype));
        EXPECT_EQ(bitwise_diff(batch_row, alone), "")
            << fmt::format("{} {} row {}", which == 0 ? "fp8" : "int4", dtype_name(dtype), r);
      }
    }
  }
}

}  // namespace
}  // namespace pagellm::quant_test
