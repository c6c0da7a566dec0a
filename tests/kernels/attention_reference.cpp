#include "attention_reference.h"

#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/dtype.h"

namespace pagellm::reference {
namespace {

// One element of a float tensor at a 64-bit element offset, widened to f64.
double read_float(const TensorView& view, int64_t offset) {
  const char* base = static_cast<const char*>(view.data);
  switch (view.dtype) {
    case DType::kF32: return reinterpret_cast<const float*>(base)[offset];
    case DType::kBF16: return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(base)[offset]);
    case DType::kF16: return f16_bits_to_f32(reinterpret_cast<const uint16_t*>(base)[offset]);
    case DType::kF8E4M3: return e4m3_bits_to_f32(reinterpret_cast<const uint8_t*>(base)[offset]);
    default: CHECK_MSG(false, "reference: dtype {} is not a float type", dtype_name(view.dtype));
  }
  return 0;
}

int64_t read_i32(const TensorView& view, int64_t index) {
  return view.ptr<const int32_t>()[index];
}

}  // namespace

std::vector<double> attention(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                              const AttentionParams& params) {
  const int64_t num_tokens = q.size(0), num_heads = q.size(1), head_dim = q.size(2);
  const int64_t block_size = k_cache.size(1), num_kv_heads = k_cache.size(2);
  const int64_t heads_per_kv_head = num_heads / num_kv_heads;
  const int64_t num_seqs = params.seq_lens_k.numel();
  const int64_t table_width = params.block_tables.size(1);
  // An FP8 cache holds x / scale: its elements read back as float(stored) * scale (exact in f64).
  const double k_scale = k_cache.dtype == DType::kF8E4M3 ? params.kv_scales.k_scale : 1.0;
  const double v_scale = v_cache.dtype == DType::kF8E4M3 ? params.kv_scales.v_scale : 1.0;
  std::vector<double> out(static_cast<size_t>(num_tokens * num_heads * head_dim), 0.0);

  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t row_begin = read_i32(params.cu_seqlens_q, s);
    const int64_t q_len = read_i32(params.cu_seqlens_q, s + 1) - row_begin;
    const int64_t context_len = read_i32(params.seq_lens_k, s);

    // Dense copies of this sequence's cache: keys[j][kv_head][d], values likewise.
    std::vector<double> keys(static_cast<size_t>(context_len * num_kv_heads * head_dim));
    std::vector<double> values(keys.size());
    for (int64_t j = 0; j < context_len; ++j) {
      const int64_t block = read_i32(params.block_tables, s * table_width + j / block_size);
      const int64_t in_block = j % block_size;
      for (int64_t g = 0; g < num_kv_heads; ++g) {
        for (int64_t d = 0; d < head_dim; ++d) {
          const size_t dense = static_cast<size_t>((j * num_kv_heads + g) * head_dim + d);
          keys[dense] = k_scale * read_float(k_cache, block * k_cache.strides[0] + in_block * k_cache.strides[1] +
                                                          g * k_cache.strides[2] + d * k_cache.strides[3]);
          values[dense] = v_scale * read_float(v_cache, block * v_cache.strides[0] + in_block * v_cache.strides[1] +
                                                            g * v_cache.strides[2] + d * v_cache.strides[3]);
        }
      }
    }

    std::vector<double> scores(static_cast<size_t>(context_len));
    std::vector<bool> allowed(static_cast<size_t>(context_len));
    std::vector<double> query(static_cast<size_t>(head_dim));
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t row = row_begin + i;
      const int64_t pos = context_len - q_len + i;
      for (int64_t h = 0; h < num_heads; ++h) {
        const int64_t g = h / heads_per_kv_head;
        for (int64_t d = 0; d < head_dim; ++d)
          query[static_cast<size_t>(d)] =
              read_float(q, row * q.strides[0] + h * q.strides[1] + d * q.strides[2]);
        double max_score = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (int64_t j = 0; j < context_len; ++j) {
          bool ok = true;
          if (params.causal && j > pos) ok = false;
          if (params.sliding_window > 0 && j <= pos - params.sliding_window) ok = false;
          allowed[static_cast<size_t>(j)] = ok;
          if (!ok) continue;
          double dot = 0;
          const double* k = &keys[static_cast<size_t>((j * num_kv_heads + g) * head_dim)];
          for (int64_t d = 0; d < head_dim; ++d) dot += query[static_cast<size_t>(d)] * k[d];
          double score = dot * params.scale;
          if (params.softcap > 0) score = params.softcap * std::tanh(score / params.softcap);
          scores[static_cast<size_t>(j)] = score;
          max_score = std::max(max_score, score);
          any = true;
        }
        if (!any) continue;  // stays zero
        const bool has_sink = params.sinks.data != nullptr;
        const double sink = has_sink ? params.sinks.ptr<const float>()[h] : 0.0;
        if (has_sink) max_score = std::max(max_score, sink);
        double denominator = has_sink ? std::exp(sink - max_score) : 0.0;
        for (int64_t j = 0; j < context_len; ++j) {
          if (!allowed[static_cast<size_t>(j)]) continue;
          scores[static_cast<size_t>(j)] = std::exp(scores[static_cast<size_t>(j)] - max_score);
          denominator += scores[static_cast<size_t>(j)];
        }
        double* o = &out[static_cast<size_t>((row * num_heads + h) * head_dim)];
        for (int64_t j = 0; j < context_len; ++j) {
          if (!allowed[static_cast<size_t>(j)]) continue;
          const double p = scores[static_cast<size_t>(j)] / denominator;
          const double* v = &values[static_cast<size_t>((j * num_kv_heads + g) * head_dim)];
          for (int64_t d = 0; d < head_dim; ++d) o[d] += p * v[d];
        }
      }
    }
  }
  return out;
}

}  // namespace pagellm::reference
