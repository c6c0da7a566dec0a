// write_kv: new k/v rows land in the cache slots slot_mapping names, -1 rows are skipped, nothing
// else changes; the hand-checked slot vectors of serving.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "attention_test_data.h"
#include "backend/cpu/attention.h"
#include "core/dtype.h"

namespace pagellm::attention_test {
namespace {

// slot of the token at position `pos` of a request (DESIGN.md "The attention op").
int64_t slot_of(const std::vector<int32_t>& block_table, int64_t pos, int64_t block_size) {
  return int64_t{block_table[static_cast<size_t>(pos / block_size)]} * block_size + pos % block_size;
}

struct Caches {
  Tensor k, v;  // [num_blocks, block_size, num_kv_heads, head_dim]
};

// Caches whose every element is a sentinel, so untouched slots can be recognised.
Caches sentinel_caches(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                       DType dtype) {
  Caches c{Tensor::cpu({num_blocks, block_size, num_kv_heads, head_dim}, dtype),
           Tensor::cpu({num_blocks, block_size, num_kv_heads, head_dim}, dtype)};
  for (int64_t i = 0; i < c.k.numel(); ++i) {
    store_float(c.k.view().data, dtype, i, -7.0f);
    store_float(c.v.view().data, dtype, i, -9.0f);
  }
  return c;
}

// k and v rows [T, num_kv_heads, head_dim] with distinct values: k = 1000 t + 10 h + d / 8, v = -k.
std::pair<Tensor, Tensor> numbered_rows(int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                                        DType dtype) {
  Tensor k = Tensor::cpu({num_tokens, num_kv_heads, head_dim}, dtype);
  Tensor v = Tensor::cpu({num_tokens, num_kv_heads, head_dim}, dtype);
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t h = 0; h < num_kv_heads; ++h)
      for (int64_t d = 0; d < head_dim; ++d) {
        const int64_t i = (t * num_kv_heads + h) * head_dim + d;
        const float value =
            static_cast<float>(t + 1) + static_cast<float>(h) / 4 + static_cast<float>(d) / 64;
        store_float(k.view().data, dtype, i, value);
        store_float(v.view().data, dtype, i, -value);
      }
  return {std::move(k), std::move(v)};
}

Tensor slot_tensor(const std::vector<int64_t>& slots) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(slots.size())}, DType::kI64);
  std::memcpy(t.ptr<int64_t>(), slots.data(), slots.size() * sizeof(int64_t));
  return t;
}

// Every slot holds the row of the token mapped to it, or the sentinel when none is.
void expect_cache_holds(const Caches& caches, const Tensor& k, const Tensor& v,
                        const std::vector<int64_t>& slots) {
  const int64_t num_slots = caches.k.size(0) * caches.k.size(1);
  const int64_t row = caches.k.size(2) * caches.k.size(3);
  std::vector<int64_t> token_in_slot(static_cast<size_t>(num_slots), -1);
  for (size_t t = 0; t < slots.size(); ++t)
    if (slots[t] >= 0) token_in_slot[static_cast<size_t>(slots[t])] = static_cast<int64_t>(t);
  for (int64_t slot = 0; slot < num_slots; ++slot) {
    const int64_t t = token_in_slot[static_cast<size_t>(slot)];
    for (int64_t e = 0; e < row; ++e) {
      const float got_k = load_float(caches.k.view().data, caches.k.dtype(), slot * row + e);
      const float got_v = load_float(caches.v.view().data, caches.v.dtype(), slot * row + e);
      const float want_k =
          t < 0 ? -7.0f : round_to_dtype(load_float(k.view().data, k.dtype(), t * row + e), caches.k.dtype());
      const float want_v =
          t < 0 ? -9.0f : round_to_dtype(load_float(v.view().data, v.dtype(), t * row + e), caches.v.dtype());
      ASSERT_EQ(got_k, want_k) << "slot " << slot << " element " << e;
      ASSERT_EQ(got_v, want_v) << "slot " << slot << " element " << e;
    }
  }
}

TEST(WriteKv, ScattersRowsBySlotAndSkipsMinusOne) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Caches caches = sentinel_caches(6, 4, 2, 8, dtype);
    auto [k, v] = numbered_rows(6, 2, 8, dtype);
    const std::vector<int64_t> slots = {5, -1, 0, 23, 13, -1};
    cpu::write_kv(caches.k, caches.v, k, v, slot_tensor(slots));
    expect_cache_holds(caches, k, v, slots);
  }
}

