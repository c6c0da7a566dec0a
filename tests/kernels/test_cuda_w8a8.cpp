// The W8A8 path of Backend::matmul_fp8_block on CUDA (more than 16 rows, 128 x 128 weight blocks):
// the activation quantization against its CPU twin bitwise (Backend::quantize_fp8_groups), the
// product against f64 references, that other shapes still take the dequantization path bit for bit,
// and its throughput next to bf16 cuBLASLt (printed). Outputs are poisoned (NaN) before each GPU run
// so unwritten elements fail. Skips without a GPU.
//
// The bounds. W8A8 rounds each x[m, k] / scale to e4m3 (3 mantissa bits): a relative error of at most
// 2^-4 for normal values, and an absolute one of at most 2^-10 * scale below e4m3's smallest normal
// (2^-6 * scale), scale = max|x group| / 448. Against the f64 product on the unquantized x, each
// element may therefore be off by
//   sum_k (2^-4 + 2^-12) |x_k W_k| + 2^-10 scale_k |W_k|   (+ one rounding into out's dtype),
// the 2^-12 for the tensor cores' accumulation (below). That worst case is loose: the per-term errors
// have random signs and an rms of about 2^-4 / sqrt(3) = 0.036 of each term, and add in quadrature
// as the terms do, so over the whole output ||out - ref|| / ||ref|| stays near that rms whatever K:
// checked under 0.05. Against the f64 product on the quantized x (the CPU twin's bits, dequantized),
// only summation differs: f32 promotion every 128 k of the FP8 MMA's partial sums, checked at
// 2^-12 * sum |x_k W_k| (the MMA's internal accumulation keeps fewer than f32's bits).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cpu/fp8_group_quant.h"
#include "cuda_test_util.h"
#include "quant_test_data.h"

namespace pagellm::quant_test {
namespace {

using attention_test::fill_nan;
using cuda_test::ScopedKernelOptions;
using cuda_test::to_device;
using cuda_test::to_host;

// W8A8 on (the default) or off (FP8 products of > 8 rows dequantized + cuBLASLt) for one scope.
ScopedKernelOptions w8a8(Backend& gpu, bool on) {
  return ScopedKernelOptions(gpu, [on](KernelOptions& options) { options.fp8_w8a8 = on; });
}
constexpr int64_t kGroup = cpu::kFp8GroupSize;

// [rows, cols + 16] of dtype; each (row, 128-group) has its own magnitude 2^-6 .. 2^3, so scales
// differ per group and small values reach e4m3's subnormals. The product reads columns [8, 8 + cols).
Tensor random_activations(int64_t rows, int64_t cols, DType dtype, Rng& rng) {
  Tensor x = Tensor::cpu({rows, cols + 16}, dtype);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g * kGroup < cols; ++g) {
      const float magnitude = std::ldexp(1.0f, static_cast<int>(rng.below(10)) - 6);
      for (int64_t c = 8 + g * kGroup; c < 8 + std::min(cols, (g + 1) * kGroup); ++c)
        store_float(x.view().data, dtype, r * (cols + 16) + c, magnitude * rng.uniform(-1.0f, 1.0f));
    }
  }
  return x;
}

// Columns [8, 8 + cols) of a [rows, cols + 16] tensor.
TensorView inner_columns(const Tensor& t, int64_t cols) {
  TensorView v = t.view();
  v.data = static_cast<char*>(v.data) + 8 * static_cast<int64_t>(dtype_size_bytes(v.dtype));
  v.shape = Shape{t.size(0), cols};
  return v;
}

// "" when two f8_e4m3 tensors hold the same bytes, else the first that differs (the test helpers'
// load_float reads float dtypes only).
std::string fp8_bytes_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return "sizes differ";
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.ptr<uint8_t>()[i] != b.ptr<uint8_t>()[i])
      return fmt::format("element {}: 0x{:02x} vs 0x{:02x}", i, a.ptr<uint8_t>()[i], b.ptr<uint8_t>()[i]);
  return "";
}

