// The CUDA corner of the attention triangle (test_attention.cpp holds reference <-> CPU): CUDA against
// the f64 reference and against the CPU kernel over the DESIGN.md grid, plus 64-bit cache offsets,
// batch invariance (split-KV vs one pass), strided q with an f32 out, and write_kv feeding attention.
#include <sys/mman.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attention_reference.h"
#include "attention_test_data.h"
#include "backend/cpu/attention.h"
#include "cuda_test_util.h"

namespace pagellm::cuda_test {
namespace {

using namespace attention_test;

struct DeviceParams {
  Tensor cu_seqlens_q, seq_lens_k, block_tables, sinks;
  AttentionParams params;
};

DeviceParams params_to_device(Backend& gpu, const AttentionParams& host) {
  DeviceParams d;
  d.cu_seqlens_q = to_device(gpu, host.cu_seqlens_q);
  d.seq_lens_k = to_device(gpu, host.seq_lens_k);
  d.block_tables = to_device(gpu, host.block_tables);
  d.params = host;
  d.params.cu_seqlens_q = d.cu_seqlens_q.view();
  d.params.seq_lens_k = d.seq_lens_k.view();
  d.params.block_tables = d.block_tables.view();
  if (host.sinks.data != nullptr) {
    d.sinks = to_device(gpu, host.sinks);
    d.params.sinks = d.sinks.view();
  }
  return d;
}

// Overwrites a device tensor with NaN (so a launch that skips an element is caught).
void fill_nan_device(Backend& gpu, Tensor& t) {
  Tensor host = Tensor::cpu(t.shape(), t.dtype());
  fill_nan(host);
  gpu.copy(t.view(), host.view());
}

// Runs the CUDA attention on host inputs; returns out (poisoned with NaN before the run) on the host.
Tensor run_cuda(Backend& gpu, const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                const AttentionParams& params, DType out_dtype) {
  Tensor q_dev = to_device(gpu, q), k_dev = to_device(gpu, k_cache), v_dev = to_device(gpu, v_cache);
  const DeviceParams p = params_to_device(gpu, params);
  Tensor out_host = Tensor::cpu(q.shape, out_dtype);
  fill_nan(out_host);
  Tensor out_dev = to_device(gpu, out_host.view());
  gpu.attention(out_dev.view(), q_dev.view(), k_dev.view(), v_dev.view(), p.params);
  return to_host(gpu, out_dev.view());
}

// (head pair index, head_dim, mix index, window, softcap, dtype)
using GridParam = std::tuple<int, int64_t, int, int32_t, float, DType>;

struct HeadPair {
  int64_t num_heads, num_kv_heads;
};
const HeadPair kHeadPairs[] = {{4, 4}, {8, 2}, {5, 1}};
const std::vector<SeqShape> kMixes[] = {
    {{1, 1328}, {5, 18}, {129, 463}},
    {{1, 1}, {1, 128}, {1, 2048}},
};

class CudaAttentionGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(CudaAttentionGrid, MatchesReferenceAndCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto [pair_index, head_dim, mix_index, window, softcap, dtype] = GetParam();
  AttentionCase c;
  c.num_heads = kHeadPairs[pair_index].num_heads;
  c.num_kv_heads = kHeadPairs[pair_index].num_kv_heads;
  c.head_dim = head_dim;
  c.seqs = kMixes[mix_index];
  c.window = window;
  c.softcap = softcap;
  c.dtype = dtype;
  c.seed = 7919u * static_cast<uint64_t>(pair_index * 5 + mix_index) + static_cast<uint64_t>(head_dim) +
           (window > 0 ? 3u : 0u) + (softcap > 0 ? 5u : 0u) + (dtype == DType::kBF16 ? 11u : 0u);
  Rng rng(c.seed);
  const DenseInputs in = make_dense_inputs(c, rng);
  std::vector<double> expected;
  for (int64_t block_size : {16, 32}) {
    SCOPED_TRACE(fmt::format("block_size {}", block_size));
    const PagedInputs paged = page_inputs(c, in, block_size, rng);
    const AttentionParams params = make_params(c, in, paged);
    if (expected.empty()) expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
    const Tensor got = run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, params, dtype);
    EXPECT_EQ(compare(expected, got, tolerance_vs_reference(dtype)), "") << "cuda vs reference";
    Tensor cpu_out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, dtype);
    cpu::attention(cpu_out, in.q, paged.k_cache, paged.v_cache, params);
    EXPECT_EQ(compare(to_doubles(cpu_out), got, tolerance_between(dtype)), "") << "cuda vs cpu";
  }
}

std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  const auto [pair_index, head_dim, mix_index, window, softcap, dtype] = info.param;
  return fmt::format("q{}kv{}_hd{}_{}_{}_{}_{}", kHeadPairs[pair_index].num_heads, kHeadPairs[pair_index].num_kv_heads,
                     head_dim, mix_index == 0 ? "mixed" : "decode", window > 0 ? fmt::format("win{}", window) : "full",
                     softcap > 0 ? "cap50" : "nocap", dtype_name(dtype));
}

