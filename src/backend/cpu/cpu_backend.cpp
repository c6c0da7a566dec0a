#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/gdn.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/fp8_group_quant.h"
#include "backend/cpu/quant_gemm.h"
#include "backend/cpu/rows.h"
#include "core/thread_pool.h"

namespace pagellm {

namespace cpu {

void load_row_f32(const TensorView& v, const RowLayout& layout, int64_t r, float* dst) {
  const size_t elem = dtype_size_bytes(v.dtype);
  const char* src = static_cast<const char*>(v.data) + static_cast<size_t>(layout.offset(r)) * elem;
  convert_to_f32(src, v.dtype, dst, static_cast<size_t>(layout.row_size));
}

void store_row_f32(TensorView v, const RowLayout& layout, int64_t r, const float* src) {
  const size_t elem = dtype_size_bytes(v.dtype);
  char* dst = static_cast<char*>(v.data) + static_cast<size_t>(layout.offset(r)) * elem;
  convert_from_f32(src, dst, v.dtype, static_cast<size_t>(layout.row_size));
}

}  // namespace cpu

using cpu::load_row_f32;
using cpu::RowLayout;
using cpu::store_row_f32;

namespace {

// Runs fn(row, scratch_a, scratch_b) over all rows of a layout on the global pool, giving each
// worker two f32 scratch rows of `scratch_size` elements.
template <typename Fn>
void parallel_rows(int64_t num_rows, int64_t scratch_size, Fn fn) {
  ThreadPool::global().parallel_for(num_rows, [&](int64_t begin, int64_t end) {
    std::vector<float> a(static_cast<size_t>(scratch_size)), b(static_cast<size_t>(scratch_size));
    for (int64_t r = begin; r < end; ++r) fn(r, a.data(), b.data());
  });
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// torch's gelu(approximate="tanh") in f32, same order of operations.
float gelu_tanh(float x) {
  constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * (x * x * x));
  return 0.5f * x * (1.0f + std::tanh(inner));
}

// backend.h Activation::kClampedSwiglu, rounded where transformers' GptOssExperts rounds.
float clamped_swiglu(float gate, float up, DType dtype) {
  const float g = std::min(gate, kClampedSwigluLimit);
  const float u = std::clamp(up, -kClampedSwigluLimit, kClampedSwigluLimit);
  const float scaled = round_to_dtype(g * kClampedSwigluAlpha, dtype);
  const float sigmoid = round_to_dtype(1.0f / (1.0f + std::exp(-scaled)), dtype);
  const float glu = round_to_dtype(g * sigmoid, dtype);
  return round_to_dtype(u + 1.0f, dtype) * glu;
}

float activation(Activation act, float x) { return act == Activation::kSilu ? silu(x) : gelu_tanh(x); }

}  // namespace

Tensor CpuBackend::alloc(Shape shape, DType dtype) { return Tensor::cpu(shape, dtype); }

int64_t CpuBackend::free_memory_bytes() const {
  std::FILE* file = std::fopen("/proc/meminfo", "r");
  if (!file) return -1;
  char line[256];
  int64_t available_kib = -1;
  while (std::fgets(line, sizeof(line), file)) {
    long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) available_kib = kib;
  }
  std::fclose(file);
  return available_kib < 0 ? -1 : available_kib * 1024;
}

void CpuBackend::copy(TensorView dst, const TensorView& src) {
  CHECK_MSG(dst.device == Device::kCpu && src.device == Device::kCpu, "cpu backend copies host memory");
  CHECK_MSG(dst.numel() == src.numel() && dst.dtype == src.dtype, "copy {} {} -> {} {}",
            src.shape.to_string(), dtype_name(src.dtype), dst.shape.to_string(), dtype_name(dst.dtype));
  if (dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.data, src.data, src.nbytes());
    return;
  }
  const RowLayout in(src), out(dst);
  CHECK(in.row_size == out.row_size);
  const size_t row_bytes = static_cast<size_t>(in.row_size) * dtype_size_bytes(src.dtype);
  const size_t elem = dtype_size_bytes(src.dtype);
  for (int64_t r = 0; r < in.num_rows; ++r)
    std::memcpy(static_cast<char*>(dst.data) + static_cast<size_t>(out.offset(r)) * elem,
                static_cast<const char*>(src.data) + static_cast<size_t>(in.offset(r)) * elem, row_bytes);
}

