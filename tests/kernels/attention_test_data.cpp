#include "attention_test_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "backend/cpu/attention.h"
#include "core/check.h"
#include "core/dtype.h"

namespace pagellm::attention_test {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float Rng::uniform(float lo, float hi) {
  const float unit = static_cast<float>(next() >> 40) * 0x1.0p-24f;  // [0, 1)
  return lo + (hi - lo) * unit;
}

int64_t Rng::below(int64_t n) {
  return static_cast<int64_t>(next() % static_cast<uint64_t>(n));
}

void store_float(void* base, DType dtype, int64_t offset, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(base)[offset] = value; return;
    case DType::kBF16: static_cast<uint16_t*>(base)[offset] = f32_to_bf16_bits(value); return;
    case DType::kF16: static_cast<uint16_t*>(base)[offset] = f32_to_f16_bits(value); return;
    case DType::kF8E4M3: static_cast<uint8_t*>(base)[offset] = f32_to_e4m3_bits(value); return;
    default: CHECK_MSG(false, "not a float dtype");
  }
}

float load_float(const void* base, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(base)[offset];
    case DType::kBF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[offset]);
    case DType::kF16: return f16_bits_to_f32(static_cast<const uint16_t*>(base)[offset]);
    case DType::kF8E4M3: return e4m3_bits_to_f32(static_cast<const uint8_t*>(base)[offset]);
    default: CHECK_MSG(false, "not a float dtype");
  }
  return 0;
}

void fill_nan(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) store_float(t.view().data, t.dtype(), i, std::nanf(""));
}

namespace {

// q and k are drawn from [-3, 3]: scaled scores then have a standard deviation of about 3, so the
// softmax is far from uniform (masking errors show) and a softcap of 50 changes results measurably.
constexpr float kQkRange = 3.0f;

// What a cache element holding `value` reads back as: the value in the case dtype, or for an FP8
// cache float(e4m3(value / scale)) * scale, in f32 as the kernels compute it.
float cached_value(const AttentionCase& c, float value, float scale) {
  if (!c.fp8_cache) return round_to_dtype(value, c.dtype);
  return round_to_e4m3(value / scale) * scale;
}

DType cache_dtype_of(const AttentionCase& c) { return c.fp8_cache ? DType::kF8E4M3 : c.dtype; }

// Stores a value the dense inputs hold (already cached_value) into a cache element. For FP8,
// (e * scale) / scale rounds back to e (e has 4 significant bits), so the stored bits are the ones
// cached_value quantized to.
void store_cached(const AttentionCase& c, void* base, int64_t offset, float value, float scale) {
  store_float(base, cache_dtype_of(c), offset, c.fp8_cache ? value / scale : value);
}

}  // namespace

DenseInputs make_dense_inputs(const AttentionCase& c, Rng& rng) {
  DenseInputs in;
  const auto num_seqs = static_cast<int64_t>(c.seqs.size());
  in.cu_seqlens_q = Tensor::cpu({num_seqs + 1}, DType::kI32);
  in.seq_lens_k = Tensor::cpu({num_seqs}, DType::kI32);
  int64_t rows = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SeqShape& seq = c.seqs[static_cast<size_t>(s)];
    in.cu_seqlens_q.ptr<int32_t>()[s] = static_cast<int32_t>(rows);
    in.seq_lens_k.ptr<int32_t>()[s] = static_cast<int32_t>(seq.context_len);
    rows += seq.q_len;
  }
  in.cu_seqlens_q.ptr<int32_t>()[num_seqs] = static_cast<int32_t>(rows);
  in.num_tokens = rows;

  in.q = Tensor::cpu({rows, c.num_heads, c.head_dim}, c.dtype);
  for (int64_t i = 0; i < in.q.numel(); ++i)
    store_float(in.q.view().data, c.dtype, i, rng.uniform(-kQkRange, kQkRange));
  for (const SeqShape& seq : c.seqs) {
    const auto count = static_cast<size_t>(seq.context_len * c.num_kv_heads * c.head_dim);
    std::vector<float> k(count), v(count);
    for (size_t i = 0; i < count; ++i) {
      k[i] = cached_value(c, rng.uniform(-kQkRange, kQkRange), c.kv_scales.k_scale);
      v[i] = cached_value(c, rng.uniform(-1.0f, 1.0f), c.kv_scales.v_scale);
    }
    in.keys.push_back(std::move(k));
    in.values.push_back(std::move(v));
  }
  if (c.sinks) {  // drawn last: cases without sinks keep their numbers
    in.sinks = Tensor::cpu({c.num_heads}, DType::kF32);
    for (int64_t h = 0; h < c.num_heads; ++h) in.sinks.ptr<float>()[h] = rng.uniform(0.0f, 8.0f);
  }
  return in;
}

