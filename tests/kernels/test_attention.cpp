// The attention "triangle": the f64 reference against every implementation in attention_impls()
// (the CPU kernel today; a device backend joins the same list), and the implementations against each
// other, over the DESIGN.md grid. Plus properties a user relies on: 64-bit cache offsets, batch
// invariance, chunked prefill == one-piece prefill, strided q, out in another dtype.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <tuple>
#include <vector>

#include "attention_reference.h"
#include "attention_test_data.h"
#include "backend/cpu/attention.h"
#include "core/dtype.h"

namespace pagellm::attention_test {
namespace {

struct HeadPair {
  int64_t num_heads, num_kv_heads;
};
const HeadPair kHeadPairs[] = {{4, 4}, {8, 2}, {5, 1}};

struct SeqMix {
  const char* name;
  std::vector<SeqShape> seqs;  // (q_len, context_len)
};
const SeqMix& seq_mix(int index) {
  static const std::vector<SeqMix> mixes = {
      {"mixed", {{1, 1328}, {5, 18}, {129, 463}}},
      {"decode", {{1, 1}, {1, 128}, {1, 2048}}},
      {"prefill", {{97, 97}, {48, 300}, {160, 160}}},                  // fresh prompts and a continued chunk
      {"prompt_and_decode", {{1, 700}, {200, 200}, {2, 2}, {1, 33}}},  // q_len == context_len among decodes
  };
  return mixes[static_cast<size_t>(index)];
}

// Runs every implementation on the case for each block size, against one reference per case (the
// dense inputs do not depend on paging, so neither does the expected output).
void check_case(const AttentionCase& c, const std::vector<int64_t>& block_sizes) {
  Rng rng(c.seed);
  const DenseInputs in = make_dense_inputs(c, rng);
  std::vector<double> expected;
  for (int64_t block_size : block_sizes) {
    SCOPED_TRACE(fmt::format("block_size {}", block_size));
    const PagedInputs paged = page_inputs(c, in, block_size, rng);
    const AttentionParams params = make_params(c, in, paged);
    if (expected.empty()) expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);

    std::vector<std::pair<std::string, Tensor>> outputs;
    for (const AttentionImpl& impl : attention_impls()) {
      Tensor out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, c.dtype);
      fill_nan(out);
      impl.run(out, in.q, paged.k_cache, paged.v_cache, params);
      const std::string error = compare(expected, out, tolerance_vs_reference(c.dtype));
      EXPECT_TRUE(error.empty()) << impl.name << " vs reference: " << error;
      outputs.emplace_back(impl.name, std::move(out));
    }
    for (size_t a = 0; a < outputs.size(); ++a) {
      for (size_t b = a + 1; b < outputs.size(); ++b) {
        const std::string error =
            compare(to_doubles(outputs[a].second), outputs[b].second, tolerance_between(c.dtype));
        EXPECT_TRUE(error.empty()) << outputs[b].first << " vs " << outputs[a].first << ": " << error;
      }
    }
  }
}

// (head pair index, head_dim, mix index, window, softcap, dtype)
using GridParam = std::tuple<int, int64_t, int, int32_t, float, DType>;

class AttentionGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(AttentionGrid, MatchesReference) {
  const auto [pair_index, head_dim, mix_index, window, softcap, dtype] = GetParam();
  AttentionCase c;
  c.num_heads = kHeadPairs[pair_index].num_heads;
  c.num_kv_heads = kHeadPairs[pair_index].num_kv_heads;
  c.head_dim = head_dim;
  c.seqs = seq_mix(mix_index).seqs;
  c.window = window;
  c.softcap = softcap;
  c.dtype = dtype;
  c.seed = 1000003u * static_cast<uint64_t>(pair_index * 7 + mix_index) + static_cast<uint64_t>(head_dim) +
           (window > 0 ? 17u : 0u) + (softcap > 0 ? 29u : 0u) + (dtype == DType::kBF16 ? 31u : 0u);
  check_case(c, {16, 32});
}