void CpuBackend::matmul(TensorView out, const TensorView& x, const TensorView& w) {
  // Batch invariant: each output element is a fixed-order f32 sum over its x row and w row (gemm.h).
  cpu::matmul(out, x, w);
}

void CpuBackend::matmul_fp8_block(TensorView out, const TensorView& x, const TensorView& w, const TensorView& w_scale,
                                  int64_t block_n, int64_t block_k) {
  // Dequantized block by block inside the GEMM: bitwise matmul on the f32-dequantized weight (quant_gemm.h).
  cpu::matmul_fp8_block(out, x, w, w_scale, block_n, block_k);
}

void CpuBackend::matmul_mxfp4(TensorView out, const TensorView& x, const TensorView& blocks, const TensorView& scales) {
  cpu::matmul_mxfp4(out, x, blocks, scales);
}

void CpuBackend::matmul_int4(TensorView out, const TensorView& x, const TensorView& qweight, const TensorView& scales,
                             const TensorView& zeros, int64_t group_size) {
  cpu::matmul_int4(out, x, qweight, scales, zeros, group_size);
}

void CpuBackend::quantize_fp8_groups(TensorView x_fp8, TensorView scales, const TensorView& x) {
  cpu::quantize_fp8_groups(x_fp8, scales, x);
}

void CpuBackend::rms_norm(TensorView out, const TensorView& x, const TensorView& w, float eps,
                          NormWeight mode) {
  const RowLayout in(x), dst(out);
  CHECK_MSG(in.row_size == w.numel() && dst.num_rows == in.num_rows && dst.row_size == in.row_size,
            "rms_norm x{} w{} out{}", x.shape.to_string(), w.shape.to_string(), out.shape.to_string());
  std::vector<float> weight(static_cast<size_t>(w.numel()));
  convert_to_f32(w.data, w.dtype, weight.data(), weight.size());
  const int64_t d = in.row_size;
  parallel_rows(in.num_rows, d, [&](int64_t r, float* row, float*) {
    load_row_f32(x, in, r, row);
    double sum_sq = 0.0;  // the order of summation differs from torch anyway; f64 keeps it tight
    for (int64_t i = 0; i < d; ++i) sum_sq += static_cast<double>(row[i]) * row[i];
    const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(d)) + eps);
    if (mode == NormWeight::kPlain) {
      // transformers casts the normalised value to the activation dtype before the weight multiply.
      for (int64_t i = 0; i < d; ++i) row[i] = weight[i] * round_to_dtype(row[i] * inv_rms, out.dtype);
    } else {
      const float offset = mode == NormWeight::kOnePlus ? 1.0f : 0.0f;  // 0 + w is w exactly
      for (int64_t i = 0; i < d; ++i) row[i] = row[i] * inv_rms * (offset + weight[i]);
    }
    store_row_f32(out, dst, r, row);
  });
}

void CpuBackend::add(TensorView out, const TensorView& a, const TensorView& b) {
  const RowLayout la(a), lb(b), lo(out);
  CHECK_MSG(la.num_rows == lb.num_rows && la.row_size == lb.row_size && lo.num_rows == la.num_rows &&
                lo.row_size == la.row_size,
            "add a{} b{} out{}", a.shape.to_string(), b.shape.to_string(), out.shape.to_string());
  parallel_rows(la.num_rows, la.row_size, [&](int64_t r, float* ra, float* rb) {
    load_row_f32(a, la, r, ra);
    load_row_f32(b, lb, r, rb);
    for (int64_t i = 0; i < la.row_size; ++i) ra[i] += rb[i];
    store_row_f32(out, lo, r, ra);
  });
}

