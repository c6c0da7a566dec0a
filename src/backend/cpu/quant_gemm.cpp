#include "backend/cpu/quant_gemm.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "backend/cpu/gemm.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagellm::cpu {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

void check_fp8_operands(const TensorView& w, const TensorView& w_scale, int64_t block_n, int64_t block_k) {
  CHECK_MSG(w.ndim() == 2 && w.dtype == DType::kF8E4M3 && w.is_contiguous(),
            "[cpu] matmul_fp8_block: w must be a contiguous [N, K] f8_e4m3 tensor, got {} {}", w.shape.to_string(),
            dtype_name(w.dtype));
  CHECK_MSG(block_n > 0 && block_k > 0, "[cpu] matmul_fp8_block: block sizes must be positive, got [{}, {}]", block_n,
            block_k);
  const int64_t n = w.size(0), k = w.size(1);
  CHECK_MSG(w_scale.ndim() == 2 && w_scale.dtype == DType::kF32 && w_scale.is_contiguous() &&
                w_scale.size(0) == ceil_div(n, block_n) && w_scale.size(1) == ceil_div(k, block_k),
            "[cpu] matmul_fp8_block: w_scale must be a contiguous [{}, {}] f32 tensor for w [{}, {}] in [{}, {}] "
            "blocks, got {} {}",
            ceil_div(n, block_n), ceil_div(k, block_k), n, k, block_n, block_k, w_scale.shape.to_string(),
            dtype_name(w_scale.dtype));
}

void check_int4_operands(const TensorView& qweight, const TensorView& scales, const TensorView& zeros,
                         int64_t group_size) {
  CHECK_MSG(qweight.ndim() == 2 && qweight.dtype == DType::kI32 && qweight.is_contiguous(),
            "[cpu] matmul_int4: qweight must be a contiguous [N, K / 8] i32 tensor, got {} {}",
            qweight.shape.to_string(), dtype_name(qweight.dtype));
  const int64_t n = qweight.size(0), k = qweight.size(1) * 8;
  CHECK_MSG(group_size > 0 && group_size % 8 == 0 && k % group_size == 0,
            "[cpu] matmul_int4: group_size must be a positive multiple of 8 dividing K = {}, got {}", k, group_size);
  const int64_t groups = k / group_size;
  CHECK_MSG(scales.ndim() == 2 && scales.dtype == DType::kF32 && scales.is_contiguous() && scales.size(0) == n &&
                scales.size(1) == groups,
            "[cpu] matmul_int4: scales must be a contiguous [{}, {}] f32 tensor, got {} {}", n, groups,
            scales.shape.to_string(), dtype_name(scales.dtype));
  CHECK_MSG(zeros.ndim() == 2 && zeros.dtype == DType::kU8 && zeros.is_contiguous() && zeros.size(0) == n &&
                zeros.size(1) == groups,
            "[cpu] matmul_int4: zeros must be a contiguous [{}, {}] u8 tensor, got {} {}", n, groups,
            zeros.shape.to_string(), dtype_name(zeros.dtype));
}

void check_mxfp4_operands(const TensorView& blocks, const TensorView& scales) {
  CHECK_MSG(blocks.ndim() == 2 && blocks.dtype == DType::kU8 && blocks.is_contiguous() && blocks.size(1) % 16 == 0,
            "[cpu] matmul_mxfp4: blocks must be a contiguous [N, K / 2] u8 tensor with K % 32 == 0, got {} {}",
            blocks.shape.to_string(), dtype_name(blocks.dtype));
  const int64_t n = blocks.size(0), groups = blocks.size(1) / 16;
  CHECK_MSG(scales.ndim() == 2 && scales.dtype == DType::kU8 && scales.is_contiguous() && scales.size(0) == n &&
                scales.size(1) == groups,
            "[cpu] matmul_mxfp4: scales must be a contiguous [{}, {}] u8 tensor, got {} {}", n, groups,
            scales.shape.to_string(), dtype_name(scales.dtype));
}