TEST(CudaW8A8, QuantizeFp8GroupsMatchesCpuBitwise) {
  PAGELLM_GPU_OR_SKIP(gpu);
  Rng rng(81);
  for (const auto& [m, k] : std::vector<std::pair<int64_t, int64_t>>{{1, 128}, {9, 256}, {33, 4096}, {300, 384}}) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      Tensor x = random_activations(m, k, dtype, rng);
      for (int64_t c = 8; c < 8 + kGroup; ++c) store_float(x.view().data, dtype, c, 0.0f);  // an all-zero group
      const Tensor x_dev = to_device(*gpu, x.view());
      Tensor want_q = Tensor::cpu({m, k}, DType::kF8E4M3), want_s = Tensor::cpu({k / kGroup, m}, DType::kF32);
      cpu::quantize_fp8_groups(want_q.view(), want_s.view(), inner_columns(x, k));
      Tensor poison_q = Tensor::cpu({m, k}, DType::kF8E4M3), poison_s = Tensor::cpu({k / kGroup, m}, DType::kF32);
      std::memset(poison_q.view().data, 0x7f, static_cast<size_t>(poison_q.nbytes()));  // e4m3 NaN
      fill_nan(poison_s);
      const Tensor got_q = to_device(*gpu, poison_q.view()), got_s = to_device(*gpu, poison_s.view());
      gpu->quantize_fp8_groups(got_q.view(), got_s.view(), inner_columns(x_dev, k));
      const std::string what = fmt::format("x [{}, {}] {}", m, k, dtype_name(dtype));
      EXPECT_EQ(fp8_bytes_diff(want_q, to_host(*gpu, got_q.view())), "") << what << ": x_fp8";
      EXPECT_EQ(bitwise_diff(want_s, to_host(*gpu, got_s.view())), "") << what << ": scales";
      EXPECT_EQ(want_s.ptr<float>()[0], 1.0f) << what << ": the all-zero group's scale";
    }
  }
}

struct W8a8References {
  Reference plain;      // f64 on the unquantized x; magnitude = the W8A8 worst-case bound (see top)
  Reference quantized;  // f64 on the dequantized FP8 x; magnitude = sum |x_k W_k|
};

W8a8References references(const Tensor& x_dense, const Tensor& w_f32) {
  const int64_t m = x_dense.size(0), k = x_dense.size(1), n = w_f32.size(0);
  Tensor q = Tensor::cpu({m, k}, DType::kF8E4M3), scales = Tensor::cpu({k / kGroup, m}, DType::kF32);
  cpu::quantize_fp8_groups(q.view(), scales.view(), x_dense.view());
  std::vector<double> x(static_cast<size_t>(m * k)), xq(x.size()), scale_of(x.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = static_cast<size_t>(r * k + c);
      scale_of[i] = scales.ptr<float>()[(c / kGroup) * m + r];
      x[i] = load_float(x_dense.view().data, x_dense.dtype(), r * k + c);
      xq[i] = static_cast<double>(e4m3_bits_to_f32(q.ptr<uint8_t>()[i])) * scale_of[i];
    }
  W8a8References refs;
  for (Reference* ref : {&refs.plain, &refs.quantized}) {
    ref->value.assign(static_cast<size_t>(m * n), 0.0);
    ref->magnitude.assign(static_cast<size_t>(m * n), 0.0);
  }
  const float* w = w_f32.ptr<float>();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, bound = 0, sum_q = 0, mag_q = 0;
      for (int64_t c = 0; c < k; ++c) {
        const size_t i = static_cast<size_t>(r * k + c);
        const double wv = w[j * k + c];
        sum += x[i] * wv;
        bound += (0x1.0p-4 + 0x1.0p-12) * std::fabs(x[i] * wv) + 0x1.0p-10 * scale_of[i] * std::fabs(wv);
        sum_q += xq[i] * wv;
        mag_q += std::fabs(xq[i] * wv);
      }
      const size_t o = static_cast<size_t>(r * n + j);
      refs.plain.value[o] = sum;
      refs.plain.magnitude[o] = bound;
      refs.quantized.value[o] = sum_q;
      refs.quantized.magnitude[o] = mag_q;
    }
  return refs;
}

double norm_relative_error(const Reference& ref, const Tensor& got) {
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double want = ref.value[static_cast<size_t>(i)];
    const double e = load_float(got.view().data, got.dtype(), i) - want;
    err2 += e * e;
    ref2 += want * want;
  }
  return std::sqrt(err2 / ref2);
}