TEST(WriteKv, ServingSlotVectors) {
  const int64_t block_size = 4;
  // Prefill of 5 tokens into blocks [10, 11] -> slots 40..44.
  const std::vector<int32_t> prefill_table = {10, 11};
  std::vector<int64_t> prefill_slots;
  for (int64_t pos = 0; pos < 5; ++pos) prefill_slots.push_back(slot_of(prefill_table, pos, block_size));
  EXPECT_EQ(prefill_slots, (std::vector<int64_t>{40, 41, 42, 43, 44}));
  // A decode at position 7 with blocks [5, 6] -> slot 27.
  EXPECT_EQ(slot_of({5, 6}, 7, block_size), 27);
  // A chunked prefill continuing at position 4 with blocks [10, 11] -> slots 44, 45, ...
  EXPECT_EQ(slot_of(prefill_table, 4, block_size), 44);
  EXPECT_EQ(slot_of(prefill_table, 6, block_size), 46);

  Caches caches = sentinel_caches(12, block_size, 2, 16, DType::kBF16);
  auto [k, v] = numbered_rows(5, 2, 16, DType::kBF16);
  cpu::write_kv(caches.k, caches.v, k, v, slot_tensor(prefill_slots));
  expect_cache_holds(caches, k, v, prefill_slots);
  // Token 4 starts block 11.
  EXPECT_EQ(load_float(caches.k.view().data, DType::kBF16, (11 * block_size + 0) * 2 * 16),
            load_float(k.view().data, DType::kBF16, 4 * 2 * 16));
}

// Rows in f32 written into a bf16 cache are rounded once; rows may be strided views into a fused
// qkv projection.
TEST(WriteKv, ConvertsDtypeAndReadsStridedRows) {
  const int64_t num_tokens = 5, num_kv_heads = 2, head_dim = 16, fused_width = 3 * num_kv_heads * head_dim;
  Tensor fused = Tensor::cpu({num_tokens, fused_width}, DType::kF32);
  Rng rng(4);
  for (int64_t i = 0; i < fused.numel(); ++i) fused.ptr<float>()[i] = rng.uniform(-2, 2);
  auto view_at = [&](int64_t column) {
    TensorView view(fused.ptr<float>() + column, {num_tokens, num_kv_heads, head_dim}, DType::kF32);
    view.strides = {fused_width, head_dim, 1, 0};
    return view;
  };
  const TensorView k = view_at(num_kv_heads * head_dim), v = view_at(2 * num_kv_heads * head_dim);
  Caches caches = sentinel_caches(3, 4, num_kv_heads, head_dim, DType::kBF16);
  const std::vector<int64_t> slots = {3, 4, -1, 11, 0};
  cpu::write_kv(caches.k, caches.v, k, v, slot_tensor(slots));
  // Dense copies of the strided rows for the check.
  Tensor k_dense = Tensor::cpu({num_tokens, num_kv_heads, head_dim}, DType::kF32);
  Tensor v_dense = Tensor::cpu({num_tokens, num_kv_heads, head_dim}, DType::kF32);
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t e = 0; e < num_kv_heads * head_dim; ++e) {
      k_dense.ptr<float>()[t * num_kv_heads * head_dim + e] = k.ptr<float>()[t * fused_width + e];
      v_dense.ptr<float>()[t * num_kv_heads * head_dim + e] = v.ptr<float>()[t * fused_width + e];
    }
  expect_cache_holds(caches, k_dense, v_dense, slots);
}