void check_activations(const TensorView& out, const TensorView& x, int64_t n, int64_t k, const char* op) {
  CHECK_MSG(x.ndim() == 2 && out.ndim() == 2 && is_float(x.dtype) && is_float(out.dtype),
            "[cpu] {}: x and out must be 2-D f32/bf16/f16, got x {} {} out {} {}", op, x.shape.to_string(),
            dtype_name(x.dtype), out.shape.to_string(), dtype_name(out.dtype));
  CHECK_MSG(x.size(1) == k && out.size(0) == x.size(0) && out.size(1) == n,
            "[cpu] {}: shapes x{} out{} for a [{}, {}] weight", op, x.shape.to_string(), out.shape.to_string(), n, k);
  CHECK_MSG((x.strides[1] == 1 || k <= 1) && (out.strides[1] == 1 || n <= 1),
            "[cpu] {}: x and out need unit column strides", op);
}

// Dequantizes W's rows [n0, n1) into dst [(n1 - n0), K] f32.
using DequantRows = std::function<void(int64_t n0, int64_t n1, float* dst)>;

// Rows of W per block: the f32 block (rows * k floats) stays in L2 while every row of x meets it,
// as gemm.cpp's column blocks; at least 8 rows, and enough blocks that every thread gets some.
int64_t block_rows(int64_t n, int64_t k, int threads) {
  constexpr int64_t kBlockBytes = 512 * 1024;
  int64_t rows = std::max<int64_t>(8, kBlockBytes / (std::max<int64_t>(k, 1) * 4) / 8 * 8);
  const int64_t per_thread = ceil_div(n, threads);
  return std::min(rows, std::max<int64_t>(8, ceil_div(per_thread, 8) * 8));
}

// A pool of one thread: its parallel_for runs inline, so a worker of the global pool can run
// gemm_f32 on its own block (ThreadPool::parallel_for must not nest on one pool).
ThreadPool& inline_pool() {
  static ThreadPool pool(1);
  return pool;
}

// out = x . W^T where W's rows come from `dequant`, block by block on the pool's threads.
void quantized_matmul(TensorView out, const TensorView& x, int64_t n, int64_t k, const DequantRows& dequant,
                      ThreadPool* pool) {
  const int64_t m = x.size(0);
  if (m == 0 || n == 0) return;
  std::vector<float> x_f32;
  const F32Rows x_rows = f32_rows(x, x_f32);
  const float* x_ptr = x_rows.data;
  const int64_t ldx = x_rows.ld;
  ThreadPool& tp = pool ? *pool : ThreadPool::global();
  const int64_t rows = block_rows(n, k, tp.num_threads());
  const int64_t num_blocks = ceil_div(n, rows);
  const bool out_f32 = out.dtype == DType::kF32;
  const int64_t ldo = m > 1 ? out.strides[0] : n;
  const size_t out_elem = dtype_size_bytes(out.dtype);
  tp.parallel_for(num_blocks, [&](int64_t b0, int64_t b1) {
    std::vector<float> w_block(static_cast<size_t>(rows * k));
    std::vector<float> out_block(out_f32 ? 0 : static_cast<size_t>(m * rows));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t j0 = b * rows, j1 = std::min(n, j0 + rows), cols = j1 - j0;
      dequant(j0, j1, w_block.data());
      if (out_f32) {
        gemm_f32(m, cols, k, x_ptr, ldx, w_block.data(), k, out.ptr<float>() + j0, ldo, &inline_pool());
        continue;
      }
      // Narrower out: the block's f32 results are rounded once into out.
      gemm_f32(m, cols, k, x_ptr, ldx, w_block.data(), k, out_block.data(), cols, &inline_pool());
      for (int64_t r = 0; r < m; ++r)
        convert_from_f32(out_block.data() + r * cols,
                         static_cast<char*>(out.data) + static_cast<size_t>(r * ldo + j0) * out_elem, out.dtype,
                         static_cast<size_t>(cols));
    }
  });
}

}  // namespace

void dequantize_fp8_block_rows(const TensorView& w, const TensorView& w_scale, int64_t block_n, int64_t block_k,
                               int64_t n0, int64_t n1, float* dst) {
  check_fp8_operands(w, w_scale, block_n, block_k);
  const int64_t k = w.size(1), k_blocks = w_scale.size(1);
  CHECK(0 <= n0 && n0 <= n1 && n1 <= w.size(0));
  const uint8_t* bytes = static_cast<const uint8_t*>(w.data);
  const float* scale = w_scale.ptr<float>();
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* src = bytes + n * k;
    const float* scale_row = scale + (n / block_n) * k_blocks;
    float* row = dst + (n - n0) * k;
    for (int64_t kk = 0; kk < k; ++kk) row[kk] = e4m3_bits_to_f32(src[kk]) * scale_row[kk / block_k];
  }
}