std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  const auto [pair_index, head_dim, mix_index, window, softcap, dtype] = info.param;
  const HeadPair& heads = kHeadPairs[pair_index];
  return fmt::format("q{}kv{}_hd{}_{}_{}_{}_{}", heads.num_heads, heads.num_kv_heads, head_dim,
                     seq_mix(mix_index).name, window > 0 ? fmt::format("win{}", window) : "full",
                     softcap > 0 ? fmt::format("cap{}", static_cast<int>(softcap)) : "nocap",
                     dtype_name(dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Triangle, AttentionGrid,
    ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values<int64_t>(64, 128, 256),
                       ::testing::Values(0, 1, 2, 3), ::testing::Values<int32_t>(-1, 128),
                       ::testing::Values(0.0f, 50.0f), ::testing::Values(DType::kF32, DType::kBF16)),
    grid_name);

// Attention sinks (gpt-oss): one extra logit per head in the softmax denominator, through decode,
// prefill, mixed and split-KV batches, sliding windows and GQA groups.
// (head pair index, head_dim, mix index, window, dtype)
using SinkGridParam = std::tuple<int, int64_t, int, int32_t, DType>;

class AttentionSinkGrid : public ::testing::TestWithParam<SinkGridParam> {};

TEST_P(AttentionSinkGrid, MatchesReference) {
  const auto [pair_index, head_dim, mix_index, window, dtype] = GetParam();
  AttentionCase c;
  c.num_heads = kHeadPairs[pair_index].num_heads;
  c.num_kv_heads = kHeadPairs[pair_index].num_kv_heads;
  c.head_dim = head_dim;
  c.seqs = seq_mix(mix_index).seqs;
  c.window = window;
  c.dtype = dtype;
  c.sinks = true;
  c.seed = 7001u * static_cast<uint64_t>(pair_index * 7 + mix_index) + static_cast<uint64_t>(head_dim) +
           (window > 0 ? 13u : 0u) + (dtype == DType::kBF16 ? 37u : 0u);
  check_case(c, {16, 32});
}

std::string sink_grid_name(const ::testing::TestParamInfo<SinkGridParam>& info) {
  const auto [pair_index, head_dim, mix_index, window, dtype] = info.param;
  const HeadPair& heads = kHeadPairs[pair_index];
  return fmt::format("q{}kv{}_hd{}_{}_{}_{}", heads.num_heads, heads.num_kv_heads, head_dim, seq_mix(mix_index).name,
                     window > 0 ? fmt::format("win{}", window) : "full", dtype_name(dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Triangle, AttentionSinkGrid,
    ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values<int64_t>(64, 128), ::testing::Values(0, 1, 2, 3),
                       ::testing::Values<int32_t>(-1, 128), ::testing::Values(DType::kF32, DType::kBF16)),
    sink_grid_name);

// The sinks of the grid above change the output well beyond the tolerance (so a kernel that ignored
// them would fail there), and a sink far below every score changes nothing measurable.
TEST(AttentionSinks, ChangeTheOutputAndVanishWhenTiny) {
  AttentionCase c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.seqs = {{1, 300}, {7, 40}, {1, 1}};
  c.sinks = true;
  Rng rng(5);
  const DenseInputs in = make_dense_inputs(c, rng);
  const PagedInputs paged = page_inputs(c, in, 16, rng);
  AttentionParams params = make_params(c, in, paged);
  const std::vector<double> with_sinks = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
  AttentionParams none = params;
  none.sinks = {};
  const std::vector<double> without = reference::attention(in.q, paged.k_cache, paged.v_cache, none);
  double largest_change = 0;
  for (size_t i = 0; i < with_sinks.size(); ++i) largest_change = std::max(largest_change, std::abs(with_sinks[i] - without[i]));
  EXPECT_GT(largest_change, 0.05);

  Tensor tiny = Tensor::cpu({c.num_heads}, DType::kF32);
  for (int64_t h = 0; h < c.num_heads; ++h) tiny.ptr<float>()[h] = -200.0f;
  params.sinks = tiny.view();
  Tensor out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, c.dtype);
  cpu::attention(out, in.q, paged.k_cache, paged.v_cache, params);
  EXPECT_EQ(compare(without, out, tolerance_vs_reference(c.dtype)), "");
}

// The FP8 KV cache: caches of e4m3(x / scale) with per-layer scales far from 1 (so a kernel that
// forgets a scale fails), read as float(stored) * scale by the reference and every implementation.
// (head pair index, head_dim, mix index, window, q/out dtype)
using Fp8GridParam = std::tuple<int, int64_t, int, int32_t, DType>;

class AttentionFp8Grid : public ::testing::TestWithParam<Fp8GridParam> {};

