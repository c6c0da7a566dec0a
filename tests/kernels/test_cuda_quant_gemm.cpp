// The CUDA quantized matmuls (backend/cuda/quant_gemv.h) through Backend::matmul_fp8_block and
// Backend::matmul_int4: against an f64 reference on the dequantized weight and against the CPU twin,
// on both paths (the register-dequantizing GEMV for M <= 8, dequantization + cuBLASLt for the rest
// and with KernelOptions::quant_gemv off), bitwise batch invariance of the GEMV's rows for M <= 8, and the
// GEMV's bandwidth on an 8B-model-sized weight (printed). Outputs are poisoned (NaN) before each GPU
// run so unwritten elements fail. Skips without a GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"
#include "quant_test_data.h"

namespace pagellm::quant_test {
namespace {

using attention_test::fill_nan;
using attention_test::to_doubles;
using cuda_test::bench_copies;
using cuda_test::bench_tensor;
using cuda_test::graph_us;
using cuda_test::to_device;
using cuda_test::to_host;

// The quantized GEMV / INT4 GEMM on (the default) or off (dequantization + cuBLASLt) for one scope.
cuda_test::ScopedKernelOptions quant_gemv(Backend& gpu, bool on) {
  return cuda_test::ScopedKernelOptions(gpu, [on](KernelOptions& options) { options.quant_gemv = on; });
}

// One quantized weight on the host (with its f32 dequantization) and on the GPU, and the op on it.
struct QuantCase {
  std::string name;
  Tensor dequantized;                  // [N, K] f32, host
  std::vector<Tensor> device_tensors;  // the format's tensors on the GPU
  std::function<void(Backend&, TensorView out, const TensorView& x, const std::vector<Tensor>& w)> op;
  int64_t n() const { return dequantized.size(0); }
  int64_t k() const { return dequantized.size(1); }
};

QuantCase fp8_case(Backend& gpu, int64_t n, int64_t k, int64_t block_n, int64_t block_k, Rng& rng) {
  const Fp8Weight f = random_fp8_weight(n, k, block_n, block_k, rng);
  QuantCase c;
  c.name = fmt::format("fp8 [{}, {}] blocks [{}, {}]", n, k, block_n, block_k);
  c.dequantized = f.dequantized;
  c.device_tensors = {to_device(gpu, f.w.view()), to_device(gpu, f.w_scale.view())};
  c.op = [block_n, block_k](Backend& b, TensorView out, const TensorView& x, const std::vector<Tensor>& w) {
    b.matmul_fp8_block(out, x, w[0], w[1], block_n, block_k);
  };
  return c;
}

QuantCase int4_case(Backend& gpu, int64_t n, int64_t k, int64_t group_size, Rng& rng) {
  const Int4Weight f = random_int4_weight(n, k, group_size, rng);
  QuantCase c;
  c.name = fmt::format("int4 [{}, {}] group {}", n, k, group_size);
  c.dequantized = f.dequantized;
  c.device_tensors = {to_device(gpu, f.qweight.view()), to_device(gpu, f.scales.view()), to_device(gpu, f.zeros.view())};
  c.op = [group_size](Backend& b, TensorView out, const TensorView& x, const std::vector<Tensor>& w) {
    b.matmul_int4(out, x, w[0], w[1], w[2], group_size);
  };
  return c;
}

QuantCase mxfp4_case(Backend& gpu, int64_t n, int64_t k, Rng& rng) {
  const Mxfp4Weight f = random_mxfp4_weight(n, k, rng);
  QuantCase c;
  c.name = fmt::format("mxfp4 [{}, {}]", n, k);
  c.dequantized = f.dequantized;
  c.device_tensors = {to_device(gpu, f.blocks.view()), to_device(gpu, f.scales.view())};
  c.op = [](Backend& b, TensorView out, const TensorView& x, const std::vector<Tensor>& w) {
    b.matmul_mxfp4(out, x, w[0], w[1]);
  };
  return c;
}

// Every piece width of the GEMV (fp8 16/8 bytes, int4 16/8/4), blocks it refuses (fp8 block_k 16 or block_n 8,
// int4 group 8, K % 8 != 0), partial blocks in N and K, an N not a multiple of 16, long K (several
// warps, several rounds of loads per warp).
std::vector<QuantCase> all_cases(Backend& gpu, Rng& rng) {
  std::vector<QuantCase> cases;
  cases.push_back(fp8_case(gpu, 200, 320, 128, 128, rng));   // 16-byte pieces
  cases.push_back(fp8_case(gpu, 72, 200, 16, 64, rng));      // 8-byte pieces
  cases.push_back(fp8_case(gpu, 33, 96, 8, 32, rng));        // block_n 8: dequantization path
  cases.push_back(fp8_case(gpu, 5, 24, 128, 128, rng));      // K < one step
  cases.push_back(fp8_case(gpu, 40, 96, 128, 16, rng));      // block_k 16: dequantization path
  cases.push_back(fp8_case(gpu, 24, 100, 128, 128, rng));    // K % 8 != 0: dequantization path
  cases.push_back(fp8_case(gpu, 64, 8192, 128, 128, rng));   // 16 warps of 8 steps, 4 batches each
  cases.push_back(fp8_case(gpu, 19, 8200, 128, 128, rng));   // 8-byte pieces, 16 warps, a partial last block
  cases.push_back(fp8_case(gpu, 40, 4160, 128, 128, rng));   // 65 steps: full rounds, then a checked one
  cases.push_back(int4_case(gpu, 200, 384, 128, rng));       // 16-byte pieces
  cases.push_back(int4_case(gpu, 70, 320, 64, rng));         // 8-byte pieces
  cases.push_back(int4_case(gpu, 200, 320, 32, rng));        // 4-byte pieces
  cases.push_back(int4_case(gpu, 9, 64, 8, rng));            // group 8: dequantization path
  cases.push_back(int4_case(gpu, 72, 8192, 128, rng));       // 16 warps of 2 batches
  cases.push_back(int4_case(gpu, 24, 4224, 128, rng));       // 33 steps: full rounds, then a checked one
  cases.push_back(int4_case(gpu, 17, 12288, 32, rng));       // 4-byte pieces, 6 batches of loads per warp
  cases.push_back(mxfp4_case(gpu, 192, 64, rng));            // MXFP4: the dequantization path
  cases.push_back(mxfp4_case(gpu, 40, 2880, rng));           // gpt-oss's hidden size
  return cases;
}

// The bound of compare_to_reference for a GPU result: the one rounding into out's dtype, and per
// term either f32 summation (K 2^-24) or W rounded to the dtype by the dequantization path.
double weight_rel(DType dtype, int64_t k) {
  switch (dtype) {
    case DType::kBF16: return 0x1.0p-8;
    case DType::kF16: return 0x1.0p-11;
    default: return static_cast<double>(k) * 0x1.0p-23;
  }
}

Tensor random_x(int64_t rows, int64_t cols, DType dtype, Rng& rng) {
  Tensor x = Tensor::cpu({rows, cols}, dtype);
  for (int64_t i = 0; i < x.numel(); ++i) store_float(x.view().data, dtype, i, rng.uniform(-1.0f, 1.0f));
  return x;
}

// Rows [row0, row0 + rows), columns [col0, col0 + cols) of a 2-D tensor (a strided view).
TensorView block_of(const Tensor& t, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
  TensorView v = t.view();
  v.data = static_cast<char*>(v.data) + (row0 * v.strides[0] + col0) * static_cast<int64_t>(dtype_size_bytes(v.dtype));
  v.shape = Shape{rows, cols};
  return v;
}

// The op on the GPU for rows [row0, row0 + rows) of x_dev (columns [x_col0, x_col0 + K)), into
// the first N columns of a poisoned [rows, N + out_pad] buffer; the result as a dense host [rows, N].
Tensor gpu_product(Backend& gpu, const QuantCase& c, const Tensor& x_dev, int64_t x_col0, int64_t row0, int64_t rows,
                   int64_t out_pad = 0) {
  Tensor poison = Tensor::cpu({rows, c.n() + out_pad}, x_dev.dtype());
  fill_nan(poison);
  Tensor out_dev = to_device(gpu, poison.view());
  const TensorView out = block_of(out_dev, 0, rows, 0, c.n());
  c.op(gpu, out, block_of(x_dev, row0, rows, x_col0, c.k()), c.device_tensors);
  return to_host(gpu, out);
}

Tensor cpu_product(const QuantCase& c, const Tensor& x) {
  CpuBackend cpu;
  Tensor out = Tensor::cpu({x.size(0), c.n()}, x.dtype());
  cpu.matmul(out.view(), x.view(), c.dequantized.view());  // bitwise the CPU quantized op (test_quant_gemm.cpp)
  return out;
}

// Rows [row0, row0 + rows) of a dense host [R, C] tensor.
Tensor host_rows(const Tensor& t, int64_t row0, int64_t rows) {
  Tensor out = Tensor::cpu({rows, t.size(1)}, t.dtype());
  const size_t row_bytes = static_cast<size_t>(t.size(1)) * dtype_size_bytes(t.dtype());
  std::memcpy(out.view().data, t.view().ptr<char>() + static_cast<size_t>(row0) * row_bytes,
              static_cast<size_t>(rows) * row_bytes);
  return out;
}

// GPU result vs the f64 reference and vs the CPU twin's result (the same bound around each).
void expect_close(const Reference& ref, const Tensor& cpu, const Tensor& got, DType dtype, int64_t k,
                  const std::string& what) {
  EXPECT_EQ(compare_to_reference(ref, got, out_rounding(dtype), weight_rel(dtype, k)), "") << what << " vs f64";
  Reference around_cpu{to_doubles(cpu), ref.magnitude};
  EXPECT_EQ(compare_to_reference(around_cpu, got, 2 * out_rounding(dtype), weight_rel(dtype, k)), "")
      << what << " vs the CPU";
}

void run_matches(bool gemv_on, const std::vector<int64_t>& row_counts, uint64_t seed,
                 const std::function<std::vector<QuantCase>(Backend&, Rng&)>& make_cases = all_cases,
                 const std::vector<DType>& dtypes = {DType::kBF16, DType::kF16, DType::kF32}) {
  PAGELLM_GPU_OR_SKIP(gpu);
  // These bounds are the GEMV's, the INT4 GEMM's and the dequantization path's; FP8 products of more
  // than 8 rows would otherwise go W8A8, whose looser bound (activations in FP8) test_cuda_w8a8.cpp checks.
  const cuda_test::ScopedKernelOptions options(*gpu, [gemv_on](KernelOptions& o) {
    o.quant_gemv = gemv_on;
    o.fp8_w8a8 = false;
  });
  Rng rng(seed);
  const std::vector<QuantCase> cases = make_cases(*gpu, rng);
  for (const QuantCase& c : cases) {
    for (DType dtype : dtypes) {
      const int64_t max_rows = row_counts.back();
      // x as columns [8, 8 + K) of a wider buffer: a row stride that is not K, 16-byte aligned.
      const Tensor x_wide = random_x(max_rows, c.k() + 16, dtype, rng);
      const Tensor x_dev = to_device(*gpu, x_wide.view());
      Tensor x_dense = Tensor::cpu({max_rows, c.k()}, dtype);
      for (int64_t r = 0; r < max_rows; ++r)
        for (int64_t kk = 0; kk < c.k(); ++kk)
          store_float(x_dense.view().data, dtype, r * c.k() + kk,
                      load_float(x_wide.view().data, dtype, r * (c.k() + 16) + 8 + kk));
      const Reference ref_all = reference_product(x_dense, c.dequantized);
      const Tensor cpu_all = cpu_product(c, x_dense);
      for (int64_t m : row_counts) {
        const std::string what = fmt::format("{} {} M = {} (quantized GEMV {})", c.name, dtype_name(dtype), m,
                                             gemv_on ? "on" : "off");
        const Tensor got = gpu_product(*gpu, c, x_dev, 8, 0, m, /*out_pad=*/3);
        Reference ref;  // rows [0, m)
        ref.value.assign(ref_all.value.begin(), ref_all.value.begin() + m * c.n());
        ref.magnitude.assign(ref_all.magnitude.begin(), ref_all.magnitude.begin() + m * c.n());
        expect_close(ref, host_rows(cpu_all, 0, m), got, dtype, c.k(), what);
      }
    }
  }
}

TEST(CudaQuantGemm, MatchesReferenceAndCpu) { run_matches(true, {1, 3, 8, 9, 13, 16, 17, 33}, 21); }

TEST(CudaQuantGemm, DequantizationPathMatchesReferenceAndCpuAtDecodeSizes) { run_matches(false, {1, 5, 8, 16}, 22); }

// The INT4 GEMM (int4_gemm.cu: 17..64 rows, weights of at least a column of 128-row blocks per SM; these
// have one for up to 160 SMs, and a partial last block): groups of 64 and 128, K of two k tiles and
// of eight, partial row tiles; 65 rows go through dequantization + cuBLASLt, against the same bounds.
TEST(CudaQuantGemm, Int4GemmMatchesReferenceAndCpu) {
  auto cases = [](Backend& gpu, Rng& rng) {
    std::vector<QuantCase> c;
    c.push_back(int4_case(gpu, 128 * 160 + 72, 128, 64, rng));
    c.push_back(int4_case(gpu, 128 * 160 + 72, 512, 128, rng));
    return c;
  };
  run_matches(true, {17, 24, 33, 64, 65}, 25, cases, {DType::kBF16, DType::kF16});
}

// Row r of an M-row product has the bits of the 1-row product of x row r, for every M <= 16 (one or
// two groups of x rows): a decode batch gives each sequence what it would get alone (the GEMV's promise).
TEST(CudaQuantGemm, GemvRowsAreBatchInvariantBitwise) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto gemv_on = quant_gemv(*gpu, true);
  Rng rng(23);
  std::vector<QuantCase> cases;
  cases.push_back(fp8_case(*gpu, 200, 320, 128, 128, rng));
  cases.push_back(fp8_case(*gpu, 19, 8200, 128, 128, rng));
  cases.push_back(int4_case(*gpu, 200, 384, 128, rng));
  cases.push_back(int4_case(*gpu, 200, 320, 32, rng));
  cases.push_back(int4_case(*gpu, 72, 8192, 128, rng));
  for (const QuantCase& c : cases) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      const Tensor x_dev = to_device(*gpu, random_x(16, c.k(), dtype, rng).view());
      std::vector<Tensor> alone;
      for (int64_t r = 0; r < 16; ++r) alone.push_back(gpu_product(*gpu, c, x_dev, 0, r, 1));
      for (int64_t m = 1; m <= 16; ++m) {
        const Tensor batch = gpu_product(*gpu, c, x_dev, 0, 0, m);
        for (int64_t r = 0; r < m; ++r)
          EXPECT_EQ(bitwise_diff(alone[static_cast<size_t>(r)], host_rows(batch, r, 1)), "")
              << fmt::format("{} {}: row {} of M = {}", c.name, dtype_name(dtype), r, m);
      }
    }
  }
}