void CpuBackend::rope(TensorView x, const TensorView& positions, const TensorView& inv_freq,
                      float attention_scaling) {
  CHECK(x.ndim() == 3 && positions.dtype == DType::kI32 && inv_freq.dtype == DType::kF32);
  const int64_t num_tokens = x.size(0), num_heads = x.size(1), head_dim = x.size(2);
  const int64_t half = inv_freq.numel();
  CHECK_MSG(2 * half <= head_dim && positions.numel() == num_tokens, "rope x{} inv_freq{} positions{}",
            x.shape.to_string(), inv_freq.shape.to_string(), positions.shape.to_string());
  const RowLayout rows(x);
  const float* freq = inv_freq.ptr<float>();
  const int32_t* pos = positions.ptr<int32_t>();
  const DType dt = x.dtype;
  ThreadPool::global().parallel_for(num_tokens, [&](int64_t begin, int64_t end) {
    std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
    std::vector<float> row(static_cast<size_t>(head_dim));
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t m = 0; m < half; ++m) {
        const float angle = static_cast<float>(pos[t]) * freq[m];
        cos_t[m] = round_to_dtype(std::cos(angle) * attention_scaling, dt);
        sin_t[m] = round_to_dtype(std::sin(angle) * attention_scaling, dt);
      }
      for (int64_t h = 0; h < num_heads; ++h) {
        const int64_t r = t * num_heads + h;
        load_row_f32(x, rows, r, row.data());
        // Pairs are (j, j + half): x' = x*cos + rotate_half(x)*sin, each product rounded as torch does.
        for (int64_t j = 0; j < half; ++j) {
          const float lo = row[j], hi = row[j + half];
          const float lo_out = round_to_dtype(lo * cos_t[j], dt) + round_to_dtype(-hi * sin_t[j], dt);
          const float hi_out = round_to_dtype(hi * cos_t[j], dt) + round_to_dtype(lo * sin_t[j], dt);
          row[j] = lo_out;
          row[j + half] = hi_out;
        }
        store_row_f32(x, rows, r, row.data());
      }
    }
  });
}

void CpuBackend::act_mul(TensorView out, const TensorView& gate_up, Activation act) {
  const RowLayout in(gate_up), dst(out);
  const int64_t width = dst.row_size;
  CHECK_MSG(in.row_size == 2 * width && in.num_rows == dst.num_rows, "act_mul gate_up{} out{}",
            gate_up.shape.to_string(), out.shape.to_string());
  parallel_rows(in.num_rows, 2 * width, [&](int64_t r, float* row, float*) {
    load_row_f32(gate_up, in, r, row);
    if (act == Activation::kClampedSwiglu) {
      for (int64_t i = 0; i < width; ++i) row[i] = clamped_swiglu(row[i], row[width + i], out.dtype);
    } else {
      // transformers rounds act(gate) to the activation dtype before multiplying by up.
      for (int64_t i = 0; i < width; ++i) row[i] = round_to_dtype(activation(act, row[i]), out.dtype) * row[width + i];
    }
    store_row_f32(out, dst, r, row);
  });
}

void CpuBackend::add_bias(TensorView x, const TensorView& bias) {
  const RowLayout rows(x);
  CHECK_MSG(bias.numel() == rows.row_size && bias.is_contiguous(), "add_bias x{} bias{}", x.shape.to_string(),
            bias.shape.to_string());
  std::vector<float> b(static_cast<size_t>(rows.row_size));
  convert_to_f32(bias.data, bias.dtype, b.data(), b.size());
  parallel_rows(rows.num_rows, rows.row_size, [&](int64_t r, float* row, float*) {
    load_row_f32(x, rows, r, row);
    for (int64_t i = 0; i < rows.row_size; ++i) row[i] += b[static_cast<size_t>(i)];
    store_row_f32(x, rows, r, row);
  });
}