PagedInputs page_inputs(const AttentionCase& c, const DenseInputs& in, int64_t block_size, Rng& rng) {
  const auto num_seqs = static_cast<int64_t>(c.seqs.size());
  int64_t blocks_needed = 0, max_blocks_per_seq = 1;
  for (const SeqShape& seq : c.seqs) {
    const int64_t blocks = (seq.context_len + block_size - 1) / block_size;
    blocks_needed += blocks;
    max_blocks_per_seq = std::max(max_blocks_per_seq, blocks + 1);  // +1: a -1 padding entry
  }
  const int64_t num_blocks = blocks_needed + blocks_needed / 2 + 3;  // a third of the pool unused

  PagedInputs paged;
  paged.k_cache = Tensor::cpu({num_blocks, block_size, c.num_kv_heads, c.head_dim}, cache_dtype_of(c));
  paged.v_cache = Tensor::cpu({num_blocks, block_size, c.num_kv_heads, c.head_dim}, cache_dtype_of(c));
  for (int64_t i = 0; i < paged.k_cache.numel(); ++i) {
    store_cached(c, paged.k_cache.view().data, i, rng.uniform(-kQkRange, kQkRange), c.kv_scales.k_scale);
    store_cached(c, paged.v_cache.view().data, i, rng.uniform(-1.0f, 1.0f), c.kv_scales.v_scale);
  }

  std::vector<int32_t> block_ids(static_cast<size_t>(num_blocks));
  std::iota(block_ids.begin(), block_ids.end(), 0);
  for (int64_t i = num_blocks - 1; i > 0; --i)
    std::swap(block_ids[static_cast<size_t>(i)], block_ids[static_cast<size_t>(rng.below(i + 1))]);

  paged.block_tables = Tensor::cpu({num_seqs, max_blocks_per_seq}, DType::kI32);
  int32_t* tables = paged.block_tables.ptr<int32_t>();
  std::fill(tables, tables + paged.block_tables.numel(), -1);
  size_t next_block = 0;
  const int64_t row_elems = c.num_kv_heads * c.head_dim;  // one token's k (or v) in the cache
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SeqShape& seq = c.seqs[static_cast<size_t>(s)];
    const int64_t blocks = (seq.context_len + block_size - 1) / block_size;
    for (int64_t b = 0; b < blocks; ++b) tables[s * max_blocks_per_seq + b] = block_ids[next_block++];
    for (int64_t pos = 0; pos < seq.context_len; ++pos) {
      const int64_t slot =
          int64_t{tables[s * max_blocks_per_seq + pos / block_size]} * block_size + pos % block_size;
      for (int64_t e = 0; e < row_elems; ++e) {
        const size_t src = static_cast<size_t>(pos * row_elems + e);
        store_cached(c, paged.k_cache.view().data, slot * row_elems + e, in.keys[static_cast<size_t>(s)][src],
                     c.kv_scales.k_scale);
        store_cached(c, paged.v_cache.view().data, slot * row_elems + e, in.values[static_cast<size_t>(s)][src],
                     c.kv_scales.v_scale);
      }
    }
  }
  return paged;
}

AttentionParams make_params(const AttentionCase& c, const DenseInputs& in, const PagedInputs& paged) {
  AttentionParams params;
  params.cu_seqlens_q = in.cu_seqlens_q;
  params.seq_lens_k = in.seq_lens_k;
  params.block_tables = paged.block_tables;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.causal = c.causal;
  params.sliding_window = c.window;
  params.softcap = c.softcap;
  if (c.fp8_cache) params.kv_scales = c.kv_scales;
  if (c.sinks) params.sinks = in.sinks.view();
  for (const SeqShape& seq : c.seqs) {
    params.max_seqlen_q = std::max(params.max_seqlen_q, static_cast<int32_t>(seq.q_len));
    params.max_seqlen_k = std::max(params.max_seqlen_k, static_cast<int32_t>(seq.context_len));
  }
  return params;
}

std::vector<AttentionImpl> attention_impls() {
  return {
      {"cpu", [](TensorView out, const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                 const AttentionParams& params) { cpu::attention(out, q, k_cache, v_cache, params); }}};
}

Tolerance tolerance_vs_reference(DType out_dtype) {
  switch (out_dtype) {
    case DType::kF32: return {1e-5, 1e-5};
    case DType::kBF16: return {0x1.0p-7, 1e-6};
    case DType::kF16: return {0x1.0p-10, 1e-6};
    default: CHECK_MSG(false, "not a float dtype");
  }
  return {};
}

Tolerance tolerance_between(DType out_dtype) {
  const Tolerance one = tolerance_vs_reference(out_dtype);
  return {2 * one.rel, 2 * one.abs};
}

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<size_t>(i)] = load_float(t.view().data, t.dtype(), i);
  return out;
}

std::string compare(const std::vector<double>& expected, const Tensor& actual, Tolerance tol) {
  CHECK(static_cast<int64_t>(expected.size()) == actual.numel());
  int64_t failures = 0, worst = -1;
  double worst_excess = 0;  // error / allowed
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double want = expected[static_cast<size_t>(i)];
    const double got = load_float(actual.view().data, actual.dtype(), i);
    const double allowed = tol.rel * std::abs(want) + tol.abs;
    const double error = std::abs(got - want);
    if (!(error <= allowed)) {  // NaN fails too
      ++failures;
      const double excess = std::isnan(error) ? std::numeric_limits<double>::infinity() : error / allowed;
      if (worst < 0 || excess > worst_excess) {
        worst = i;
        worst_excess = excess;
      }
    }
  }
  if (failures == 0) return "";
  const Shape& shape = actual.shape();
  const int64_t per_row = shape.numel() / shape[0];
  const int64_t head_dim = shape[shape.ndim - 1];
  return fmt::format(
      "{} of {} elements out of tolerance; worst at row {} head {} dim {}: got {} want {} ({}x allowed)",
      failures, actual.numel(), worst / per_row, (worst % per_row) / head_dim, worst % head_dim,
      load_float(actual.view().data, actual.dtype(), worst), expected[static_cast<size_t>(worst)],
      worst_excess);
}

}  // namespace pagellm::attention_test