// Every finite e4m3 code (subnormals, zero and both signs included) through the GEMV's bit-level
// conversion: row r of W holds code r in all 64 columns, scale 1, x all ones, so out[r] = 64 x the
// code's value, exact in f32 and in bf16/f16: bitwise the CPU's result.
TEST(CudaQuantGemm, GemvConvertsEveryE4m3CodeExactly) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto gemv_on = quant_gemv(*gpu, true);
  constexpr int64_t kCodes = 256, kK = 64;
  Fp8Weight f;
  f.block_n = f.block_k = 128;
  f.w = Tensor::cpu({kCodes, kK}, DType::kF8E4M3);
  for (int64_t r = 0; r < kCodes; ++r)
    for (int64_t c = 0; c < kK; ++c) f.w.ptr<uint8_t>()[r * kK + c] = (r & 0x7f) == 0x7f ? 0 : static_cast<uint8_t>(r);
  f.w_scale = Tensor::cpu({2, 1}, DType::kF32);
  f.w_scale.ptr<float>()[0] = f.w_scale.ptr<float>()[1] = 1.0f;
  f.dequantized = Tensor::cpu({kCodes, kK}, DType::kF32);
  cpu::dequantize_fp8_block_rows(f.w, f.w_scale, 128, 128, 0, kCodes, f.dequantized.ptr<float>());
  QuantCase c;
  c.dequantized = f.dequantized;
  c.device_tensors = {to_device(*gpu, f.w.view()), to_device(*gpu, f.w_scale.view())};
  c.op = [](Backend& b, TensorView out, const TensorView& x, const std::vector<Tensor>& w) {
    b.matmul_fp8_block(out, x, w[0], w[1], 128, 128);
  };
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Tensor ones = Tensor::cpu({1, kK}, dtype);
    for (int64_t i = 0; i < kK; ++i) store_float(ones.view().data, dtype, i, 1.0f);
    const Tensor got = gpu_product(*gpu, c, to_device(*gpu, ones.view()), 0, 0, 1);
    EXPECT_EQ(bitwise_diff(cpu_product(c, ones), got), "") << dtype_name(dtype);
  }
}