INSTANTIATE_TEST_SUITE_P(Triangle, CudaAttentionGrid,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values<int64_t>(64, 128, 256),
                                            ::testing::Values(0, 1), ::testing::Values<int32_t>(-1, 128),
                                            ::testing::Values(0.0f, 50.0f),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         grid_name);

TEST(CudaAttention, SmallHeadDimsNonCausalAndF16) {
  PAGELLM_GPU_OR_SKIP(gpu);
  for (int64_t head_dim : {16, 32, 48, 72}) {
    for (bool causal : {true, false}) {
      AttentionCase c;
      c.num_heads = 6;
      c.num_kv_heads = 3;
      c.head_dim = head_dim;
      c.seqs = {{3, 70}, {1, 1}, {20, 20}, {1, 600}};
      c.causal = causal;
      c.dtype = head_dim == 48 ? DType::kF16 : DType::kF32;
      SCOPED_TRACE(fmt::format("head_dim {} causal {}", head_dim, causal));
      Rng rng(static_cast<uint64_t>(head_dim));
      const DenseInputs in = make_dense_inputs(c, rng);
      const PagedInputs paged = page_inputs(c, in, 16, rng);
      const AttentionParams params = make_params(c, in, paged);
      const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
      EXPECT_EQ(compare(expected, run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, params, c.dtype),
                        tolerance_vs_reference(c.dtype)), "");
    }
  }
}

// A decode row is bitwise the same whatever runs it: alone (the decode kernel with the keys split in
// chunk or partition units), inside a mixed batch (the decode kernel next to the general one), inside
// a big decode batch (the decode kernel in one pass), and as the last row of a 2-token sequence over the
// same keys (the general kernel): every route folds the same chunk states in the same order.
// (The prefill kernel, which would take the 2-token sequence in 16-bit dtypes, is off here: it sums
// in its own order; PrefillRowsDoNotDependOnBatchOrChunking covers it.)
TEST(CudaAttention, SequenceAloneEqualsSequenceInBatch) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const ScopedKernelOptions general_kernel(*gpu, [](KernelOptions& o) { o.prefill_attention = false; });
  struct Case {
    const char* name;
    std::vector<SeqShape> seqs;
    size_t target;
    bool partition_units;  // the alone run splits in partition units
  };
  std::vector<SeqShape> big;  // 150 decode rows x 2 kv heads: one pass
  for (int i = 0; i < 150; ++i) big.push_back({1, 40 + 37 * (i % 13)});
  big[70] = {1, 3000};
  const Case cases[] = {
      {"decode row in a mixed batch", {{5, 60}, {1, 3000}, {1, 5000}, {300, 300}, {1, 2}}, 1, false},
      {"last row of a 2-token sequence (general kernel)", {{5, 60}, {2, 3000}, {1, 5000}, {300, 300}, {1, 2}}, 1, true},
      {"decode row in a big decode batch", big, 70, false},
      {"decode row in a big decode batch, partition units", big, 70, true},
  };
  for (const Case& tc : cases) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(fmt::format("{} {}", tc.name, dtype_name(dtype)));
      AttentionCase batch;
      batch.num_heads = 8;
      batch.num_kv_heads = 2;
      batch.head_dim = 128;
      batch.dtype = dtype;
      batch.seqs = tc.seqs;
      const SeqShape target = tc.seqs[tc.target];
      Rng rng(5);
      const DenseInputs in = make_dense_inputs(batch, rng);
      const PagedInputs paged = page_inputs(batch, in, 16, rng);
      const Tensor batch_out =
          run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, make_params(batch, in, paged), dtype);

      const int64_t row = in.cu_seqlens_q.ptr<int32_t>()[tc.target] + target.q_len - 1;  // its last row
      Tensor cu = Tensor::cpu({2}, DType::kI32), lens = Tensor::cpu({1}, DType::kI32);
      cu.ptr<int32_t>()[1] = 1;
      lens.ptr<int32_t>()[0] = static_cast<int32_t>(target.context_len);
      AttentionParams alone = make_params(batch, in, paged);
      alone.cu_seqlens_q = cu.view();
      alone.seq_lens_k = lens.view();
      alone.block_tables = paged.block_tables.view().slice_rows(static_cast<int64_t>(tc.target),
                                                                static_cast<int64_t>(tc.target) + 1);
      alone.max_seqlen_q = 1;
      alone.max_seqlen_k = static_cast<int32_t>(target.context_len);
      Tensor alone_out;
      {
        const ScopedKernelOptions units(*gpu, [&](KernelOptions& o) { o.decode_partition_units = tc.partition_units; });
        alone_out = run_cuda(*gpu, in.q.view().slice_rows(row, row + 1), paged.k_cache, paged.v_cache, alone, dtype);
      }
      const size_t row_bytes = static_cast<size_t>(batch.num_heads * batch.head_dim) * dtype_size_bytes(dtype);
      EXPECT_EQ(std::memcmp(static_cast<const char*>(batch_out.view().data) + static_cast<size_t>(row) * row_bytes,
                            alone_out.view().data, row_bytes), 0);
      // And right, not only consistent.
      AttentionParams params = make_params(batch, in, paged);
      const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
      EXPECT_EQ(compare(expected, batch_out, tolerance_vs_reference(dtype)), "");
    }
  }
}