TEST_P(AttentionFp8Grid, MatchesReferenceOnQuantizedKv) {
  const auto [pair_index, head_dim, mix_index, window, dtype] = GetParam();
  AttentionCase c;
  c.num_heads = kHeadPairs[pair_index].num_heads;
  c.num_kv_heads = kHeadPairs[pair_index].num_kv_heads;
  c.head_dim = head_dim;
  c.seqs = seq_mix(mix_index).seqs;
  c.window = window;
  c.dtype = dtype;
  c.fp8_cache = true;
  c.kv_scales = {0.0234375f, 0.0078125f * 1.5f};  // |k| <= 3 -> |k / s| <= 128; |v| <= 1 -> <= 85
  c.seed = 7000003u * static_cast<uint64_t>(pair_index * 7 + mix_index) + static_cast<uint64_t>(head_dim) +
           (window > 0 ? 17u : 0u) + (dtype == DType::kBF16 ? 31u : 0u);
  check_case(c, {16, 32});
}

std::string fp8_grid_name(const ::testing::TestParamInfo<Fp8GridParam>& info) {
  const auto [pair_index, head_dim, mix_index, window, dtype] = info.param;
  const HeadPair& heads = kHeadPairs[pair_index];
  return fmt::format("q{}kv{}_hd{}_{}_{}_q{}_kvf8", heads.num_heads, heads.num_kv_heads, head_dim,
                     seq_mix(mix_index).name, window > 0 ? fmt::format("win{}", window) : "full", dtype_name(dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Fp8Cache, AttentionFp8Grid,
    ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values<int64_t>(64, 128, 256),
                       ::testing::Values(0, 1, 2, 3), ::testing::Values<int32_t>(-1, 128),
                       ::testing::Values(DType::kBF16, DType::kF32)),
    fp8_grid_name);

// An FP8 cache read with the wrong scales is wrong: the scales are part of the op, not decoration.
TEST(Attention, Fp8CacheScalesChangeTheResult) {
  AttentionCase c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.seqs = {{3, 40}, {1, 70}};
  c.dtype = DType::kF32;
  c.fp8_cache = true;
  c.kv_scales = {0.05f, 0.02f};
  Rng rng(5);
  const DenseInputs in = make_dense_inputs(c, rng);
  const PagedInputs paged = page_inputs(c, in, 16, rng);
  AttentionParams params = make_params(c, in, paged);
  const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
  Tensor out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, c.dtype);
  cpu::attention(out, in.q, paged.k_cache, paged.v_cache, params);
  EXPECT_EQ(compare(expected, out, tolerance_vs_reference(c.dtype)), "");
  params.kv_scales = {};  // the default 1.0: a different (wrong) cache content
  cpu::attention(out, in.q, paged.k_cache, paged.v_cache, params);
  EXPECT_NE(compare(expected, out, tolerance_vs_reference(c.dtype)), "");
}

TEST(Attention, NonCausalMatchesReference) {
  AttentionCase c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.seqs = {{7, 40}, {1, 300}, {33, 33}};
  c.causal = false;
  check_case(c, {16});
  c.window = 20;  // the window still bounds keys from below
  check_case(c, {16});
}

TEST(Attention, OtherHeadDimsAndF16) {
  // Head dims outside the compiled set take the runtime-head_dim kernel.
  for (int64_t head_dim : {32, 48, 72}) {
    AttentionCase c;
    c.num_heads = 6;
    c.num_kv_heads = 3;
    c.head_dim = head_dim;
    c.seqs = {{3, 70}, {1, 1}, {20, 20}};
    c.dtype = DType::kF16;
    c.seed = static_cast<uint64_t>(head_dim);
    SCOPED_TRACE(fmt::format("head_dim {}", head_dim));
    check_case(c, {16, 5});
  }
}

