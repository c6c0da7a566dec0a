// The GEMV behind the CUDA backend's matmul for M <= 8 bf16/f16 (backend/cuda/gemv.cu), through
// Backend::matmul: against the CPU twin (as CudaOps.MatmulMatchesCpu), bitwise batch invariance
// (row m of an M-row product is the same bits for every M <= 8), against cuBLASLt
// (KernelOptions::gemv off), the products the GEMV refuses still right through cuBLASLt, and the
// bias the GEMV adds in its epilogue (matmul_bias) equal to add_bias after it.
// Outputs are poisoned (NaN) before each GPU run so unwritten elements fail. Skips without a GPU.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"

namespace pagellm::cuda_test {
namespace {

using attention_test::fill_nan;

const DType kHalfTypes[] = {DType::kBF16, DType::kF16};

// The matmul tolerance of MatmulMatchesCpu for 16-bit outputs: the f32 sum rounded once (one ulp),
// plus an absolute slack for outputs near zero after cancellation.
constexpr double kRel = 0x1.0p-7, kAbs = 1e-3;

Tensor poisoned(Backend& gpu, Shape shape, DType dtype) {
  Tensor host = Tensor::cpu(shape, dtype);
  fill_nan(host);
  return to_device(gpu, host.view());
}

// The GEMV on (the default) or off (every product on cuBLASLt) for one scope.
cuda_test::ScopedKernelOptions gemv_path(Backend& gpu, bool on) {
  return cuda_test::ScopedKernelOptions(gpu, [on](KernelOptions& options) { options.gemv = on; });
}

// Rows [row0, row0 + rows) and columns [col0, col0 + cols) of a 2-D tensor (a strided view).
TensorView block_of(const Tensor& t, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
  TensorView v = t.view();
  v.data = static_cast<char*>(v.data) + (row0 * v.strides[0] + col0) * dtype_size_bytes(v.dtype);
  v.shape = Shape{rows, cols};
  return v;
}

// One product's operands: x [m, k] as columns [x_col0, x_col0 + k) of an [m, x_width] buffer; out
// [m, n] as the first n columns of an [m, out_width] buffer (out_width - n may be odd: ld_out is free).
struct GemvCase {
  int64_t m, n, k;
  int64_t x_width = 0, x_col0 = 0, out_width = 0;  // 0: k, 0, n
};

struct Operands {
  Tensor x_host, w_host;  // x_host: the full [m, x_width] buffer
  Tensor x_dev, w_dev;
};

Operands make_operands(Backend& gpu, const GemvCase& c, DType dtype, Rng& rng) {
  Operands o;
  o.x_host = random_tensor({c.m, c.x_width ? c.x_width : c.k}, dtype, rng);
  o.w_host = random_tensor({c.n, c.k}, dtype, rng);
  o.x_dev = to_device(gpu, o.x_host.view());
  o.w_dev = to_device(gpu, o.w_host.view());
  return o;
}

// The CPU twin: x (dtype) . w widened to f32, rounded into dtype, as MatmulMatchesCpu does.
Tensor cpu_product(const GemvCase& c, const Operands& o, DType dtype) {
  CpuBackend cpu;
  Tensor want = Tensor::cpu({c.m, c.n}, dtype);
  const Tensor w_f32 = converted(o.w_host, DType::kF32);
  cpu.matmul(want.view(), block_of(o.x_host, 0, c.m, c.x_col0, c.k), w_f32.view());
  return want;
}

// gpu->matmul of rows [row0, row0 + rows) of the case's x; the result as a dense host [rows, n].
Tensor gpu_product(Backend& gpu, const GemvCase& c, const Operands& o, DType dtype, int64_t row0, int64_t rows) {
  const int64_t out_width = c.out_width ? c.out_width : c.n;
  Tensor out_dev = poisoned(gpu, {rows, out_width}, dtype);
  TensorView out_view = block_of(out_dev, 0, rows, 0, c.n);
  gpu.matmul(out_view, block_of(o.x_dev, row0, rows, c.x_col0, c.k), o.w_dev.view());
  return to_host(gpu, out_view);
}

// Rows [row0, row0 + rows) of a dense host [R, C] tensor, as a dense tensor.
Tensor host_rows(const Tensor& t, int64_t row0, int64_t rows) {
  Tensor out = Tensor::cpu({rows, t.size(1)}, t.dtype());
  const size_t row_bytes = static_cast<size_t>(t.size(1)) * dtype_size_bytes(t.dtype());
  std::memcpy(out.ptr<char>(), t.ptr<char>() + static_cast<size_t>(row0) * row_bytes,
              static_cast<size_t>(rows) * row_bytes);
  return out;
}

// "" when a and b hold the same bits, else the first element that differs.
std::string bitwise_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel() || a.dtype() != b.dtype()) return "shapes or dtypes differ";
  const size_t elem = dtype_size_bytes(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(a.ptr<char>() + i * elem, b.ptr<char>() + i * elem, elem) != 0)
      return fmt::format("element {}: {} vs {}", i, load_float(a.view().data, a.dtype(), i),
                         load_float(b.view().data, b.dtype(), i));
  }
  return "";
}