// GB/s of the decode GEMVs on Qwen3-8B's projection shapes (o [4096, 4096], q|k|v [6144, 4096],
// gate|up [24576, 4096], down [4096, 12288]): bytes of the weight as stored (quantized values, scales,
// zero points) over the time of one product, next to the bf16 product on the same shape (the GEMV to 8
// rows, cuBLASLt at 16), weights cycling through copies larger than the L2 as a model's layers do.
// Prints; asserts only that the products ran.
TEST(CudaQuantGemm, PrintsGemvBandwidth) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto gemv_on = quant_gemv(*gpu, true);
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {6144, 4096}, {24576, 4096}, {4096, 12288}};
  for (const auto& [n, k] : shapes) {
    const auto bf16 = bench_copies(*gpu, {bench_tensor(*gpu, {n, k}, DType::kBF16, 1, 0x3f)});
    const auto fp8 = bench_copies(*gpu, {bench_tensor(*gpu, {n, k}, DType::kF8E4M3, 2, 0x77),
                                         bench_tensor(*gpu, {(n + 127) / 128, (k + 127) / 128}, DType::kF32, 3, 0xff, 0.001f)});
    const auto int4 = bench_copies(*gpu, {bench_tensor(*gpu, {n, k / 8}, DType::kI32, 4),
                                          bench_tensor(*gpu, {n, k / 128}, DType::kF32, 5, 0xff, 0.001f),
                                          bench_tensor(*gpu, {n, k / 128}, DType::kU8, 6, 0x0f)});
    auto bytes_of = [](const std::vector<Tensor>& w) {
      double sum = 0;
      for (const Tensor& t : w) sum += static_cast<double>(t.nbytes());
      return sum;
    };
    for (int64_t m : {int64_t{1}, int64_t{8}, int64_t{16}}) {  // 16: the GEMV's second group of x rows
      const Tensor x = bench_tensor(*gpu, {m, k}, DType::kBF16, 7, 0x3f);
      const Tensor out = gpu->alloc({m, n}, DType::kBF16);
      const double bf16_us = graph_us(*gpu, bf16, [&](const auto& w) { gpu->matmul(out.view(), x.view(), w[0].view()); });
      const double fp8_us = graph_us(*gpu, fp8, [&](const auto& w) {
        gpu->matmul_fp8_block(out.view(), x.view(), w[0].view(), w[1].view(), 128, 128);
      });
      const double int4_us = graph_us(*gpu, int4, [&](const auto& w) {
        gpu->matmul_int4(out.view(), x.view(), w[0].view(), w[1].view(), w[2].view(), 128);
      });
      std::printf("[quant gemv] W [%ld, %ld] M=%ld: bf16 %.2f us (%.0f GB/s) | fp8 %.2f us (%.0f GB/s, %.2fx bf16) | "
                  "int4 %.2f us (%.0f GB/s, %.2fx bf16)\n",
                  static_cast<long>(n), static_cast<long>(k), static_cast<long>(m), bf16_us,
                  bytes_of(bf16[0]) / bf16_us / 1e3, fp8_us, bytes_of(fp8[0]) / fp8_us / 1e3, fp8_us / bf16_us, int4_us,
                  bytes_of(int4[0]) / int4_us / 1e3, int4_us / bf16_us);
      const Tensor host = to_host(*gpu, out.view());
      for (int64_t i = 0; i < host.numel(); ++i) ASSERT_FALSE(std::isnan(load_float(host.view().data, DType::kBF16, i)));
    }
  }
}

