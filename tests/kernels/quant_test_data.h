// Test inputs of the quantized matmuls (Backend::matmul_fp8_block, Backend::matmul_int4): random
// quantized weights in the layouts of backend.h, their f32 dequantization, an f64 reference product
// and the error bound a 16-bit result may show against it. Shared by the CPU and CUDA tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attention_test_data.h"
#include "backend/cpu/quant_gemm.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace pagellm::quant_test {

using attention_test::find_violations;
using attention_test::load_float;
using attention_test::Rng;
using attention_test::store_float;
using attention_test::Violations;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Fp8Weight {
  int64_t block_n = 128, block_k = 128;
  Tensor w;        // [N, K] f8_e4m3
  Tensor w_scale;  // [ceil(N / block_n), ceil(K / block_k)] f32
  Tensor dequantized;  // [N, K] f32: what the op multiplies by
};

struct Int4Weight {
  int64_t group_size = 128;
  Tensor qweight;  // [N, K / 8] i32
  Tensor scales;   // [N, K / group_size] f32
  Tensor zeros;    // [N, K / group_size] u8
  Tensor dequantized;  // [N, K] f32
};

// Every finite e4m3 byte (subnormals, zero, +-448) with equal odds; scales around 2^-9.
inline Fp8Weight random_fp8_weight(int64_t n, int64_t k, int64_t block_n, int64_t block_k, Rng& rng) {
  Fp8Weight f;
  f.block_n = block_n;
  f.block_k = block_k;
  f.w = Tensor::cpu({n, k}, DType::kF8E4M3);
  uint8_t* bytes = f.w.ptr<uint8_t>();
  for (int64_t i = 0; i < n * k; ++i) {
    uint8_t b;
    do b = static_cast<uint8_t>(rng.below(256));
    while ((b & 0x7f) == 0x7f);  // NaN
    bytes[i] = b;
  }
  f.w_scale = Tensor::cpu({ceil_div(n, block_n), ceil_div(k, block_k)}, DType::kF32);
  for (int64_t i = 0; i < f.w_scale.numel(); ++i) f.w_scale.ptr<float>()[i] = rng.uniform(0.001f, 0.003f);
  f.dequantized = Tensor::cpu({n, k}, DType::kF32);
  cpu::dequantize_fp8_block_rows(f.w, f.w_scale, block_n, block_k, 0, n, f.dequantized.ptr<float>());
  return f;
}

// q and zero uniform in 0..15 (asymmetric, as AWQ), scales around 2^-6.
inline Int4Weight random_int4_weight(int64_t n, int64_t k, int64_t group_size, Rng& rng) {
  Int4Weight f;
  f.group_size = group_size;
  f.qweight = Tensor::cpu({n, k / 8}, DType::kI32);
  uint32_t* words = static_cast<uint32_t*>(f.qweight.view().data);
  for (int64_t i = 0; i < n * k / 8; ++i) {
    uint32_t word = 0;
    for (int j = 0; j < 8; ++j) word |= static_cast<uint32_t>(rng.below(16)) << (4 * j);
    words[i] = word;
  }
  f.scales = Tensor::cpu({n, k / group_size}, DType::kF32);
  f.zeros = Tensor::cpu({n, k / group_size}, DType::kU8);
  for (int64_t i = 0; i < f.scales.numel(); ++i) {
    f.scales.ptr<float>()[i] = rng.uniform(0.01f, 0.03f);
    f.zeros.ptr<uint8_t>()[i] = static_cast<uint8_t>(rng.below(16));
  }
  f.dequantized = Tensor::cpu({n, k}, DType::kF32);
  cpu::dequantize_int4_rows(f.qweight, f.scales, f.zeros, group_size, 0, n, f.dequantized.ptr<float>());
  return f;
}

struct Mxfp4Weight {
  Tensor blocks;       // [N, K / 2] u8
  Tensor scales;       // [N, K / 32] u8 (e8m0)
  Tensor dequantized;  // [N, K] f32
};

// Every nibble with equal odds; exponents 2^-10 .. 2^-3 (gpt-oss's experts sit around there), and
// a few extreme ones (2^-127, 2^0) in the first row.
inline Mxfp4Weight random_mxfp4_weight(int64_t n, int64_t k, Rng& rng) {
  Mxfp4Weight f;
  f.blocks = Tensor::cpu({n, k / 2}, DType::kU8);
  for (int64_t i = 0; i < f.blocks.numel(); ++i) f.blocks.ptr<uint8_t>()[i] = static_cast<uint8_t>(rng.below(256));
  f.scales = Tensor::cpu({n, k / 32}, DType::kU8);
  for (int64_t i = 0; i < f.scales.numel(); ++i) f.scales.ptr<uint8_t>()[i] = static_cast<uint8_t>(117 + rng.below(8));
  f.scales.ptr<uint8_t>()[0] = 0;
  if (k >= 64) f.scales.ptr<uint8_t>()[1] = 127;
  f.dequantized = Tensor::cpu({n, k}, DType::kF32);
  cpu::dequantize_mxfp4_rows(f.blocks, f.scales, 0, n, f.dequantized.ptr<float>());
  return f;
}