// The split decode (the decode kernel's unit states, then decode_merge_kernel) run eagerly three
// times and replayed three times from a CUDA graph gives the same bits each time, and the right values
// (decode rows with 3,000 and 700 keys, one with a single key, a 2-token sequence beside them, GQA 8).
TEST(CudaAttention, SplitDecodeIsTheSameOnEveryLaunchAndReplay) {
  PAGELLM_GPU_OR_SKIP(gpu);
  AttentionCase batch;
  batch.num_heads = 8;
  batch.num_kv_heads = 1;
  batch.head_dim = 64;
  batch.dtype = DType::kBF16;
  batch.seqs = {{1, 3000}, {1, 700}, {1, 1}, {2, 90}};
  Rng rng(9);
  const DenseInputs in = make_dense_inputs(batch, rng);
  const PagedInputs paged = page_inputs(batch, in, 16, rng);
  const AttentionParams host_params = make_params(batch, in, paged);
  const Tensor q = to_device(*gpu, in.q), k = to_device(*gpu, paged.k_cache), v = to_device(*gpu, paged.v_cache);
  const DeviceParams p = params_to_device(*gpu, host_params);
  Tensor out = to_device(*gpu, in.q);
  std::vector<Tensor> outs;
  for (int i = 0; i < 3; ++i) {
    gpu->attention(out.view(), q.view(), k.view(), v.view(), p.params);
    outs.push_back(to_host(*gpu, out.view()));
  }
  const std::unique_ptr<OpGraph> graph =
      gpu->capture([&] { gpu->attention(out.view(), q.view(), k.view(), v.view(), p.params); });
  ASSERT_NE(graph, nullptr);
  for (int i = 0; i < 3; ++i) {
    fill_nan_device(*gpu, out);
    graph->replay();
    outs.push_back(to_host(*gpu, out.view()));
  }
  for (size_t i = 1; i < outs.size(); ++i)
    EXPECT_EQ(std::memcmp(outs[0].view().data, outs[i].view().data, outs[0].nbytes()), 0) << "run " << i;
  const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, host_params);
  EXPECT_EQ(compare(expected, outs[0], tolerance_vs_reference(DType::kBF16)), "");
}