void CpuBackend::scale(TensorView out, const TensorView& x, float s) {
  const RowLayout in(x), dst(out);
  CHECK_MSG(in.row_size == dst.row_size && in.num_rows == dst.num_rows, "scale x{} out{}", x.shape.to_string(),
            out.shape.to_string());
  parallel_rows(in.num_rows, in.row_size, [&](int64_t r, float* row, float*) {
    load_row_f32(x, in, r, row);
    for (int64_t i = 0; i < in.row_size; ++i) row[i] *= s;
    store_row_f32(out, dst, r, row);
  });
}

void CpuBackend::softcap(TensorView x, float cap) {
  const RowLayout rows(x);
  const DType dt = x.dtype;
  parallel_rows(rows.num_rows, rows.row_size, [&](int64_t r, float* row, float*) {
    load_row_f32(x, rows, r, row);
    for (int64_t i = 0; i < rows.row_size; ++i)
      row[i] = round_to_dtype(std::tanh(round_to_dtype(row[i] / cap, dt)), dt) * cap;
    store_row_f32(x, rows, r, row);
  });
}

void CpuBackend::embedding(TensorView out, const TensorView& table, const TensorView& ids) {
  CHECK(ids.dtype == DType::kI32 && table.ndim() == 2);
  const int64_t num_tokens = ids.numel(), hidden = table.size(1), vocab = table.size(0);
  const RowLayout src(table), dst(out);
  CHECK(dst.num_rows == num_tokens && dst.row_size == hidden);
  const int32_t* id = ids.ptr<int32_t>();
  parallel_rows(num_tokens, hidden, [&](int64_t t, float* row, float*) {
    CHECK_MSG(id[t] >= 0 && id[t] < vocab, "token id {} outside vocab {}", id[t], vocab);
    load_row_f32(table, src, id[t], row);
    store_row_f32(out, dst, t, row);
  });
}

void CpuBackend::write_kv(TensorView k_cache, TensorView v_cache, const TensorView& k,
                          const TensorView& v, const TensorView& slot_mapping, const KvScales& scales) {
  cpu::write_kv(k_cache, v_cache, k, v, slot_mapping, scales);
}

void CpuBackend::attention(TensorView out, const TensorView& q, const TensorView& k_cache,
                           const TensorView& v_cache, const AttentionParams& params) {
  cpu::attention(out, q, k_cache, v_cache, params);
}

void CpuBackend::gdn_conv1d(TensorView out, const TensorView& x, const TensorView& weight, TensorView conv_state,
                            const GdnParams& params) {
  cpu::gdn_conv1d(out, x, weight, conv_state, params);
}

void CpuBackend::gdn_delta_rule(TensorView out, const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& a, const TensorView& b, const TensorView& A_log,
                                const TensorView& dt_bias, TensorView state, const GdnParams& params) {
  cpu::gdn_delta_rule(out, q, k, v, a, b, A_log, dt_bias, state, params);
}

void CpuBackend::gated_rms_norm(TensorView out, const TensorView& x, const TensorView& z, const TensorView& w,
                                float eps) {
  cpu::gated_rms_norm(out, x, z, w, eps);
}

void CpuBackend::sigmoid_mul(TensorView out, const TensorView& x, const TensorView& gate) {
  const RowLayout in(x), g(gate), dst(out);
  const bool per_row = g.row_size == 1;
  CHECK_MSG(g.num_rows == in.num_rows && (per_row || g.row_size == in.row_size) && dst.num_rows == in.num_rows &&
                dst.row_size == in.row_size,
            "sigmoid_mul x{} gate{} out{}", x.shape.to_string(), gate.shape.to_string(), out.shape.to_string());
  parallel_rows(in.num_rows, in.row_size, [&](int64_t r, float* row, float* gate_row) {
    load_row_f32(x, in, r, row);
    load_row_f32(gate, g, r, gate_row);
    // transformers rounds sigmoid(gate) to the activation dtype before the product.
    for (int64_t i = 0; i < in.row_size; ++i)
      row[i] *= round_to_dtype(1.0f / (1.0f + std::exp(-gate_row[per_row ? 0 : i])), gate.dtype);
    store_row_f32(out, dst, r, row);
  });
}