void dequantize_int4_rows(const TensorView& qweight, const TensorView& scales, const TensorView& zeros,
                          int64_t group_size, int64_t n0, int64_t n1, float* dst) {
  check_int4_operands(qweight, scales, zeros, group_size);
  const int64_t words = qweight.size(1), k = words * 8, groups = k / group_size;
  CHECK(0 <= n0 && n0 <= n1 && n1 <= qweight.size(0));
  const uint32_t* packed = static_cast<const uint32_t*>(qweight.data);
  const float* scale = scales.ptr<float>();
  const uint8_t* zero = static_cast<const uint8_t*>(zeros.data);
  for (int64_t n = n0; n < n1; ++n) {
    float* row = dst + (n - n0) * k;
    for (int64_t kk = 0; kk < k; ++kk) {
      const int q = static_cast<int>((packed[n * words + kk / 8] >> (4 * (kk % 8))) & 0xfu);
      const int64_t g = n * groups + kk / group_size;
      row[kk] = static_cast<float>(q - static_cast<int>(zero[g])) * scale[g];
    }
  }
}

void dequantize_mxfp4_rows(const TensorView& blocks, const TensorView& scales, int64_t n0, int64_t n1, float* dst) {
  check_mxfp4_operands(blocks, scales);
  const int64_t bytes = blocks.size(1), k = bytes * 2, groups = k / kMxfp4Group;
  CHECK(0 <= n0 && n0 <= n1 && n1 <= blocks.size(0));
  const uint8_t* packed = static_cast<const uint8_t*>(blocks.data);
  const uint8_t* exponent = static_cast<const uint8_t*>(scales.data);
  for (int64_t n = n0; n < n1; ++n) {
    float* row = dst + (n - n0) * k;
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = e8m0_to_f32(exponent[n * groups + g]);
      for (int64_t j = 0; j < kMxfp4Group / 2; ++j) {
        const uint8_t byte = packed[n * bytes + g * (kMxfp4Group / 2) + j];
        row[g * kMxfp4Group + 2 * j] = kE2m1Values[byte & 0xfu] * scale;
        row[g * kMxfp4Group + 2 * j + 1] = kE2m1Values[byte >> 4] * scale;
      }
    }
  }
}

void matmul_fp8_block(TensorView out, const TensorView& x, const TensorView& w, const TensorView& w_scale,
                      int64_t block_n, int64_t block_k, ThreadPool* pool) {
  check_fp8_operands(w, w_scale, block_n, block_k);
  const int64_t n = w.size(0), k = w.size(1);
  check_activations(out, x, n, k, "matmul_fp8_block");
  quantized_matmul(out, x, n, k,
                   [&](int64_t n0, int64_t n1, float* dst) {
                     dequantize_fp8_block_rows(w, w_scale, block_n, block_k, n0, n1, dst);
                   },
                   pool);
}

void matmul_int4(TensorView out, const TensorView& x, const TensorView& qweight, const TensorView& scales,
                 const TensorView& zeros, int64_t group_size, ThreadPool* pool) {
  check_int4_operands(qweight, scales, zeros, group_size);
  const int64_t n = qweight.size(0), k = qweight.size(1) * 8;
  check_activations(out, x, n, k, "matmul_int4");
  quantized_matmul(out, x, n, k,
                   [&](int64_t n0, int64_t n1, float* dst) {
                     dequantize_int4_rows(qweight, scales, zeros, group_size, n0, n1, dst);
                   },
                   pool);
}

}  // namespace pagellm::cpu

namespace pagellm::cpu {

void matmul_mxfp4(TensorView out, const TensorView& x, const TensorView& blocks, const TensorView& scales,
                  ThreadPool* pool) {
  check_mxfp4_operands(blocks, scales);
  const int64_t n = blocks.size(0), k = blocks.size(1) * 2;
  check_activations(out, x, n, k, "matmul_mxfp4");
  quantized_matmul(out, x, n, k,
                   [&](int64_t n0, int64_t n1, float* dst) { dequantize_mxfp4_rows(blocks, scales, n0, n1, dst); },
                   pool);
}

}  // namespace pagellm::cpu