// The prefill kernel (bf16, q_len >= 2): the rows of a prompt chunk are bitwise the rows
// the same positions get when the whole prompt runs in one piece inside a batch (chunked prefill ==
// one piece, alone == batched), and both are right against the reference. Tiles of 64 rows start at
// the chunk's first row, so a chunk starting at position 100 cuts the tiles differently.
TEST(CudaAttention, PrefillRowsDoNotDependOnBatchOrChunking) {
  PAGELLM_GPU_OR_SKIP(gpu);
  struct Variant {
    DType dtype;
    int64_t head_dim;
    bool causal;
    int32_t window;
    float softcap;
    bool fp8_cache = false;
  };
  const Variant variants[] = {
      {DType::kBF16, 128, true, -1, 0.0f}, {DType::kBF16, 128, true, 96, 30.0f}, {DType::kBF16, 64, true, -1, 0.0f},
      {DType::kBF16, 32, false, -1, 0.0f}, {DType::kBF16, 256, true, -1, 0.0f}, {DType::kBF16, 16, true, 40, 0.0f},
      {DType::kF16, 128, true, -1, 0.0f},  // f16: the general kernel (rows per row as well)
      {DType::kBF16, 128, true, -1, 0.0f, true}, {DType::kBF16, 64, true, 96, 30.0f, true},  // FP8 caches
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(fmt::format("{} head_dim {} causal {} window {} softcap {} fp8 cache {}", dtype_name(v.dtype),
                             v.head_dim, v.causal, v.window, v.softcap, v.fp8_cache));
    AttentionCase batch;
    batch.num_heads = 8;
    batch.num_kv_heads = 2;
    batch.head_dim = v.head_dim;
    batch.dtype = v.dtype;
    batch.causal = v.causal;
    batch.window = v.window;
    batch.softcap = v.softcap;
    if (v.fp8_cache) {
      batch.fp8_cache = true;
      batch.kv_scales = {0.03f, 0.007f};
    }
    batch.seqs = {{5, 60}, {300, 300}, {1, 900}, {70, 500}, {2, 2}};
    const size_t target = 1;
    Rng rng(11);
    const DenseInputs in = make_dense_inputs(batch, rng);
    const PagedInputs paged = page_inputs(batch, in, 16, rng);
    const AttentionParams params = make_params(batch, in, paged);
    const Tensor batch_out = run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, params, v.dtype);
    const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
    EXPECT_EQ(compare(expected, batch_out, tolerance_vs_reference(v.dtype)), "");

    // The chunk of positions [100, 200) of the target's prompt, alone, with 200 keys in the cache.
    // (Non-causal rows see every key in the cache, so the chunk sees fewer keys: only causal
    // variants compare bits.)
    const int64_t chunk_first = 100, chunk_len = 100;
    const int64_t row0 = in.cu_seqlens_q.ptr<int32_t>()[target] + chunk_first;
    Tensor cu = Tensor::cpu({2}, DType::kI32), lens = Tensor::cpu({1}, DType::kI32);
    cu.ptr<int32_t>()[0] = 0;
    cu.ptr<int32_t>()[1] = static_cast<int32_t>(chunk_len);
    lens.ptr<int32_t>()[0] = static_cast<int32_t>(chunk_first + chunk_len);
    AttentionParams alone = params;
    alone.cu_seqlens_q = cu.view();
    alone.seq_lens_k = lens.view();
    alone.block_tables = paged.block_tables.view().slice_rows(static_cast<int64_t>(target), static_cast<int64_t>(target) + 1);
    alone.max_seqlen_q = static_cast<int32_t>(chunk_len);
    alone.max_seqlen_k = static_cast<int32_t>(chunk_first + chunk_len);
    const Tensor alone_out =
        run_cuda(*gpu, in.q.view().slice_rows(row0, row0 + chunk_len), paged.k_cache, paged.v_cache, alone, v.dtype);
    if (v.causal) {
      const size_t row_bytes = static_cast<size_t>(batch.num_heads * batch.head_dim) * dtype_size_bytes(v.dtype);
      EXPECT_EQ(std::memcmp(static_cast<const char*>(batch_out.view().data) + static_cast<size_t>(row0) * row_bytes,
                            alone_out.view().data, static_cast<size_t>(chunk_len) * row_bytes), 0);
    }
    const std::vector<double> expected_alone =
        reference::attention(in.q.view().slice_rows(row0, row0 + chunk_len), paged.k_cache, paged.v_cache, alone);
    EXPECT_EQ(compare(expected_alone, alone_out, tolerance_vs_reference(v.dtype)), "");
  }
}

// The decode kernel's GQA groups of every size the engine meets (1, 2, 4, 8, 16 query heads per kv
// head), long windows and softcap, against the f64 reference: few rows (split) and many (one pass).
TEST(CudaAttention, DecodeGroupsAgainstReference) {
  PAGELLM_GPU_OR_SKIP(gpu);
  for (int64_t group : {1, 2, 4, 8, 16}) {
    for (int64_t num_seqs : {3, 140}) {
      AttentionCase c;
      c.num_kv_heads = 2;
      c.num_heads = 2 * group;
      c.head_dim = 128;
      c.dtype = DType::kBF16;
      c.window = group == 4 ? 100 : -1;
      c.softcap = group == 8 ? 30.0f : 0.0f;
      for (int64_t s = 0; s < num_seqs; ++s) c.seqs.push_back({1, 1 + (s * 97) % 700});
      SCOPED_TRACE(fmt::format("group {} seqs {}", group, num_seqs));
      Rng rng(static_cast<uint64_t>(group * 31 + num_seqs));
      const DenseInputs in = make_dense_inputs(c, rng);
      const PagedInputs paged = page_inputs(c, in, 16, rng);
      const AttentionParams params = make_params(c, in, paged);
      const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
      EXPECT_EQ(compare(expected, run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, params, c.dtype),
                        tolerance_vs_reference(c.dtype)), "");
    }
  }
}