void CpuBackend::moe_route(TensorView topk_ids, TensorView topk_weights, const TensorView& logits, MoeRouting routing,
                           bool renormalize) {
  cpu::moe_route(topk_ids, topk_weights, logits, routing, renormalize);
}

void CpuBackend::moe_group(TensorView tile_pairs, TensorView tile_experts, const TensorView& topk_ids,
                           int64_t num_experts) {
  cpu::moe_group(tile_pairs, tile_experts, topk_ids, num_experts);
}

void CpuBackend::moe_expert_gemm(TensorView out, const TensorView& x, const MoeExpertWeights& w,
                                 const TensorView& tile_pairs, const TensorView& tile_experts, int64_t pairs_per_x_row,
                                 std::optional<Activation> act) {
  cpu::moe_expert_gemm(*this, out, x, w, tile_pairs, tile_experts, pairs_per_x_row, act);
}

void CpuBackend::moe_combine(TensorView out, const TensorView& y, const TensorView& topk_ids,
                             const TensorView& topk_weights, bool accumulate) {
  cpu::moe_combine(out, y, topk_ids, topk_weights, accumulate);
}

void CpuBackend::add_rows_scaled(TensorView out, const TensorView& x, const TensorView& row_ids,
                                 const TensorView& weights) {
  const RowLayout in(x), dst(out);
  CHECK_MSG(row_ids.dtype == DType::kI32 && weights.dtype == DType::kF32 && row_ids.numel() == in.num_rows &&
                weights.numel() == in.num_rows && dst.row_size == in.row_size,
            "add_rows_scaled x{} row_ids{} weights{} out{}", x.shape.to_string(), row_ids.shape.to_string(),
            weights.shape.to_string(), out.shape.to_string());
  std::vector<float> src(static_cast<size_t>(in.row_size)), acc(static_cast<size_t>(in.row_size));
  for (int64_t i = 0; i < in.num_rows; ++i) {  // in order: a row may be named twice
    const int32_t r = row_ids.ptr<int32_t>()[i];
    CHECK_MSG(r >= 0 && r < dst.num_rows, "add_rows_scaled row {} outside [0, {})", r, dst.num_rows);
    load_row_f32(x, in, i, src.data());
    load_row_f32(out, dst, r, acc.data());
    const float w = weights.ptr<float>()[i];
    for (int64_t j = 0; j < in.row_size; ++j) acc[j] += round_to_dtype(w * src[j], out.dtype);
    store_row_f32(out, dst, r, acc.data());
  }
}

void CpuBackend::argmax(TensorView ids, const TensorView& logits) {
  const RowLayout rows(logits);
  CHECK(ids.dtype == DType::kI32 && ids.numel() == rows.num_rows);
  parallel_rows(rows.num_rows, rows.row_size, [&](int64_t r, float* row, float*) {
    load_row_f32(logits, rows, r, row);
    // First index of the maximum, as torch.argmax.
    ids.ptr<int32_t>()[r] = static_cast<int32_t>(std::max_element(row, row + rows.row_size) - row);
  });
}

void CpuBackend::log_softmax(TensorView out, const TensorView& logits) {
  const RowLayout in(logits), dst(out);
  CHECK(out.dtype == DType::kF32 && dst.num_rows == in.num_rows && dst.row_size == in.row_size);
  parallel_rows(in.num_rows, in.row_size, [&](int64_t r, float* row, float*) {
    load_row_f32(logits, in, r, row);
    const float max_value = *std::max_element(row, row + in.row_size);
    double sum = 0.0;
    for (int64_t i = 0; i < in.row_size; ++i) sum += std::exp(static_cast<double>(row[i] - max_value));
    const float log_sum = static_cast<float>(std::log(sum)) + max_value;
    for (int64_t i = 0; i < in.row_size; ++i) row[i] -= log_sum;
    store_row_f32(out, dst, r, row);
  });
}

}  // namespace pagellm