// us per INT4 product of more than 8 rows on Qwen3-8B's shapes: the default path (the in-register GEMM
// where int4_gemm_applies, else dequantization + cuBLASLt) against dequantization + cuBLASLt
// (KernelOptions::quant_gemv off) and against the bf16 cuBLASLt product of the same shape. Prints;
// asserts only that the products ran.
TEST(CudaQuantGemm, PrintsInt4GemmThroughput) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const std::pair<int64_t, int64_t> shapes[] = {{6144, 4096}, {24576, 4096}, {4096, 12288}};
  for (const auto& [n, k] : shapes) {
    const auto bf16 = bench_copies(*gpu, {bench_tensor(*gpu, {n, k}, DType::kBF16, 1, 0x3f)});
    const auto int4 = bench_copies(*gpu, {bench_tensor(*gpu, {n, k / 8}, DType::kI32, 4),
                                          bench_tensor(*gpu, {n, k / 128}, DType::kF32, 5, 0xff, 0.001f),
                                          bench_tensor(*gpu, {n, k / 128}, DType::kU8, 6, 0x0f)});
    for (int64_t m : {int64_t{16}, int64_t{64}, int64_t{128}}) {
      const Tensor x = bench_tensor(*gpu, {m, k}, DType::kBF16, 7, 0x3f);
      const Tensor out = gpu->alloc({m, n}, DType::kBF16);
      auto int4_product = [&](const auto& w) {
        gpu->matmul_int4(out.view(), x.view(), w[0].view(), w[1].view(), w[2].view(), 128);
      };
      const double bf16_us = graph_us(*gpu, bf16, [&](const auto& w) { gpu->matmul(out.view(), x.view(), w[0].view()); });
      int4_product(int4[0]);  // where the default path dequantizes, its workspace grows outside the capture
      const double default_us = graph_us(*gpu, int4, int4_product);
      double dequant_us = 0;
      {
        const auto gemv_off = quant_gemv(*gpu, false);
        int4_product(int4[0]);  // grows the dequantization workspace outside the capture
        dequant_us = graph_us(*gpu, int4, int4_product);
      }
      std::printf("[int4 gemm] W [%ld, %ld] M=%ld: default path %.1f us | dequantize + cuBLASLt %.1f us (%.2fx) | "
                  "bf16 cuBLASLt %.1f us (%.2fx)\n",
                  static_cast<long>(n), static_cast<long>(k), static_cast<long>(m), default_us, dequant_us,
                  dequant_us / default_us, bf16_us, bf16_us / default_us);
      std::fflush(stdout);
      const Tensor host = to_host(*gpu, out.view());
      for (int64_t i = 0; i < host.numel(); ++i) ASSERT_FALSE(std::isnan(load_float(host.view().data, DType::kBF16, i)));
    }
  }
}

}  // namespace
}  // namespace pagellm::quant_test