std::string describe(const GemvCase& c, DType dtype) {
  return fmt::format("{} m{} n{} k{} x_width {} x_col0 {} out_width {}", dtype_name(dtype), c.m, c.n, c.k,
                     c.x_width ? c.x_width : c.k, c.x_col0, c.out_width ? c.out_width : c.n);
}

// Decode shapes of Qwen3-0.6B (fused qkv, o_proj, gate_up, down), strided x/out, an odd N, K not a
// multiple of 32 (a partial last step), tiny K, K > 4096 (a warp loops over several rounds of loads).
// Each with 8 rows of x; the products of M = 1..8 use its first M rows.
const GemvCase kShapes[] = {
    {8, 4096, 1024},
    {8, 1024, 2048, 2048 + 16, 16, 1024 + 8},
    {8, 6144, 1024},
    {8, 1024, 3072},
    {8, 257, 1000, 1000 + 24, 8, 257 + 3},
    {8, 9, 8},
    {8, 33, 40, 48, 8, 35},
    {8, 72, 8200},
    {8, 3072, 4096},  // few tiles: one wave of 11 warps a tile, the last warp's range shorter
};

TEST(CudaGemv, MatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto gemv_on = gemv_path(*gpu, true);
  Rng rng(11);
  for (DType dtype : kHalfTypes) {
    for (const GemvCase& c : kShapes) {
      const Operands o = make_operands(*gpu, c, dtype, rng);
      const Tensor want = cpu_product(c, o, dtype);  // the CPU's rows are batch invariant: row m for every M
      for (int64_t m = 1; m <= c.m; ++m) {
        SCOPED_TRACE(fmt::format("{} using M = {}", describe(c, dtype), m));
        EXPECT_EQ(compare_tensors(host_rows(want, 0, m), gpu_product(*gpu, c, o, dtype, 0, m), kRel, kAbs), "");
      }
    }
  }
}

// The LM head of Qwen3-0.6B (151936 x 1024): 18992 blocks, the shape that dominates a decode step.
TEST(CudaGemv, MatchesCpuOnLmHeadShape) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto gemv_on = gemv_path(*gpu, true);
  Rng rng(12);
  const GemvCase c{8, 151936, 1024};
  for (DType dtype : kHalfTypes) {
    const Operands o = make_operands(*gpu, c, dtype, rng);
    const Tensor want = cpu_product(c, o, dtype);
    for (int64_t m : {int64_t{1}, int64_t{8}}) {
      SCOPED_TRACE(fmt::format("{} using M = {}", describe(c, dtype), m));
      EXPECT_EQ(compare_tensors(host_rows(want, 0, m), gpu_product(*gpu, c, o, dtype, 0, m), kRel, kAbs), "");
    }
  }
}