// A cache view whose block ids make block * block_size * num_kv_heads * head_dim exceed 2^31: the
// caches are sparse anonymous mappings (only touched pages get memory), filled through write_kv.
class SparseMapping {
 public:
  explicit SparseMapping(size_t bytes) : bytes_(bytes) {
    data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  ~SparseMapping() {
    if (data_ != MAP_FAILED) munmap(data_, bytes_);
  }
  void* data() const { return data_ == MAP_FAILED ? nullptr : data_; }

 private:
  size_t bytes_;
  void* data_;
};

TEST(Attention, BlockIdsBeyond32BitElementOffsets) {
  AttentionCase c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.seqs = {{1, 300}, {40, 77}};
  c.dtype = DType::kBF16;
  const int64_t block_size = 16;
  const int64_t block_elems = block_size * c.num_kv_heads * c.head_dim;  // 4096
  const int64_t first_block = (int64_t{1} << 32) / block_elems;          // element offset 2^32
  const int64_t num_blocks = first_block + 64;
  ASSERT_GT(first_block * block_elems, int64_t{1} << 31);

  Rng rng(77);
  const DenseInputs in = make_dense_inputs(c, rng);
  const size_t cache_bytes = static_cast<size_t>(num_blocks * block_elems) * dtype_size_bytes(c.dtype);
  SparseMapping k_memory(cache_bytes), v_memory(cache_bytes);
  ASSERT_NE(k_memory.data(), nullptr);
  ASSERT_NE(v_memory.data(), nullptr);
  const TensorView k_cache(k_memory.data(), {num_blocks, block_size, c.num_kv_heads, c.head_dim}, c.dtype);
  const TensorView v_cache(v_memory.data(), {num_blocks, block_size, c.num_kv_heads, c.head_dim}, c.dtype);

  // Blocks first_block + [0, 64) in shuffled order; each sequence's tokens go in through write_kv.
  std::vector<int32_t> ids(64);
  for (int i = 0; i < 64; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(first_block + i);
  for (int i = 63; i > 0; --i)
    std::swap(ids[static_cast<size_t>(i)], ids[static_cast<size_t>(rng.below(i + 1))]);
  const int64_t max_blocks = 20;  // 300 tokens need 19 blocks of 16
  PagedInputs paged;
  paged.block_tables = Tensor::cpu({2, max_blocks}, DType::kI32);
  size_t next = 0;
  for (int64_t s = 0; s < 2; ++s) {
    const SeqShape& seq = c.seqs[static_cast<size_t>(s)];
    int32_t* table = paged.block_tables.ptr<int32_t>() + s * max_blocks;
    for (int64_t b = 0; b < max_blocks; ++b) table[b] = b * block_size < seq.context_len ? ids[next++] : -1;
    Tensor k = Tensor::cpu({seq.context_len, c.num_kv_heads, c.head_dim}, c.dtype);
    Tensor v = Tensor::cpu({seq.context_len, c.num_kv_heads, c.head_dim}, c.dtype);
    Tensor slots = Tensor::cpu({seq.context_len}, DType::kI64);
    for (int64_t pos = 0; pos < seq.context_len; ++pos) {
      slots.ptr<int64_t>()[pos] = int64_t{table[pos / block_size]} * block_size + pos % block_size;
    }
    for (int64_t i = 0; i < k.numel(); ++i) {
      store_float(k.view().data, c.dtype, i, in.keys[static_cast<size_t>(s)][static_cast<size_t>(i)]);
      store_float(v.view().data, c.dtype, i, in.values[static_cast<size_t>(s)][static_cast<size_t>(i)]);
    }
    cpu::write_kv(k_cache, v_cache, k, v, slots);
    // The last token landed where the 64-bit slot arithmetic says.
    const int64_t last = seq.context_len - 1;
    const int64_t offset = slots.ptr<int64_t>()[last] * c.num_kv_heads * c.head_dim + c.head_dim + 5;
    EXPECT_EQ(load_float(k_cache.data, c.dtype, offset),
              in.keys[static_cast<size_t>(s)]
                     [static_cast<size_t>(last * c.num_kv_heads * c.head_dim + c.head_dim + 5)]);
  }

  AttentionParams params = make_params(c, in, paged);
  const std::vector<double> expected = reference::attention(in.q, k_cache, v_cache, params);
  for (const AttentionImpl& impl : attention_impls()) {
    Tensor out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, c.dtype);
    fill_nan(out);
    impl.run(out, in.q, k_cache, v_cache, params);
    const std::string error = compare(expected, out, tolerance_vs_reference(c.dtype));
    EXPECT_TRUE(error.empty()) << impl.name << ": " << error;
  }
}

// Runs cpu::attention on a case and returns out.
Tensor run_cpu(const AttentionCase& c, const DenseInputs& in, const PagedInputs& paged, DType out_dtype) {
  Tensor out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, out_dtype);
  cpu::attention(out, in.q, paged.k_cache, paged.v_cache, make_params(c, in, paged));
  return out;
}