// Attention sinks in every kernel: the general kernel (f32 prompts) with and without split-KV, the
// decode kernel with few rows (split, merged by decode_merge_kernel) and many (one pass), and the
// tensor-core prefill kernel (bf16 prompts); with sliding windows and GQA groups; against the f64
// reference and the CPU kernel.
TEST(CudaAttention, SinksInEveryKernel) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const std::vector<SeqShape> mixes[] = {
      {{1, 1328}, {5, 18}, {129, 463}},          // mixed: decode + general / prefill
      {{1, 1}, {1, 128}, {1, 2048}},             // decode, few rows: split
      {{300, 300}, {70, 500}, {2, 2}},           // prefill
  };
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t head_dim : {64, 128}) {
      for (int32_t window : {-1, 128}) {
        for (size_t mix = 0; mix < std::size(mixes); ++mix) {
          AttentionCase c;
          c.num_heads = 8;
          c.num_kv_heads = 2;
          c.head_dim = head_dim;
          c.seqs = mixes[mix];
          c.window = window;
          c.dtype = dtype;
          c.sinks = true;
          SCOPED_TRACE(fmt::format("{} head_dim {} window {} mix {}", dtype_name(dtype), head_dim, window, mix));
          Rng rng(static_cast<uint64_t>(head_dim * 7 + mix * 3 + (window > 0 ? 1 : 0)));
          const DenseInputs in = make_dense_inputs(c, rng);
          const PagedInputs paged = page_inputs(c, in, 16, rng);
          const AttentionParams params = make_params(c, in, paged);
          const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
          const Tensor got = run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, params, dtype);
          EXPECT_EQ(compare(expected, got, tolerance_vs_reference(dtype)), "") << "cuda vs reference";
          Tensor cpu_out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, dtype);
          cpu::attention(cpu_out, in.q, paged.k_cache, paged.v_cache, params);
          EXPECT_EQ(compare(to_doubles(cpu_out), got, tolerance_between(dtype)), "") << "cuda vs cpu";
        }
      }
    }
  }
  // Many decode rows: the decode kernel in one pass.
  AttentionCase c;
  c.num_heads = 16;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.dtype = DType::kBF16;
  c.sinks = true;
  for (int64_t s = 0; s < 140; ++s) c.seqs.push_back({1, 1 + (s * 97) % 700});
  Rng rng(77);
  const DenseInputs in = make_dense_inputs(c, rng);
  const PagedInputs paged = page_inputs(c, in, 16, rng);
  const AttentionParams params = make_params(c, in, paged);
  EXPECT_EQ(compare(reference::attention(in.q, paged.k_cache, paged.v_cache, params),
                    run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, params, c.dtype), tolerance_vs_reference(c.dtype)),
            "");
}

// q as a strided view into a fused qkv buffer, out in f32 for bf16 inputs.
TEST(CudaAttention, StridedQueryAndWiderOutput) {
  PAGELLM_GPU_OR_SKIP(gpu);
  AttentionCase c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.seqs = {{3, 50}, {17, 17}, {1, 900}};
  c.dtype = DType::kBF16;
  Rng rng(3);
  const DenseInputs in = make_dense_inputs(c, rng);
  const PagedInputs paged = page_inputs(c, in, 16, rng);
  const int64_t q_width = c.num_heads * c.head_dim, fused_width = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  Tensor fused = Tensor::cpu({in.num_tokens, fused_width}, DType::kBF16);
  for (int64_t t = 0; t < in.num_tokens; ++t) {
    std::memcpy(fused.ptr<uint16_t>() + t * fused_width, in.q.ptr<uint16_t>() + t * q_width, static_cast<size_t>(q_width) * 2);
    for (int64_t e = q_width; e < fused_width; ++e) fused.ptr<uint16_t>()[t * fused_width + e] = 0x7fc0;  // NaN
  }
  Tensor fused_dev = to_device(*gpu, fused.view());
  TensorView q_view(fused_dev.view().data, {in.num_tokens, c.num_heads, c.head_dim}, DType::kBF16, Device::kCuda);
  q_view.strides = {fused_width, c.head_dim, 1, 0};
  const AttentionParams params = make_params(c, in, paged);
  const DeviceParams p = params_to_device(*gpu, params);
  Tensor k_dev = to_device(*gpu, paged.k_cache.view()), v_dev = to_device(*gpu, paged.v_cache.view());
  Tensor out_dev = gpu->alloc({in.num_tokens, c.num_heads, c.head_dim}, DType::kF32);
  gpu->attention(out_dev.view(), q_view, k_dev.view(), v_dev.view(), p.params);
  const std::vector<double> expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
  EXPECT_EQ(compare(expected, to_host(*gpu, out_dev.view()), tolerance_vs_reference(DType::kF32)), "");
}

// Host memory for a cache whose high block ids are all that is touched (sparse anonymous mapping).
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