// The product on the GPU into a poisoned [m, n + 8] buffer (rows 16-byte aligned, as cuBLASLt's FP8
// kernels want them); the first n columns as a dense host tensor.
Tensor fp8_product(Backend& gpu, const TensorView& x, const Tensor& w, const Tensor& w_scale, int64_t block_n,
                   int64_t block_k) {
  const int64_t m = x.size(0), n = w.size(0);
  Tensor poison = Tensor::cpu({m, n + 8}, x.dtype);
  fill_nan(poison);
  Tensor out_dev = to_device(gpu, poison.view());
  TensorView out = out_dev.view();
  out.shape = Shape{m, n};
  gpu.matmul_fp8_block(out, x, w, w_scale, block_n, block_k);
  return to_host(gpu, out);
}

Tensor dense_rows(const Tensor& x_wide, int64_t rows, int64_t cols) {
  Tensor dense = Tensor::cpu({rows, cols}, x_wide.dtype());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      store_float(dense.view().data, dense.dtype(), r * cols + c,
                  load_float(x_wide.view().data, x_wide.dtype(), r * (cols + 16) + 8 + c));
  return dense;
}

TEST(CudaW8A8, MatchesReferences) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const ScopedKernelOptions gemv_default(*gpu, [](KernelOptions& o) { o.quant_gemv = true; });
  Rng rng(82);
  struct Case {
    int64_t n, k;
    std::vector<int64_t> rows;
  };
  // K % 512 != 0 (padded weight scales) and == 0, a partial last block of N, Qwen3-8B's MLP shapes.
  const std::vector<Case> cases = {{384, 256, {17, 33, 128, 300}}, {400, 640, {17, 130}},
                                   {384, 4096, {17, 33, 128, 300}}, {12288, 4096, {17, 33}},
                                   {256, 12288, {64}}};
  for (const Case& c : cases) {
    const Fp8Weight f = random_fp8_weight(c.n, c.k, 128, 128, rng);
    const Tensor w = to_device(*gpu, f.w.view()), w_scale = to_device(*gpu, f.w_scale.view());
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      const int64_t max_rows = c.rows.back();
      const Tensor x_wide = random_activations(max_rows, c.k, dtype, rng);
      const Tensor x_dev = to_device(*gpu, x_wide.view());
      for (int64_t m : c.rows) {
        TensorView x = inner_columns(x_dev, c.k);
        x.shape = Shape{m, c.k};
        const std::string what = fmt::format("fp8 [{}, {}] {} M = {}", c.n, c.k, dtype_name(dtype), m);
        Tensor got, dequantized;
        {
          const auto on = w8a8(*gpu, true);
          got = fp8_product(*gpu, x, w, w_scale, 128, 128);
        }
        {
          const auto off = w8a8(*gpu, false);
          dequantized = fp8_product(*gpu, x, w, w_scale, 128, 128);
        }
        const bool took_w8a8 = !bitwise_diff(got, dequantized).empty();
        const W8a8References refs = references(dense_rows(x_wide, m, c.k), f.dequantized);
        EXPECT_EQ(compare_to_reference(refs.plain, got, out_rounding(dtype), 1.0), "") << what << " vs f64 on x";
        const double norm_err = norm_relative_error(refs.plain, got);
        EXPECT_LT(norm_err, 0.05) << what;
        if (took_w8a8) {
          EXPECT_EQ(compare_to_reference(refs.quantized, got, out_rounding(dtype), 0x1.0p-12), "")
              << what << " vs f64 on the FP8 x";
        }
        std::printf("[w8a8] %s: %s, ||out - ref|| / ||ref|| = %.4f (FP8 x: %.2e)\n", what.c_str(),
                    took_w8a8 ? "W8A8" : "dequantization", norm_err, norm_relative_error(refs.quantized, got));
      }
    }
  }
}