// The rows of one sequence are bitwise the same whether it runs alone or inside a batch whose
// other members change the work split (DESIGN.md: batch invariance on CPU).
TEST(Attention, SequenceAloneEqualsSequenceInBatch) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (SeqShape target : {SeqShape{1, 3000}, SeqShape{70, 900}}) {
      AttentionCase batch;
      batch.num_heads = 8;
      batch.num_kv_heads = 1;
      batch.head_dim = 128;
      batch.dtype = dtype;
      batch.seqs = {{5, 60}, target, {1, 5000}, {0, 9}, {300, 300}, {1, 2}};
      Rng rng(5);
      const DenseInputs in = make_dense_inputs(batch, rng);
      const PagedInputs paged = page_inputs(batch, in, 16, rng);
      const Tensor batch_out = run_cpu(batch, in, paged, dtype);

      // The same sequence alone: same q rows, same cache, its own block-table row.
      AttentionCase alone = batch;
      alone.seqs = {target};
      DenseInputs in_alone;
      const int64_t row_begin = in.cu_seqlens_q.ptr<int32_t>()[1];
      in_alone.q = Tensor(in.q.view().slice_rows(row_begin, row_begin + target.q_len), nullptr);
      in_alone.num_tokens = target.q_len;
      in_alone.cu_seqlens_q = Tensor::cpu({2}, DType::kI32);
      in_alone.cu_seqlens_q.ptr<int32_t>()[1] = static_cast<int32_t>(target.q_len);
      in_alone.seq_lens_k = Tensor::cpu({1}, DType::kI32);
      in_alone.seq_lens_k.ptr<int32_t>()[0] = static_cast<int32_t>(target.context_len);
      PagedInputs paged_alone;
      paged_alone.k_cache = paged.k_cache;
      paged_alone.v_cache = paged.v_cache;
      paged_alone.block_tables = Tensor(paged.block_tables.view().slice_rows(1, 2), nullptr);
      const Tensor alone_out = run_cpu(alone, in_alone, paged_alone, dtype);

      const size_t row_bytes =
          static_cast<size_t>(batch.num_heads * batch.head_dim) * dtype_size_bytes(dtype);
      const char* batch_rows =
          static_cast<const char*>(batch_out.view().data) + static_cast<size_t>(row_begin) * row_bytes;
      EXPECT_EQ(std::memcmp(batch_rows, alone_out.view().data, static_cast<size_t>(target.q_len) * row_bytes),
                0)
          << dtype_name(dtype) << " q_len " << target.q_len << " context " << target.context_len;
    }
  }
}

// A prompt prefilled in two chunks (the second continuing at position 4, serving.md) gives the
// rows that the one-piece prefill gives for the same positions.
TEST(Attention, ChunkedPrefillEqualsOnePiece) {
  AttentionCase whole;
  whole.num_heads = 4;
  whole.num_kv_heads = 2;
  whole.head_dim = 64;
  whole.seqs = {{9, 9}};
  Rng rng(9);
  const DenseInputs in = make_dense_inputs(whole, rng);
  const PagedInputs paged = page_inputs(whole, in, 4, rng);
  const Tensor whole_out = run_cpu(whole, in, paged, DType::kF32);

  AttentionCase chunk = whole;
  chunk.seqs = {{5, 9}};  // positions 4..8, the first 4 tokens already cached
  DenseInputs in_chunk;
  in_chunk.q = Tensor(in.q.view().slice_rows(4, 9), nullptr);
  in_chunk.num_tokens = 5;
  in_chunk.cu_seqlens_q = Tensor::cpu({2}, DType::kI32);
  in_chunk.cu_seqlens_q.ptr<int32_t>()[1] = 5;
  in_chunk.seq_lens_k = in.seq_lens_k;
  const Tensor chunk_out = run_cpu(chunk, in_chunk, paged, DType::kF32);
  const size_t row_floats = static_cast<size_t>(whole.num_heads * whole.head_dim);
  EXPECT_EQ(std::memcmp(whole_out.ptr<float>() + 4 * row_floats, chunk_out.ptr<float>(), 5 * row_floats * 4),
            0);
}