// Row r of an M-row product has the same bits as the 1-row product of x row r, for every M <= 8 and
// every row: a decode batch gives each sequence what it would get alone.
TEST(CudaGemv, RowsAreBatchInvariantBitwise) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto gemv_on = gemv_path(*gpu, true);
  Rng rng(13);
  for (DType dtype : kHalfTypes) {
    for (const GemvCase& c : {GemvCase{8, 4096, 1024}, GemvCase{8, 1024, 3072}, GemvCase{8, 151936, 1024},
                              GemvCase{8, 257, 1000, 1000 + 24, 8, 257 + 3}, GemvCase{8, 72, 8200},
                              GemvCase{8, 3072, 4096}}) {
      const Operands o = make_operands(*gpu, c, dtype, rng);
      std::vector<Tensor> alone;  // alone[r] = the product of x row r by itself
      for (int64_t r = 0; r < c.m; ++r) alone.push_back(gpu_product(*gpu, c, o, dtype, r, 1));
      for (int64_t m = 1; m <= c.m; ++m) {
        const Tensor batch = gpu_product(*gpu, c, o, dtype, 0, m);
        for (int64_t r = 0; r < m; ++r) {
          SCOPED_TRACE(fmt::format("{}: row {} of M = {}", describe(c, dtype), r, m));
          EXPECT_EQ(bitwise_diff(alone[static_cast<size_t>(r)], host_rows(batch, r, 1)), "");
        }
      }
    }
  }
}

// The GEMV and cuBLASLt (KernelOptions::gemv off) agree within the CPU tolerance.
TEST(CudaGemv, MatchesCublasLt) {
  PAGELLM_GPU_OR_SKIP(gpu);
  Rng rng(14);
  for (DType dtype : kHalfTypes) {
    for (const GemvCase& c : {GemvCase{1, 4096, 1024}, GemvCase{8, 1024, 3072}, GemvCase{1, 151936, 1024},
                              GemvCase{5, 257, 1000, 1000 + 24, 8, 257 + 3}}) {
      SCOPED_TRACE(describe(c, dtype));
      const Operands o = make_operands(*gpu, c, dtype, rng);
      Tensor cublaslt, gemv;
      {
        const auto gemv_off = gemv_path(*gpu, false);
        cublaslt = gpu_product(*gpu, c, o, dtype, 0, c.m);
      }
      {
        const auto gemv_on = gemv_path(*gpu, true);
        gemv = gpu_product(*gpu, c, o, dtype, 0, c.m);
      }
      EXPECT_EQ(compare_tensors(cublaslt, gemv, kRel, kAbs), "");
    }
  }
}

// Products the GEMV refuses (gemv.h gemv_applies) go to cuBLASLt and are still right: k not a
// multiple of 8, x not 16-byte aligned, ld_x not a multiple of 8, M above 8.
TEST(CudaGemv, FallsBackToCublasLtWhereItDoesNotApply) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto gemv_on = gemv_path(*gpu, true);
  Rng rng(15);
  for (DType dtype : kHalfTypes) {
    for (const GemvCase& c : {GemvCase{1, 512, 1004}, GemvCase{4, 300, 1004},  // k % 8 != 0
                              GemvCase{1, 512, 1024, 1024 + 8, 1}, GemvCase{3, 512, 1024, 1024 + 8, 1},  // x + 2 bytes
                              GemvCase{2, 512, 1024, 1024 + 4, 0},  // ld_x % 8 != 0
                              GemvCase{9, 512, 1024}, GemvCase{16, 1024, 1024}}) {  // M > 8
      SCOPED_TRACE(describe(c, dtype));
      const Operands o = make_operands(*gpu, c, dtype, rng);
      EXPECT_EQ(compare_tensors(cpu_product(c, o, dtype), gpu_product(*gpu, c, o, dtype, 0, c.m), kRel, kAbs), "");
    }
  }
}