// An FP8 cache stores e4m3(x / scale), bit for bit (round to nearest even, saturating at +-448),
// with k and v each divided by their own scale; -1 slots and unmapped slots stay untouched.
TEST(WriteKv, Fp8CacheStoresScaledE4m3Bits) {
  for (DType row_dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(row_dtype));
    const int64_t num_tokens = 7, num_kv_heads = 2, head_dim = 32, block_size = 4, num_blocks = 5;
    const KvScales scales{0.037f, 0.011f};
    Tensor k = Tensor::cpu({num_tokens, num_kv_heads, head_dim}, row_dtype);
    Tensor v = Tensor::cpu({num_tokens, num_kv_heads, head_dim}, row_dtype);
    Rng rng(11);
    for (int64_t i = 0; i < k.numel(); ++i) {
      // Some values past 448 * scale, to see the saturation; a few exact zeros and negatives.
      store_float(k.view().data, row_dtype, i, i % 13 == 0 ? 0.0f : rng.uniform(-20.0f, 20.0f));
      store_float(v.view().data, row_dtype, i, rng.uniform(-6.0f, 6.0f));
    }
    Tensor k_cache = Tensor::cpu({num_blocks, block_size, num_kv_heads, head_dim}, DType::kF8E4M3);
    Tensor v_cache = Tensor::cpu({num_blocks, block_size, num_kv_heads, head_dim}, DType::kF8E4M3);
    std::memset(k_cache.view().data, 0x5a, static_cast<size_t>(k_cache.numel()));
    std::memset(v_cache.view().data, 0xa5, static_cast<size_t>(v_cache.numel()));
    const std::vector<int64_t> slots = {19, -1, 0, 7, 12, -1, 3};
    cpu::write_kv(k_cache, v_cache, k, v, slot_tensor(slots), scales);

    const int64_t row = num_kv_heads * head_dim;
    std::vector<int64_t> token_in_slot(static_cast<size_t>(num_blocks * block_size), -1);
    for (size_t t = 0; t < slots.size(); ++t)
      if (slots[t] >= 0) token_in_slot[static_cast<size_t>(slots[t])] = static_cast<int64_t>(t);
    int saturated = 0;
    for (int64_t slot = 0; slot < num_blocks * block_size; ++slot) {
      const int64_t t = token_in_slot[static_cast<size_t>(slot)];
      for (int64_t e = 0; e < row; ++e) {
        const uint8_t got_k = k_cache.ptr<uint8_t>()[slot * row + e];
        const uint8_t got_v = v_cache.ptr<uint8_t>()[slot * row + e];
        if (t < 0) {
          ASSERT_EQ(got_k, 0x5a) << "slot " << slot;
          ASSERT_EQ(got_v, 0xa5) << "slot " << slot;
          continue;
        }
        const float x_k = load_float(k.view().data, row_dtype, t * row + e);
        const float x_v = load_float(v.view().data, row_dtype, t * row + e);
        ASSERT_EQ(got_k, f32_to_e4m3_bits(x_k / scales.k_scale)) << "slot " << slot << " element " << e;
        ASSERT_EQ(got_v, f32_to_e4m3_bits(x_v / scales.v_scale)) << "slot " << slot << " element " << e;
        if (std::abs(x_k / scales.k_scale) > kE4M3Max) {
          ++saturated;
          ASSERT_EQ(e4m3_bits_to_f32(got_k), std::copysign(kE4M3Max, x_k));
        }
      }
    }
    EXPECT_GT(saturated, 0) << "the inputs should reach the saturation";
  }
}

// A float cache ignores the scales: bf16 rows land bit for bit as without them.
TEST(WriteKv, FloatCacheIgnoresScales) {
  Caches caches = sentinel_caches(6, 4, 2, 8, DType::kBF16);
  auto [k, v] = numbered_rows(6, 2, 8, DType::kBF16);
  const std::vector<int64_t> slots = {5, -1, 0, 23, 13, -1};
  cpu::write_kv(caches.k, caches.v, k, v, slot_tensor(slots), KvScales{0.5f, 4.0f});
  expect_cache_holds(caches, k, v, slots);
}

TEST(WriteKv, LargeBatchScatter) {
  // Big enough to take the threaded path; a random permutation of slots, every 7th token skipped.
  const int64_t num_tokens = 600, num_kv_heads = 4, head_dim = 64, block_size = 16, num_blocks = 50;
  Caches caches = sentinel_caches(num_blocks, block_size, num_kv_heads, head_dim, DType::kF32);
  auto [k, v] = numbered_rows(num_tokens, num_kv_heads, head_dim, DType::kF32);
  std::vector<int64_t> all_slots(static_cast<size_t>(num_blocks * block_size));
  for (size_t i = 0; i < all_slots.size(); ++i) all_slots[i] = static_cast<int64_t>(i);
  Rng rng(8);
  for (size_t i = all_slots.size() - 1; i > 0; --i)
    std::swap(all_slots[i], all_slots[static_cast<size_t>(rng.below(static_cast<int64_t>(i) + 1))]);
  std::vector<int64_t> slots(all_slots.begin(), all_slots.begin() + num_tokens);
  for (size_t t = 0; t < slots.size(); t += 7) slots[t] = -1;
  cpu::write_kv(caches.k, caches.v, k, v, slot_tensor(slots));
  expect_cache_holds(caches, k, v, slots);
}

}  // namespace
}  // namespace pagellm::attention_test