// q as a strided view into a fused qkv projection [T, (H + 2 * KV) * hd], out in f32 for bf16 q.
TEST(Attention, StridedQueryAndWiderOutput) {
  AttentionCase c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.seqs = {{3, 50}, {17, 17}};
  c.dtype = DType::kBF16;
  Rng rng(3);
  const DenseInputs in = make_dense_inputs(c, rng);
  const PagedInputs paged = page_inputs(c, in, 16, rng);
  const int64_t q_width = c.num_heads * c.head_dim,
                fused_width = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  Tensor fused = Tensor::cpu({in.num_tokens, fused_width}, DType::kBF16);
  for (int64_t t = 0; t < in.num_tokens; ++t) {
    std::memcpy(fused.ptr<uint16_t>() + t * fused_width, in.q.ptr<uint16_t>() + t * q_width,
                static_cast<size_t>(q_width) * 2);
    for (int64_t e = q_width; e < fused_width; ++e)
      fused.ptr<uint16_t>()[t * fused_width + e] = 0x7fc0;  // NaN
  }
  TensorView q_view(fused.view().data, {in.num_tokens, c.num_heads, c.head_dim}, DType::kBF16);
  q_view.strides = {fused_width, c.head_dim, 1, 0};

  const AttentionParams params = make_params(c, in, paged);
  Tensor out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, DType::kF32);
  cpu::attention(out, q_view, paged.k_cache, paged.v_cache, params);
  const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
  const std::string error = compare(expected, out, tolerance_vs_reference(DType::kF32));
  EXPECT_TRUE(error.empty()) << error;
}

// Timings for the report; run with --gtest_also_run_disabled_tests.
TEST(Attention, DISABLED_Speed) {
  struct SpeedCase {
    const char* name;
    AttentionCase c;
  };
  auto make = [](std::vector<SeqShape> seqs, DType dtype) {
    AttentionCase c;
    c.num_heads = 16;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.seqs = std::move(seqs);
    c.dtype = dtype;
    return c;
  };
  const SpeedCase cases[] = {
      {"decode 1 x ctx 2048", make({{1, 2048}}, DType::kBF16)},
      {"decode 32 x ctx 2048", make(std::vector<SeqShape>(32, SeqShape{1, 2048}), DType::kBF16)},
      {"prefill 2048", make({{2048, 2048}}, DType::kBF16)},
      {"prefill 512", make({{512, 512}}, DType::kBF16)},
      {"prefill 512 f32", make({{512, 512}}, DType::kF32)},
  };
  const char* only = std::getenv("ATTENTION_SPEED_CASE");  // run one case, e.g. under perf
  for (const SpeedCase& sc : cases) {
    if (only != nullptr && std::string(only) != sc.name) continue;
    Rng rng(1);
    const DenseInputs in = make_dense_inputs(sc.c, rng);
    const PagedInputs paged = page_inputs(sc.c, in, 16, rng);
    const AttentionParams params = make_params(sc.c, in, paged);
    Tensor out = Tensor::cpu({in.num_tokens, sc.c.num_heads, sc.c.head_dim}, sc.c.dtype);
    cpu::attention(out, in.q, paged.k_cache, paged.v_cache, params);  // warm-up
    int iterations = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    double seconds = 0;
    while (seconds < 1.0) {
      cpu::attention(out, in.q, paged.k_cache, paged.v_cache, params);
      ++iterations;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    double score_count = 0;  // q.k pairs computed (visible keys per row x heads)
    for (const SeqShape& s : sc.c.seqs) {
      for (int64_t i = 0; i < s.q_len; ++i)
        score_count += static_cast<double>(s.context_len - s.q_len + i + 1);
    }
    score_count *= static_cast<double>(sc.c.num_heads);
    // Wall time, and CPU time of all threads (a fairer figure when other processes share the cores).
    const double per_call = seconds / iterations;
    const double cpu_per_call = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC / iterations;
    std::printf(
        "%-22s wall %9.3f ms/call  cpu %9.3f ms/call  %6.2f GFLOP/s per cpu-second (4*hd flops/score)\n",
        sc.name, per_call * 1e3, cpu_per_call * 1e3,
        score_count * 4 * static_cast<double>(sc.c.head_dim) / cpu_per_call * 1e-9);
  }
}

}  // namespace
}  // namespace pagellm::attention_test