// matmul_bias is matmul then add_bias, bit for bit, where the GEMV adds the bias in its epilogue (M <= 8,
// strided x and out, an odd N) and where cuBLASLt runs and add_bias follows (M = 9, and the GEMV off).
TEST(CudaGemv, BiasInTheEpilogueIsMatmulThenAddBias) {
  PAGELLM_GPU_OR_SKIP(gpu);
  Rng rng(17);
  for (const bool use_gemv : {true, false}) {
    const auto path = gemv_path(*gpu, use_gemv);
    for (DType dtype : kHalfTypes) {
      for (const GemvCase& c : {GemvCase{1, 5120, 2880}, GemvCase{8, 257, 1000, 1000 + 24, 8, 257 + 3},
                                GemvCase{3, 33, 40, 48, 8, 35}, GemvCase{9, 512, 1024}}) {
        SCOPED_TRACE(fmt::format("{} gemv {}", describe(c, dtype), use_gemv));
        const Operands o = make_operands(*gpu, c, dtype, rng);
        const Tensor bias = to_device(*gpu, random_tensor({c.n}, dtype, rng).view());
        const TensorView x = block_of(o.x_dev, 0, c.m, c.x_col0, c.k);
        const int64_t out_width = c.out_width ? c.out_width : c.n;
        Tensor apart = poisoned(*gpu, {c.m, out_width}, dtype), fused = poisoned(*gpu, {c.m, out_width}, dtype);
        gpu->matmul(block_of(apart, 0, c.m, 0, c.n), x, o.w_dev.view());
        gpu->add_bias(block_of(apart, 0, c.m, 0, c.n), bias.view());
        gpu->matmul_bias(block_of(fused, 0, c.m, 0, c.n), x, o.w_dev.view(), bias.view());
        EXPECT_EQ(bitwise_diff(to_host(*gpu, block_of(apart, 0, c.m, 0, c.n)),
                               to_host(*gpu, block_of(fused, 0, c.m, 0, c.n))),
                  "");
      }
    }
  }
}

// The GEMV reads the x that the kernel queued before it wrote, and the kernel after it does not
// overwrite x before the GEMV has read it: each round scales x0 by a power of two into one shared
// buffer, then multiplies it, so round i's product is exactly 2^e_i times the product of x0, bit for
// bit, unless a product read a stale or half-written x. Eager launches and a CUDA graph of the same
// rounds. (An early start through programmatic dependent launch, with x read through the
// non-coherent path, failed this test: PERFORMANCE.md, 2026-11-27 GEMV pass.)
TEST(CudaGemv, ReadsTheInputTheKernelBeforeItWrote) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto gemv_on = gemv_path(*gpu, true);
  Rng rng(16);
  constexpr int kRounds = 48;
  const DType dtype = DType::kBF16;
  for (const GemvCase& c : {GemvCase{1, 24576, 4096}, GemvCase{4, 3072, 4096}, GemvCase{8, 151936, 1024}}) {
    SCOPED_TRACE(describe(c, dtype));
    const Operands o = make_operands(*gpu, c, dtype, rng);
    const Tensor base = gpu_product(*gpu, c, o, dtype, 0, c.m);  // x0's product, alone
    const Tensor x_scaled = gpu->alloc({c.m, c.k}, dtype);
    const Tensor outs = gpu->alloc({kRounds * c.m, c.n}, dtype);
    auto exponent = [](int round) { return round % 5 - 2; };
    auto record = [&] {
      for (int i = 0; i < kRounds; ++i) {
        gpu->scale(x_scaled.view(), o.x_dev.view(), std::ldexp(1.0f, exponent(i)));
        gpu->matmul(block_of(outs, i * c.m, c.m, 0, c.n), x_scaled.view(), o.w_dev.view());
      }
    };
    for (const bool graph : {false, true}) {
      SCOPED_TRACE(graph ? "graph" : "eager");
      gpu->copy(outs.view(), poisoned(*gpu, {kRounds * c.m, c.n}, dtype).view());
      if (graph) {
        const auto captured = gpu->capture(record);
        ASSERT_NE(captured, nullptr);
        captured->replay();
      } else {
        record();
      }
      const Tensor got = to_host(*gpu, outs.view());
      for (int i = 0; i < kRounds; ++i) {
        Tensor want = Tensor::cpu({c.m, c.n}, dtype);
        for (int64_t e = 0; e < want.numel(); ++e)
          store_float(want.view().data, dtype, e, std::ldexp(load_float(base.view().data, dtype, e), exponent(i)));
        ASSERT_EQ(bitwise_diff(want, host_rows(got, i * c.m, c.m)), "") << "round " << i;
      }
    }
  }
}

}  // namespace
}  // namespace pagellm::cuda_test