// Products the W8A8 path does not take give the dequantization path's bits with it on or off.
TEST(CudaW8A8, OtherShapesTakeTheDequantizationPath) {
  PAGELLM_GPU_OR_SKIP(gpu);
  Rng rng(83);
  struct Case {
    int64_t n, k, block_n, block_k;
    DType dtype;
    const char* why;
  };
  const std::vector<Case> cases = {{200, 256, 128, 128, DType::kBF16, "N % 16 != 0"},
                                   {256, 256, 64, 128, DType::kBF16, "block_n 64"},
                                   {256, 384, 128, 64, DType::kF16, "block_k 64"},
                                   {256, 256, 128, 128, DType::kF32, "f32 activations"}};
  for (const Case& c : cases) {
    const Fp8Weight f = random_fp8_weight(c.n, c.k, c.block_n, c.block_k, rng);
    const Tensor w = to_device(*gpu, f.w.view()), w_scale = to_device(*gpu, f.w_scale.view());
    const Tensor x_dev = to_device(*gpu, random_activations(33, c.k, c.dtype, rng).view());
    const TensorView x = inner_columns(x_dev, c.k);
    Tensor on, off;
    {
      const auto e = w8a8(*gpu, true);
      on = fp8_product(*gpu, x, w, w_scale, c.block_n, c.block_k);
    }
    {
      const auto e = w8a8(*gpu, false);
      off = fp8_product(*gpu, x, w, w_scale, c.block_n, c.block_k);
    }
    EXPECT_EQ(bitwise_diff(on, off), "") << c.why;
  }
}

// TFLOP/s (2 M N K over the time of one product) of W8A8, the dequantization path and bf16
// cuBLASLt on a dense bf16 weight, on Qwen3-8B's MLP weights. Prints; asserts only that they ran.
TEST(CudaW8A8, PrintsThroughputAgainstBf16) {
  PAGELLM_GPU_OR_SKIP(gpu);
  Rng rng(84);
  auto time_us = [&](const std::function<void()>& product) { return cuda_test::time_us(*gpu, product, 3, 20); };
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{12288, 4096}, std::pair<int64_t, int64_t>{4096, 12288}}) {
    const Fp8Weight f8 = random_fp8_weight(n, k, 128, 128, rng);
    const Tensor w8 = to_device(*gpu, f8.w.view()), s8 = to_device(*gpu, f8.w_scale.view());
    const Tensor w16 = to_device(*gpu, cuda_test::random_tensor({n, k}, DType::kBF16, rng, -0.05f, 0.05f).view());
    for (int64_t m : {int64_t{64}, int64_t{128}, int64_t{256}, int64_t{2048}}) {
      const Tensor x = to_device(*gpu, cuda_test::random_tensor({m, k}, DType::kBF16, rng).view());
      const Tensor out = gpu->alloc({m, n}, DType::kBF16);
      const Tensor x_fp8 = gpu->alloc({m, k}, DType::kF8E4M3), x_scales = gpu->alloc({k / kGroup, m}, DType::kF32);
      const double bf16_us = time_us([&] { gpu->matmul(out.view(), x.view(), w16.view()); });
      double w8a8_us = 0, dequant_us = 0;
      {
        const auto e = w8a8(*gpu, true);
        w8a8_us = time_us([&] { gpu->matmul_fp8_block(out.view(), x.view(), w8, s8, 128, 128); });
      }
      const Tensor host = to_host(*gpu, out.view());
      {
        const auto e = w8a8(*gpu, false);
        dequant_us = time_us([&] { gpu->matmul_fp8_block(out.view(), x.view(), w8, s8, 128, 128); });
      }
      const double quant_us = time_us([&] { gpu->quantize_fp8_groups(x_fp8.view(), x_scales.view(), x.view()); });
      const double flop = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
      std::printf("[w8a8] W [%ld, %ld] M=%ld: bf16 %.1f us (%.0f TFLOP/s) | W8A8 %.1f us (%.0f TFLOP/s, %.2fx bf16's "
                  "speed; x quantization %.1f us) | dequantization path %.1f us (%.0f TFLOP/s)\n",
                  static_cast<long>(n), static_cast<long>(k), static_cast<long>(m), bf16_us, flop / bf16_us / 1e6,
                  w8a8_us, flop / w8a8_us / 1e6, bf16_us / w8a8_us, quant_us, dequant_us, flop / dequant_us / 1e6);
      for (int64_t i = 0; i < host.numel(); ++i) ASSERT_FALSE(std::isnan(load_float(host.view().data, DType::kBF16, i)));
    }
  }
}

}  // namespace
}  // namespace pagellm::quant_test