// Block ids whose element offsets pass 2^32: the GPU caches are real allocations (8 GiB each, bf16),
// filled through the CUDA write_kv, and the attention compared with the reference on host copies.
TEST(CudaAttention, WriteKvAndAttentionBeyond32BitOffsets) {
  PAGELLM_GPU_OR_SKIP(gpu);
  AttentionCase c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.seqs = {{1, 300}, {40, 77}};
  c.dtype = DType::kBF16;
  const int64_t block_size = 16, block_elems = block_size * c.num_kv_heads * c.head_dim;
  const int64_t first_block = (int64_t{1} << 32) / block_elems;
  const int64_t num_blocks = first_block + 64;
  Rng rng(77);
  const DenseInputs in = make_dense_inputs(c, rng);
  const Shape cache_shape{num_blocks, block_size, c.num_kv_heads, c.head_dim};
  const size_t cache_bytes = static_cast<size_t>(num_blocks * block_elems) * 2;
  SparseMapping k_memory(cache_bytes), v_memory(cache_bytes);
  ASSERT_NE(k_memory.data(), nullptr);
  ASSERT_NE(v_memory.data(), nullptr);
  const TensorView k_host(k_memory.data(), cache_shape, c.dtype), v_host(v_memory.data(), cache_shape, c.dtype);
  Tensor k_dev = gpu->alloc(cache_shape, c.dtype), v_dev = gpu->alloc(cache_shape, c.dtype);

  std::vector<int32_t> ids(64);
  for (int i = 0; i < 64; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(first_block + i);
  for (int i = 63; i > 0; --i) std::swap(ids[static_cast<size_t>(i)], ids[static_cast<size_t>(rng.below(i + 1))]);
  const int64_t max_blocks = 20;
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
    for (int64_t pos = 0; pos < seq.context_len; ++pos)
      slots.ptr<int64_t>()[pos] = int64_t{table[pos / block_size]} * block_size + pos % block_size;
    for (int64_t i = 0; i < k.numel(); ++i) {
      store_float(k.view().data, c.dtype, i, in.keys[static_cast<size_t>(s)][static_cast<size_t>(i)]);
      store_float(v.view().data, c.dtype, i, in.values[static_cast<size_t>(s)][static_cast<size_t>(i)]);
    }
    cpu::write_kv(k_host, v_host, k, v, slots);
    Tensor k_rows = to_device(*gpu, k.view()), v_rows = to_device(*gpu, v.view()), slots_dev = to_device(*gpu, slots.view());
    gpu->write_kv(k_dev.view(), v_dev.view(), k_rows.view(), v_rows.view(), slots_dev.view());
  }
  // The GPU's high blocks hold what the CPU wrote.
  const int64_t high_offset = first_block * block_elems;
  const TensorView k_high = TensorView(static_cast<char*>(k_dev.view().data) + high_offset * 2, {64 * block_elems},
                                       c.dtype, Device::kCuda);
  const Tensor k_back = to_host(*gpu, k_high);
  EXPECT_EQ(std::memcmp(k_back.view().data, static_cast<const char*>(k_memory.data()) + high_offset * 2, k_back.nbytes()), 0);

  const AttentionParams params = make_params(c, in, paged);
  const std::vector<double> expected = reference::attention(in.q, k_host, v_host, params);
  const DeviceParams p = params_to_device(*gpu, params);
  Tensor q_dev = to_device(*gpu, in.q.view());
  Tensor out_dev = gpu->alloc(in.q.shape(), c.dtype);
  gpu->attention(out_dev.view(), q_dev.view(), k_dev.view(), v_dev.view(), p.params);
  EXPECT_EQ(compare(expected, to_host(*gpu, out_dev.view()), tolerance_vs_reference(c.dtype)), "");
}


// ----- the FP8 KV cache ------------------------------------------------------------------------

// (head pair index, head_dim, mix index, window, q/out dtype): FP8 caches with scales far from 1,
// CUDA (general and decode kernels; the prefill kernel reads bf16 caches only) against the f64
// reference on the dequantized K/V and against the CPU kernel.
using Fp8GridParam = std::tuple<int, int64_t, int, int32_t, DType>;
class CudaAttentionFp8Grid : public ::testing::TestWithParam<Fp8GridParam> {};

TEST_P(CudaAttentionFp8Grid, MatchesReferenceAndCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const auto [pair_index, head_dim, mix_index, window, dtype] = GetParam();
  AttentionCase c;
  c.num_heads = kHeadPairs[pair_index].num_heads;
  c.num_kv_heads = kHeadPairs[pair_index].num_kv_heads;
  c.head_dim = head_dim;
  c.seqs = kMixes[mix_index];
  c.window = window;
  c.dtype = dtype;
  c.fp8_cache = true;
  c.kv_scales = {0.0234375f, 0.01171875f};
  c.seed = 6007u * static_cast<uint64_t>(pair_index * 5 + mix_index) + static_cast<uint64_t>(head_dim) +
           (window > 0 ? 3u : 0u) + (dtype == DType::kBF16 ? 11u : 0u);
  Rng rng(c.seed);
  const DenseInputs in = make_dense_inputs(c, rng);
  std::vector<double> expected;
  for (int64_t block_size : {16, 32}) {
    SCOPED_TRACE(fmt::format("block_size {}", block_size));
    const PagedInputs paged = page_inputs(c, in, block_size, rng);
    const AttentionParams params = make_params(c, in, paged);
    if (expected.empty()) expected = reference::attention(in.q, paged.k_cache, paged.v_cache, params);
    const Tensor got = run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, params, dtype);
    EXPECT_EQ(compare(expected, got, tolerance_vs_reference(dtype)), "") << "cuda vs reference";
    Tensor cpu_out = Tensor::cpu({in.num_tokens, c.num_heads, c.head_dim}, dtype);
    cpu::attention(cpu_out, in.q, paged.k_cache, paged.v_cache, params);
    EXPECT_EQ(compare(to_doubles(cpu_out), got, tolerance_between(dtype)), "") << "cuda vs cpu";
  }
}