// W[n, k] computed straight from the format's definition in backend.h, independently of
// cpu::dequantize_*_rows (the test of those functions).
inline float fp8_weight_by_definition(const Fp8Weight& f, int64_t n, int64_t k) {
  const int64_t kk = f.w.size(1);
  const uint8_t b = f.w.ptr<uint8_t>()[n * kk + k];
  const int exponent = (b >> 3) & 0xf, mantissa = b & 0x7;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  const double value = (b & 0x80) ? -magnitude : magnitude;
  return static_cast<float>(value * f.w_scale.ptr<float>()[(n / f.block_n) * f.w_scale.size(1) + k / f.block_k]);
}
inline float int4_weight_by_definition(const Int4Weight& f, int64_t n, int64_t k) {
  const int64_t words = f.qweight.size(1), groups = f.scales.size(1);
  const uint32_t word = static_cast<const uint32_t*>(f.qweight.view().data)[n * words + k / 8];
  const int q = static_cast<int>((word >> (4 * (k % 8))) & 0xf);
  const int64_t g = n * groups + k / f.group_size;
  return static_cast<float>((q - f.zeros.ptr<uint8_t>()[g]) * static_cast<double>(f.scales.ptr<float>()[g]));
}

// The OCP e2m1 code: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal (0, 0.5).
inline float mxfp4_weight_by_definition(const Mxfp4Weight& f, int64_t n, int64_t k) {
  const int64_t bytes = f.blocks.size(1);
  const uint8_t byte = f.blocks.ptr<uint8_t>()[n * bytes + k / 2];
  const int code = k % 2 == 0 ? byte & 0xf : byte >> 4;
  const int exponent = (code >> 1) & 3, mantissa = code & 1;
  const double magnitude = exponent == 0 ? 0.5 * mantissa : std::ldexp(1.0 + 0.5 * mantissa, exponent - 1);
  const double scale = std::ldexp(1.0, static_cast<int>(f.scales.ptr<uint8_t>()[n * (bytes / 16) + k / 32]) - 127);
  return static_cast<float>(((code & 8) ? -magnitude : magnitude) * scale);
}

// The f64 product of x (any dtype, dense [M, K]) and W [N, K] f32, and for each element the sum of
// |x_k W_k| (the scale of the rounding errors a reordered or narrower computation may make).
struct Reference {
  std::vector<double> value, magnitude;  // [M * N]
};
inline Reference reference_product(const Tensor& x, const Tensor& w_f32) {
  const int64_t m = x.size(0), k = x.size(1), n = w_f32.size(0);
  Reference ref;
  ref.value.assign(static_cast<size_t>(m * n), 0.0);
  ref.magnitude.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double term = static_cast<double>(load_float(x.view().data, x.dtype(), i * k + kk)) *
                            w_f32.ptr<float>()[j * k + kk];
        sum += term;
        mag += std::fabs(term);
      }
      ref.value[static_cast<size_t>(i * n + j)] = sum;
      ref.magnitude[static_cast<size_t>(i * n + j)] = mag;
    }
  return ref;
}

// "" when every element of got (dense [M, N]) is within
//   out_rel * |want| + weight_rel * sum|x_k W_k| + 1e-6
// of the reference, else the worst element. out_rel covers the one rounding into out's dtype;
// weight_rel the per-term error of an f32 sum (~K * 2^-24) or of W rounded to 16 bits (2^-9 for bf16).
inline std::string compare_to_reference(const Reference& ref, const Tensor& got, double out_rel, double weight_rel) {
  auto allowed = [&](int64_t i) {
    return out_rel * std::fabs(ref.value[static_cast<size_t>(i)]) + weight_rel * ref.magnitude[static_cast<size_t>(i)] +
           1e-6;
  };
  const Violations v = find_violations(
      got.numel(),
      [&](int64_t i) { return std::fabs(load_float(got.view().data, got.dtype(), i) - ref.value[static_cast<size_t>(i)]); },
      allowed);
  if (v.count == 0) return "";
  const int64_t worst = v.worst;
  return fmt::format("{} of {} elements differ; worst at {}: want {} got {} (allowed {})", v.count, got.numel(), worst,
                     ref.value[static_cast<size_t>(worst)], load_float(got.view().data, got.dtype(), worst),
                     allowed(worst));
}

// The one rounding into out's dtype, relative: half an ulp (2^-8 bf16, 2^-11 f16, 2^-24 f32), doubled
// for the rounding of a value that is itself a little off.
inline double out_rounding(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 0x1.0p-7;
    case DType::kF16: return 0x1.0p-10;
    default: return 0x1.0p-22;
  }
}

// "" when a and b hold the same bits, else the first element that differs.
inline std::string bitwise_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel() || a.dtype() != b.dtype()) return "shapes or dtypes differ";
  const size_t elem = dtype_size_bytes(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(a.view().ptr<char>() + i * elem, b.view().ptr<char>() + i * elem, elem) != 0)
      return fmt::format("element {}: {} vs {}", i, load_float(a.view().data, a.dtype(), i),
                         load_float(b.view().data, b.dtype(), i));
  }
  return "";
}

}  // namespace pagellm::quant_test