std::string fp8_grid_name(const ::testing::TestParamInfo<Fp8GridParam>& info) {
  const auto [pair_index, head_dim, mix_index, window, dtype] = info.param;
  return fmt::format("q{}kv{}_hd{}_{}_{}_q{}_kvf8", kHeadPairs[pair_index].num_heads,
                     kHeadPairs[pair_index].num_kv_heads, head_dim, mix_index == 0 ? "mixed" : "decode",
                     window > 0 ? fmt::format("win{}", window) : "full", dtype_name(dtype));
}

INSTANTIATE_TEST_SUITE_P(Fp8Cache, CudaAttentionFp8Grid,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values<int64_t>(64, 128, 256),
                                            ::testing::Values(0, 1), ::testing::Values<int32_t>(-1, 128),
                                            ::testing::Values(DType::kBF16, DType::kF32)),
                         fp8_grid_name);

// With an FP8 cache a decode row is still bitwise the same whatever kernel runs it: alone (the decode
// kernel, split), in a mixed batch (decode kernel), and as the last row of a 2-token sequence (the
// general kernel): both dequantize with the same f32 multiply before the same chunk arithmetic.
// (The general kernel's rows, as SequenceAloneEqualsSequenceInBatch: the tensor-core prefill kernel,
// which also reads FP8 caches, keeps its own invariance, PrefillRowsDoNotDependOnBatchOrChunking.)
TEST(CudaAttention, Fp8CacheDecodeRowAloneEqualsInBatch) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const ScopedKernelOptions general_kernel(*gpu, [](KernelOptions& o) { o.prefill_attention = false; });
  const std::vector<SeqShape> mixes[] = {
      {{5, 60}, {1, 3000}, {1, 5000}, {300, 300}, {1, 2}},
      {{5, 60}, {2, 3000}, {1, 5000}, {300, 300}, {1, 2}},
  };
  for (const auto& seqs : mixes) {
    for (int64_t head_dim : {64, 128}) {
      SCOPED_TRACE(fmt::format("q_len {} head_dim {}", seqs[1].q_len, head_dim));
      AttentionCase batch;
      batch.num_heads = 8;
      batch.num_kv_heads = 2;
      batch.head_dim = head_dim;
      batch.dtype = DType::kBF16;
      batch.seqs = seqs;
      batch.fp8_cache = true;
      batch.kv_scales = {0.03f, 0.007f};
      Rng rng(9);
      const DenseInputs in = make_dense_inputs(batch, rng);
      const PagedInputs paged = page_inputs(batch, in, 16, rng);
      const AttentionParams params = make_params(batch, in, paged);
      const Tensor batch_out = run_cuda(*gpu, in.q, paged.k_cache, paged.v_cache, params, batch.dtype);
      const int64_t row = in.cu_seqlens_q.ptr<int32_t>()[1] + seqs[1].q_len - 1;
      Tensor cu = Tensor::cpu({2}, DType::kI32), lens = Tensor::cpu({1}, DType::kI32);
      cu.ptr<int32_t>()[0] = 0;
      cu.ptr<int32_t>()[1] = 1;
      lens.ptr<int32_t>()[0] = static_cast<int32_t>(seqs[1].context_len);
      AttentionParams alone = params;
      alone.cu_seqlens_q = cu.view();
      alone.seq_lens_k = lens.view();
      alone.block_tables = paged.block_tables.view().slice_rows(1, 2);
      alone.max_seqlen_q = 1;
      alone.max_seqlen_k = static_cast<int32_t>(seqs[1].context_len);
      const Tensor alone_out =
          run_cuda(*gpu, in.q.view().slice_rows(row, row + 1), paged.k_cache, paged.v_cache, alone, batch.dtype);
      const size_t row_bytes = static_cast<size_t>(batch.num_heads * head_dim) * dtype_size_bytes(batch.dtype);
      EXPECT_EQ(std::memcmp(static_cast<const char*>(batch_out.view().data) + static_cast<size_t>(row) * row_bytes,
                            alone_out.view().data, row_bytes), 0);
      EXPECT_EQ(compare(reference::attention(in.q, paged.k_cache, paged.v_cache, params), batch_out,
                        tolerance_vs_reference(batch.dtype)), "");
    }
  }
}

// write_kv into FP8 caches stores e4m3(x / scale) bit for bit as the CPU twin (saturating), and the
// fused prologue stores what the unfused CUDA ops (rms_norm, rope, write_kv) store.
TEST(CudaWriteKv, Fp8CacheBitwiseEqualsCpuAndFusedEqualsUnfused) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const int64_t num_tokens = 37, num_q_heads = 4, kv_heads = 2, hd = 128, block_size = 16, num_blocks = 8;
  const KvScales scales{0.021f, 0.0093f};
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Rng rng(31);
    const int64_t width = (num_q_heads + 2 * kv_heads) * hd;
    Tensor qkv = Tensor::cpu({num_tokens, width}, dtype);
    for (int64_t i = 0; i < qkv.numel(); ++i) store_float(qkv.view().data, dtype, i, rng.uniform(-12.0f, 12.0f));
    Tensor slots = Tensor::cpu({num_tokens}, DType::kI64), positions = Tensor::cpu({num_tokens}, DType::kI32);
    for (int64_t t = 0; t < num_tokens; ++t) {
      slots.ptr<int64_t>()[t] = t % 6 == 4 ? -1 : (t * 29) % (num_blocks * block_size);
      positions.ptr<int32_t>()[t] = static_cast<int32_t>(rng.below(5000));
    }
    Tensor inv_freq = Tensor::cpu({hd / 2}, DType::kF32);
    for (int64_t i = 0; i < hd / 2; ++i)
      inv_freq.ptr<float>()[i] = static_cast<float>(std::pow(1e6, -2.0 * static_cast<double>(i) / hd));
    Tensor norm = Tensor::cpu({hd}, dtype);
    for (int64_t i = 0; i < hd; ++i) store_float(norm.view().data, dtype, i, rng.uniform(0.5f, 1.5f));
    auto heads = [&](const Tensor& buffer, int64_t first_head, int64_t n) {
      TensorView v = buffer.view();
      v.data = static_cast<char*>(v.data) + first_head * hd * static_cast<int64_t>(dtype_size_bytes(dtype));
      v.shape = Shape{num_tokens, n, hd};
      v.strides = {width, hd, 1, 0};
      return v;
    };
    const Shape cache_shape{num_blocks, block_size, kv_heads, hd};
    auto fresh_cache = [&] {
      Tensor cache = Tensor::cpu(cache_shape, DType::kF8E4M3);
      std::memset(cache.view().data, 0x33, static_cast<size_t>(cache.numel()));
      return cache;
    };

    // write_kv: CPU and CUDA on the same rows.
    Tensor k_cpu = fresh_cache(), v_cpu = fresh_cache();
    cpu::write_kv(k_cpu, v_cpu, heads(qkv, num_q_heads, kv_heads), heads(qkv, num_q_heads + kv_heads, kv_heads), slots,
                  scales);
    Tensor qkv_dev = to_device(*gpu, qkv.view()), slots_dev = to_device(*gpu, slots.view());
    Tensor k_dev = to_device(*gpu, fresh_cache().view()), v_dev = to_device(*gpu, fresh_cache().view());
    gpu->write_kv(k_dev.view(), v_dev.view(), heads(qkv_dev, num_q_heads, kv_heads),
                  heads(qkv_dev, num_q_heads + kv_heads, kv_heads), slots_dev.view(), scales);
    EXPECT_EQ(std::memcmp(to_host(*gpu, k_dev.view()).view().data, k_cpu.view().data, k_cpu.nbytes()), 0) << "k";
    EXPECT_EQ(std::memcmp(to_host(*gpu, v_dev.view()).view().data, v_cpu.view().data, v_cpu.nbytes()), 0) << "v";

    // The fused prologue against the unfused CUDA ops, both into FP8 caches.
    const Tensor norm_dev = to_device(*gpu, norm.view()), pos_dev = to_device(*gpu, positions.view()),
                 freq_dev = to_device(*gpu, inv_freq.view());
    auto run = [&](bool fused) {
      Tensor buffer = to_device(*gpu, qkv.view());
      Tensor k_cache = to_device(*gpu, fresh_cache().view()), v_cache = to_device(*gpu, fresh_cache().view());
      TensorView q = heads(buffer, 0, num_q_heads), k = heads(buffer, num_q_heads, kv_heads),
                 v = heads(buffer, num_q_heads + kv_heads, kv_heads);
      if (fused) {
        gpu->qk_norm_rope_write_kv(q, k, v, norm_dev.view(), norm_dev.view(), 1e-6f, NormWeight::kPlain, pos_dev.view(),
                                   freq_dev.view(), 1.0f, k_cache.view(), v_cache.view(), slots_dev.view(), scales);
      } else {
        gpu->Backend::qk_norm_rope_write_kv(q, k, v, norm_dev.view(), norm_dev.view(), 1e-6f, NormWeight::kPlain,
                                            pos_dev.view(), freq_dev.view(), 1.0f, k_cache.view(), v_cache.view(),
                                            slots_dev.view(), scales);
      }
      return std::pair<Tensor, Tensor>{to_host(*gpu, k_cache.view()), to_host(*gpu, v_cache.view())};
    };
    const auto [k_fused, v_fused] = run(true);
    const auto [k_plain, v_plain] = run(false);
    EXPECT_EQ(std::memcmp(k_fused.view().data, k_plain.view().data, k_plain.nbytes()), 0) << "prologue k";
    EXPECT_EQ(std::memcmp(v_fused.view().data, v_plain.view().data, v_plain.nbytes()), 0) << "prologue v";
    EXPECT_EQ(std::memcmp(v_fused.view().data, v_cpu.view().data, v_cpu.nbytes()), 0) << "prologue v vs cpu write_kv";
  }
}

}  // namespace
}  // namespace pagellm::cuda_test
