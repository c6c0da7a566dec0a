// The CUDA MoE ops (backend/cuda/moe.cu) against their CPU twins (backend/cpu/moe.cpp) on the same
// inputs: routing (ids exact, ties to the lower expert; weights to an ulp of their dtype, the only
// difference being expf's last bit; also at released models' expert counts, in one launch with the
// grouping and apart), the grouped layout (exact), the grouped expert GEMMs (the tensor-core path for
// bf16 / f16, MXFP4 dequantized in registers; the FMA path for f32) and the combine, for T = 1, 7, 64,
// 300 (experts without a token included); bitwise batch invariance of a token's output across the
// decode kernel and the tiled one (and the tiled one forced at decode batches); every MXFP4 code under
// a range of scales converted exactly by both. PrintsDecodeExpertGemmTime times the grouped expert
// GEMM alone on released models' shapes (a benchmark; it asserts only that the products ran).
// Skips without a GPU.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "moe_test_data.h"

namespace pagellm::moe_test {
namespace {

using cuda_test::compare_tensors;
using cuda_test::ulps;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.ptr<void>(), b.ptr<void>(), a.nbytes()) == 0;
}

// Row t of a [T, H] host tensor as its own [1, H] tensor.
Tensor host_row(const Tensor& t, int64_t row) {
  Tensor out = Tensor::cpu({1, t.size(1)}, t.dtype());
  const size_t bytes = static_cast<size_t>(t.size(1)) * dtype_size_bytes(t.dtype());
  std::memcpy(out.ptr<void>(), t.ptr<char>() + static_cast<size_t>(row) * bytes, bytes);
  return out;
}

TEST(CudaMoe, MatchesTheCpuTwins) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  for (const bool gpt_oss : {false, true})
    for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32})
      for (const int64_t tokens : {1, 7, 64, 300}) {
        const MoeCase c = make_case(tokens, dtype, gpt_oss, 100 + static_cast<uint64_t>(tokens));
        SCOPED_TRACE(fmt::format("gpt_oss {} mxfp4 {} dtype {} T {}", gpt_oss, c.mxfp4, dtype_name(dtype), tokens));
        const MoeRun want = run_grouped(cpu, c), got = run_grouped(*gpu, c);
        ASSERT_TRUE(same_bits(want.topk_ids, got.topk_ids)) << "routing picked other experts";
        EXPECT_EQ(compare_tensors(want.topk_weights, got.topk_weights, ulps(dtype, 1).rel, 0.0), "");
        ASSERT_TRUE(same_bits(want.tile_pairs, got.tile_pairs)) << "grouped layout";
        ASSERT_TRUE(same_bits(want.tile_experts, got.tile_experts)) << "grouped layout";
        // One rounding of a differently ordered f32 sum, then the activation (and the down GEMM on
        // top of it): a few ulps of the dtype.
        EXPECT_EQ(compare_tensors(want.act, got.act, ulps(dtype, 4).rel, ulps(dtype, 4).rel * 0.1), "") << "gate_up + act";
        EXPECT_EQ(compare_tensors(want.y, got.y, ulps(dtype, 8).rel, ulps(dtype, 8).rel * 0.1), "") << "down";
        EXPECT_EQ(compare_tensors(want.out, got.out, ulps(dtype, 8).rel, ulps(dtype, 8).rel * 0.1), "") << "combined";
      }
}

// Routing and grouping at the sizes of released models (Qwen3-MoE: 128 experts, top 8; gpt-oss: 32,
// top 4; 512, top 10: several experts a lane), with tied logits, through moe_route_group (one launch
// up to 16 tokens, the two ops above) and through moe_route then moe_group, against the CPU twins:
// ids and the grouped layout exact, weights to an ulp of the dtype (expf's last bit).
TEST(CudaMoe, RoutingAtModelSizesMatchesTheCpuTwins) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  struct RouteShape {
    int64_t experts, top_k;
    MoeRouting routing;
    bool renormalize;
  };
  const RouteShape shapes[] = {{128, 8, MoeRouting::kSoftmaxTopK, true},
                               {32, 4, MoeRouting::kTopKSoftmax, false},
                               {512, 10, MoeRouting::kSoftmaxTopK, false}};
  for (const RouteShape& s : shapes)
    for (const DType dtype : {DType::kBF16, DType::kF32})
      for (const int64_t tokens : {1, 5, 16, 17, 200}) {
        SCOPED_TRACE(fmt::format("E {} k {} dtype {} T {}", s.experts, s.top_k, dtype_name(dtype), tokens));
        Rng rng(static_cast<uint64_t>(s.experts * 1000 + tokens));
        Tensor logits = random_tensor({tokens, s.experts}, dtype, rng, -4.0f, 4.0f);
        for (int64_t t = 0; t < tokens; ++t)  // a tie in every row, and row 0 all equal
          for (int64_t e = 0; e < s.experts; ++e)
            if (t == 0 || e == (t * 7) % s.experts)
              attention_test::store_float(logits.view().data, dtype, t * s.experts + e,
                                          attention_test::load_float(logits.view().data, dtype, t * s.experts));
        const int64_t tiles = moe_max_tiles(tokens * s.top_k, s.experts);
        auto route = [&](Backend& be, bool fused) {
          Tensor ids = be.alloc({tokens, s.top_k}, DType::kI32), weights = be.alloc({tokens, s.top_k}, DType::kF32);
          Tensor tile_pairs = be.alloc({tiles, kMoeTileRows}, DType::kI32), tile_experts = be.alloc({tiles}, DType::kI32);
          const Tensor logits_on = on(be, logits);
          if (fused) {
            be.moe_route_group(ids.view(), weights.view(), tile_pairs.view(), tile_experts.view(), logits_on.view(),
                               s.routing, s.renormalize);
          } else {
            be.moe_route(ids.view(), weights.view(), logits_on.view(), s.routing, s.renormalize);
            be.moe_group(tile_pairs.view(), tile_experts.view(), ids.view(), s.experts);
          }
          return std::vector<Tensor>{host_copy(be, ids), host_copy(be, weights), host_copy(be, tile_pairs),
                                     host_copy(be, tile_experts)};
        };
        const std::vector<Tensor> want = route(cpu, false);
        for (const bool fused : {true, false}) {
          const std::vector<Tensor> got = route(*gpu, fused);
          ASSERT_TRUE(same_bits(want[0], got[0])) << "fused " << fused << ": routing picked other experts";
          EXPECT_EQ(compare_tensors(want[1], got[1], ulps(dtype, 1).rel, 0.0), "") << "fused " << fused;
          EXPECT_TRUE(same_bits(want[2], got[2])) << "fused " << fused << ": tile_pairs";
          EXPECT_TRUE(same_bits(want[3], got[3])) << "fused " << fused << ": tile_experts";
        }
      }
}

// The combine alone, from the same y and weights on both devices: the same bits.
TEST(CudaMoe, CombineIsBitwiseTheCpuTwin) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  for (const DType dtype : {DType::kBF16, DType::kF32})
    for (const bool accumulate : {true, false}) {
    const MoeCase c = make_case(64, dtype, false, 7);
    const MoeRun routed = run_grouped(cpu, c);
    Tensor want = reshaped(c.residual, c.residual.shape());
    cpu.moe_combine(want.view(), routed.y.view(), routed.topk_ids.view(), routed.topk_weights.view(), accumulate);
    const Tensor out = cuda_test::to_device(*gpu, c.residual.view()), y = cuda_test::to_device(*gpu, routed.y.view());
    const Tensor ids = cuda_test::to_device(*gpu, routed.topk_ids.view());
    const Tensor weights = cuda_test::to_device(*gpu, routed.topk_weights.view());
    gpu->moe_combine(out.view(), y.view(), ids.view(), weights.view(), accumulate);
    EXPECT_TRUE(same_bits(want, cuda_test::to_host(*gpu, out.view()))) << dtype_name(dtype) << " " << accumulate;
  }
}

// The combine fused with the next block's residual add and norm: out, hidden and normed bitwise those
// of moe_combine then add_rms_norm on the GPU, at hidden sizes of every norm form (64: the warp form and
// 9,000: the shared-memory form, both two launches; 1,000 to 5,000: the fused kernel's register forms)
// and k = 2, 4, 8, 10; out and hidden bitwise the CPU twin's, normed within its norm tolerance.
TEST(CudaMoe, CombineAddRmsNormIsTheCombineThenTheNorm) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(23);
  const int64_t experts = 32;
  for (const DType dtype : {DType::kBF16, DType::kF32})
    for (const int64_t hidden : {64, 1000, 2048, 2880, 5000, 9000})
      for (const int64_t tokens : {1, 37})
        for (const bool accumulate : {true, false})
          for (const int64_t top_k : {2, 4, 8, 10}) {
            SCOPED_TRACE(
                fmt::format("{} H {} T {} accumulate {} k {}", dtype_name(dtype), hidden, tokens, accumulate, top_k));
            Tensor ids = Tensor::cpu({tokens, top_k}, DType::kI32);
            for (int64_t t = 0; t < tokens; ++t)  // k distinct experts, in no particular order
              for (int64_t j = 0; j < top_k; ++j) {
                int32_t e = static_cast<int32_t>(rng.below(experts));
                for (int64_t i = 0; i < j; ++i)
                  if (ids.ptr<int32_t>()[t * top_k + i] == e) e = static_cast<int32_t>((e + 1) % experts), i = -1;
                ids.ptr<int32_t>()[t * top_k + j] = e;
              }
            const Tensor weights = random_tensor({tokens, top_k}, DType::kF32, rng, 0.0f, 1.0f);
            const Tensor y = random_tensor({tokens * top_k, hidden}, dtype, rng, -2, 2);
            const Tensor out0 = random_tensor({tokens, hidden}, dtype, rng, -2, 2);
            const Tensor hidden0 = random_tensor({tokens, hidden}, dtype, rng, -3, 3);
            const Tensor w = random_tensor({hidden}, dtype, rng, -1.5f, 1.5f);

            Tensor want_out = reshaped(out0, out0.shape()), want_hidden = reshaped(hidden0, hidden0.shape());
            Tensor want_normed = Tensor::cpu({tokens, hidden}, dtype);
            cpu.moe_combine_add_rms_norm(want_out.view(), want_hidden.view(), want_normed.view(), y.view(), ids.view(),
                                         weights.view(), accumulate, cuda_test::converted(w, DType::kF32).view(), 1e-6f,
                                         NormWeight::kPlain);

            const Tensor y_dev = cuda_test::to_device(*gpu, y.view()), ids_dev = cuda_test::to_device(*gpu, ids.view());
            const Tensor weights_dev = cuda_test::to_device(*gpu, weights.view());
            const Tensor w_dev = cuda_test::to_device(*gpu, w.view());
            auto run = [&](bool fused) {
              Tensor poison = Tensor::cpu({tokens, hidden}, dtype);
              attention_test::fill_nan(poison);
              std::vector<Tensor> t = {cuda_test::to_device(*gpu, out0.view()),  // out, hidden, normed
                                       cuda_test::to_device(*gpu, hidden0.view()),
                                       cuda_test::to_device(*gpu, poison.view())};
              if (fused) {
                gpu->moe_combine_add_rms_norm(t[0].view(), t[1].view(), t[2].view(), y_dev.view(), ids_dev.view(),
                                              weights_dev.view(), accumulate, w_dev.view(), 1e-6f, NormWeight::kPlain);
              } else {
                gpu->moe_combine(t[0].view(), y_dev.view(), ids_dev.view(), weights_dev.view(), accumulate);
                gpu->add_rms_norm(t[1].view(), t[2].view(), t[0].view(), w_dev.view(), 1e-6f, NormWeight::kPlain);
              }
              for (Tensor& x : t) x = cuda_test::to_host(*gpu, x.view());
              return t;
            };
            const std::vector<Tensor> fused = run(true), apart = run(false);
            for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(apart[i], fused[i])) << "output " << i;
            EXPECT_TRUE(same_bits(want_out, fused[0])) << "out vs cpu";
            EXPECT_TRUE(same_bits(want_hidden, fused[1])) << "hidden vs cpu";
            EXPECT_EQ(compare_tensors(want_normed, fused[2], ulps(dtype, 2).rel, 1e-5), "") << "normed vs cpu";
          }
}

// A token's output does not depend on the batch around it: token 5 of `big` alone, and in batches of
// 7, 64 and 300 (mostly the decode kernel: up to 2,048 rows of tile capacity), against its row of the
// big batch (the tiled kernel above); the big batch against the CPU twin too (the tiled kernel's sums,
// a few ulps).
// The combine rounds after each slot, so an ulp of a partial sum (up to ~8 at hidden 1,088: 2^-5)
// can remain where the slots cancel to ~0: the absolute bound is two such ulps.
void expect_batch_invariant(const MoeCase& big, Backend& gpu, const std::string& what) {
  const MoeRun all = run_grouped(gpu, big);
  const int64_t token = 5;
  for (const int64_t tokens : {1, 7, 64, 300}) {
    if (tokens >= big.tokens) continue;
    MoeCase part = big;
    part.tokens = tokens;
    // Token `token` of the big batch is row 0 (T = 1) or keeps its row.
    const int64_t row = tokens == 1 ? 0 : token;
    const int64_t first = token - row;
    part.logits = Tensor::cpu({tokens, big.experts}, big.dtype);
    part.x = Tensor::cpu({tokens, big.hidden}, big.dtype);
    part.residual = Tensor::cpu({tokens, big.hidden}, big.dtype);
    for (auto [dst, src] : {std::pair{&part.logits, &big.logits}, {&part.x, &big.x}, {&part.residual, &big.residual}}) {
      const size_t row_bytes = static_cast<size_t>(src->size(1)) * dtype_size_bytes(src->dtype());
      std::memcpy(dst->ptr<void>(), src->ptr<char>() + static_cast<size_t>(first) * row_bytes,
                  static_cast<size_t>(tokens) * row_bytes);
    }
    const MoeRun some = run_grouped(gpu, part);
    EXPECT_TRUE(same_bits(host_row(all.out, token), host_row(some.out, row))) << what << " T " << tokens;
  }
  CpuBackend cpu;
  const MoeRun want = run_grouped(cpu, big);
  const double rel = ulps(big.dtype, 8).rel, abs_bound = big.hidden > 64 ? 0.0625 : rel * 0.1;
  EXPECT_EQ(compare_tensors(want.out, all.out, rel, abs_bound), "") << what << " tiled vs cpu";
}

// K over several super-steps and a partial one (hidden 1,088 = 8.5 x 128, width 160: the down
// projection's K is 1.25 super-steps) and the usual small shape; 700 tokens top 4 of 16 experts (2,800
// pairs, ~22 tiles an expert: a full chunk of 16 tiles and a partial one) or of 8 (gpt-oss, MXFP4).
TEST(CudaMoe, TokenOutputIsBatchInvariant) {
  PAGELLM_GPU_OR_SKIP(gpu);
  for (const auto [hidden, width] : {std::pair<int64_t, int64_t>{64, 32}, {1088, 160}})
    for (const bool gpt_oss : {false, true}) {
      MoeCase big = make_case(700, DType::kBF16, gpt_oss, 3, hidden, width);
      big.top_k = 4;  // 2,800 pairs: the tiled kernel for the big batch
      expect_batch_invariant(big, *gpu, fmt::format("hidden {} gpt_oss {}", hidden, gpt_oss));
    }
}

// The tiled kernel at released models' expert counts: 128 experts top 8 (Qwen3-MoE; 300 tokens, ~19
// pairs an expert: chunks of 2-4 tiles, many experts a block's schedule walks), 32 top 4 in MXFP4
// (gpt-oss; 600 tokens, 75 pairs an expert) and 512 top 10 (Qwen3-Next; 256 tokens); weight rows
// over several row blocks of 256 (gate_up 2 x 288 rows fused, down 576 rows), K over 4.5 super-steps;
// f16 too (the same kernel on the f16 mma).
TEST(CudaMoe, TiledKernelAtModelExpertCountsIsBatchInvariant) {
  PAGELLM_GPU_OR_SKIP(gpu);
  struct Shape {
    bool gpt_oss;
    int64_t tokens, experts, top_k;
    DType dtype;
  };
  for (const Shape s : {Shape{false, 300, 128, 8, DType::kBF16}, Shape{true, 600, 32, 4, DType::kBF16},
                        Shape{false, 256, 512, 10, DType::kBF16}, Shape{false, 300, 128, 8, DType::kF16}}) {
    const MoeCase big = make_case(s.tokens, s.dtype, s.gpt_oss, 17, 576, 288, s.experts, s.top_k);
    expect_batch_invariant(big, *gpu, fmt::format("experts {} top {} {}", s.experts, s.top_k, dtype_name(s.dtype)));
  }
}

// KernelOptions::moe_tiled_min_rows = 1 puts every launch on the tiled kernel, decode batches too (a
// chunk of one or two tiles: pair groups and whole warps without a pair, row blocks of one expert
// each): the gate_up outputs and the layer's output are the decode kernel's bits, at the released
// models' expert counts (T = 64 of gpt-oss's 32 experts top 4: the decode kernel's two-tile blocks)
// and for 300 tokens on 2 experts top 2 (runs of 38 tiles: the two-tile blocks find where their run
// starts over more than one round of 32 tiles). K whole, and in 2 segments (moe_k_segments: gate_up's
// K = 576 in segments of 4 + 1 super-steps, K = 1,088 in 8 + 1; the decode kernel gives each segment
// a warp, the tiled one keeps the first segment's sums in its scratch); and K = 2,112 (17 super-steps:
// two segments by the kernels' own rule, as released models' K of 2,048 and 2,880).
TEST(CudaMoe, TiledKernelAtDecodeBatchesGivesTheDecodeKernelsBits) {
  PAGELLM_GPU_OR_SKIP(gpu);
  struct Shape {
    int64_t tokens, experts, top_k, hidden = 576;
  };
  for (const int64_t segments : {0, 1, 2})
    for (const bool gpt_oss : {false, true})
      for (const Shape s : {Shape{1, 0, 0}, Shape{7, 0, 0}, Shape{64, 0, 0}, Shape{300, 2, 2}, Shape{1, 0, 0, 1088},
                            Shape{7, 0, 0, 1088}, Shape{300, 2, 2, 1088}, Shape{1, 0, 0, 2112}, Shape{7, 0, 0, 2112}}) {
        if (s.hidden == 2112 && segments != 0) continue;
        const int64_t experts = s.experts > 0 ? s.experts : gpt_oss ? 32 : 128;
        const int64_t top_k = s.top_k > 0 ? s.top_k : gpt_oss ? 4 : 8;
        const MoeCase c = make_case(s.tokens, DType::kBF16, gpt_oss, 23, s.hidden, 288, experts, top_k);
        const std::string what = fmt::format("gpt_oss {} T {} experts {} hidden {} segments {}", gpt_oss, s.tokens,
                                             experts, s.hidden, segments);
        std::optional<MoeRun> whole;
        if (segments != 1) {
          const cuda_test::ScopedKernelOptions one(*gpu, [](KernelOptions& o) { o.moe_k_segments = 1; });
          whole = run_grouped(*gpu, c);
        }
        const cuda_test::ScopedKernelOptions cut(*gpu, [&](KernelOptions& o) { o.moe_k_segments = segments; });
        const MoeRun decode = run_grouped(*gpu, c);
        // Segments change only the order of one f32 sum: a few ulps from K whole (a segment left out or
        // counted twice would be far off).
        if (whole) {
          const double rel = ulps(DType::kBF16, 4).rel;
          EXPECT_EQ(compare_tensors(whole->act, decode.act, rel, rel * 0.1), "") << "gate_up against K whole, " << what;
        }
        const cuda_test::ScopedKernelOptions tiled(*gpu, [](KernelOptions& o) { o.moe_tiled_min_rows = 1; });
        const MoeRun all_tiled = run_grouped(*gpu, c);
        EXPECT_TRUE(same_bits(decode.act, all_tiled.act)) << "gate_up, " << what;
        EXPECT_TRUE(same_bits(decode.out, all_tiled.out)) << "out, " << what;
      }
}

// Every e2m1 code under e8m0 scales from 2^-117 to 2^123 (the fast conversion from 16 up, the exact
// f32 one below): with one-hot x rows each output is one weight, so the GPU's bf16 must equal the
// CPU's bit for bit, through the decode kernel (7 rows: one tile a block; 256: two) and the tiled one
// (2,304 rows). Then scales only from the fast conversion's range, declared as the weights' bounds
// (MoeExpertWeights::scale_min / scale_max, as the loader declares them), so the kernels without the
// general conversion run: the same bits again.
TEST(CudaMoe, Mxfp4CodesAndScalesConvertExactly) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  const int64_t k = 256, n = 64, experts = 2;
  const std::vector<uint8_t> all_exponents = {10, 14, 15, 16, 17, 60, 100, 117, 120, 124, 127, 128, 130, 200, 240, 250};
  const std::vector<uint8_t> fast_exponents = {16, 17, 60, 100, 117, 120, 124, 127, 128, 129};
  for (const bool declared : {false, true}) {
    const std::vector<uint8_t>& exponents = declared ? fast_exponents : all_exponents;
    Rng rng(11);
    Tensor blocks = Tensor::cpu({experts, n, k / 2}, DType::kU8);
    Tensor scales = Tensor::cpu({experts, n, k / 32}, DType::kU8);
    for (int64_t i = 0; i < blocks.numel(); ++i) blocks.ptr<uint8_t>()[i] = static_cast<uint8_t>(rng.below(256));
    for (int64_t i = 0; i < scales.numel(); ++i)
      scales.ptr<uint8_t>()[i] = exponents[static_cast<size_t>(i + i / 8) % exponents.size()];
    for (const int64_t tokens : {int64_t{7}, int64_t{256}, int64_t{2304}}) {
      Tensor x = Tensor::cpu({tokens, k}, DType::kBF16), logits = Tensor::cpu({tokens, experts}, DType::kBF16);
      std::memset(x.ptr<void>(), 0, x.nbytes());
      for (int64_t t = 0; t < tokens; ++t) {
        attention_test::store_float(x.view().data, DType::kBF16, t * k + t % k, 1.0f);
        attention_test::store_float(logits.view().data, DType::kBF16, t * experts, 1.0f);  // expert 0
        attention_test::store_float(logits.view().data, DType::kBF16, t * experts + 1, 0.0f);
      }
      Tensor outs[2];
      Backend* backends[2] = {&cpu, gpu};
      for (int b = 0; b < 2; ++b) {
        Backend& be = *backends[b];
        const int64_t tiles = moe_max_tiles(tokens, experts);
        Tensor ids = be.alloc({tokens, 1}, DType::kI32), weights = be.alloc({tokens, 1}, DType::kF32);
        Tensor tile_pairs = be.alloc({tiles, kMoeTileRows}, DType::kI32), tile_experts = be.alloc({tiles}, DType::kI32);
        Tensor y = be.alloc({tokens, n}, DType::kBF16);
        const Tensor x_on = on(be, x), logits_on = on(be, logits);
        const Tensor blocks_on = on(be, blocks), scales_on = on(be, scales);
        MoeExpertWeights w{blocks_on.view(), scales_on.view(), TensorView{}};
        if (declared) w.scale_min = 16, w.scale_max = 129;
        be.moe_route(ids.view(), weights.view(), logits_on.view(), MoeRouting::kSoftmaxTopK, true);
        be.moe_group(tile_pairs.view(), tile_experts.view(), ids.view(), experts);
        be.moe_expert_gemm(y.view(), x_on.view(), w, tile_pairs.view(), tile_experts.view(), 1, std::nullopt);
        outs[b] = host_copy(be, y);
      }
      EXPECT_TRUE(same_bits(outs[0], outs[1]))
          << "declared " << declared << ", tokens " << tokens << ": " << compare_tensors(outs[0], outs[1], 0.0, 0.0);
    }
  }
}

// One projection of a released model's experts for the timing below.
struct ExpertGemmShape {
  const char* name;
  int64_t experts, n, k;  // weights [E, n, k]
  bool mxfp4, fused_act;  // gate_up: n = 2 x the out width, the activation fused
};

// The expert tensors of `shape` on the GPU: MXFP4 blocks and scales (bytes 118..121, declared as the
// loader declares them, so the kernels without the general conversion run) or bf16 values, and a bias.
std::vector<Tensor> expert_gemm_weights(Backend& gpu, const ExpertGemmShape& shape) {
  const int64_t e = shape.experts, n = shape.n, k = shape.k;
  std::vector<Tensor> w;
  if (shape.mxfp4) {
    w.push_back(cuda_test::bench_tensor(gpu, {e, n, k / 2}, DType::kU8, 1));
    Tensor scales = Tensor::cpu({e, n, k / 32}, DType::kU8);
    for (int64_t i = 0; i < scales.numel(); ++i) scales.ptr<uint8_t>()[i] = static_cast<uint8_t>(118 + i % 4);
    w.push_back(cuda_test::to_device(gpu, scales.view()));
  } else {
    w.push_back(cuda_test::bench_tensor(gpu, {e, n, k}, DType::kBF16, 1, 0x3f));
  }
  w.push_back(cuda_test::bench_tensor(gpu, {e, n}, DType::kBF16, 2, 0x3f));
  return w;
}

// us per grouped expert GEMM at decode batches (1, 16, 64 tokens routed by random logits, top k), on
// gpt-oss-20b's MXFP4 experts (top 4 of 32) and Qwen3-30B-A3B's bf16 ones (top 8 of 128), the weights
// cycling through copies past the L2 (a step reads each layer's experts once): the kernel alone, in
// seconds instead of a model's minutes; K by the kernels' rule, whole and in 2 segments (moe_k_segments).
// Bytes: the chosen experts' weights, scales and biases. Prints; asserts only that the products ran.
TEST(CudaMoe, PrintsDecodeExpertGemmTime) {
  PAGELLM_GPU_OR_SKIP(gpu);
  struct Model {
    int64_t top_k;
    MoeRouting routing;
    Activation act;
    ExpertGemmShape gate_up, down;
  };
  const Model models[] = {
      {4, MoeRouting::kTopKSoftmax, Activation::kClampedSwiglu,
       {"gpt-oss-20b gate_up", 32, 5760, 2880, true, true}, {"gpt-oss-20b down", 32, 2880, 2880, true, false}},
      {8, MoeRouting::kSoftmaxTopK, Activation::kSilu,
       {"qwen3-30b-a3b gate_up", 128, 1536, 2048, false, true}, {"qwen3-30b-a3b down", 128, 2048, 768, false, false}}};
  for (const Model& m : models) {
    for (const ExpertGemmShape* shape : {&m.gate_up, &m.down}) {
      // 8 copies: a batch of one reads 4 or 8 experts of each (33 or 50 MB), 264 MB or more in all.
      const auto copies = cuda_test::bench_copies(*gpu, expert_gemm_weights(*gpu, *shape), 8);
      const int64_t out_width = shape->fused_act ? shape->n / 2 : shape->n;
      for (const int64_t tokens : {int64_t{1}, int64_t{16}, int64_t{64}})
      for (const int64_t segments : {0, 1, 2}) {
        const cuda_test::ScopedKernelOptions cut(*gpu, [&](KernelOptions& o) { o.moe_k_segments = segments; });
        const int64_t pairs = tokens * m.top_k, tiles = moe_max_tiles(pairs, shape->experts);
        Rng rng(static_cast<uint64_t>(tokens));
        const Tensor logits = cuda_test::to_device(
            *gpu, cuda_test::random_tensor({tokens, shape->experts}, DType::kBF16, rng).view());
        Tensor ids = gpu->alloc({tokens, m.top_k}, DType::kI32), weights = gpu->alloc({tokens, m.top_k}, DType::kF32);
        Tensor tile_pairs = gpu->alloc({tiles, kMoeTileRows}, DType::kI32);
        Tensor tile_experts = gpu->alloc({tiles}, DType::kI32);
        gpu->moe_route_group(ids.view(), weights.view(), tile_pairs.view(), tile_experts.view(), logits.view(),
                             m.routing, true);
        // gate_up reads a token's row for each of its pairs; down reads each pair's own row.
        const int64_t x_rows = shape->fused_act ? tokens : pairs, pairs_per_x_row = shape->fused_act ? m.top_k : 1;
        const Tensor x = cuda_test::bench_tensor(*gpu, {x_rows, shape->k}, DType::kBF16, 3, 0x3f);
        const Tensor out = gpu->alloc({pairs, out_width}, DType::kBF16);
        const std::optional<Activation> act = shape->fused_act ? std::optional<Activation>(m.act) : std::nullopt;
        const double us = cuda_test::graph_us(*gpu, copies, [&](const std::vector<Tensor>& w) {
          MoeExpertWeights experts{w[0].view(), shape->mxfp4 ? w[1].view() : TensorView{}, w.back().view()};
          if (shape->mxfp4) experts.scale_min = 118, experts.scale_max = 121;
          gpu->moe_expert_gemm(out.view(), x.view(), experts, tile_pairs.view(), tile_experts.view(),
                               pairs_per_x_row, act);
        });
        const Tensor chosen = cuda_test::to_host(*gpu, tile_experts.view());
        std::vector<int32_t> used(chosen.ptr<int32_t>(), chosen.ptr<int32_t>() + tiles);
        std::sort(used.begin(), used.end());
        used.erase(std::unique(used.begin(), used.end()), used.end());
        const auto experts_used =
            static_cast<int64_t>(std::count_if(used.begin(), used.end(), [](int32_t e) { return e >= 0; }));
        double expert_bytes = 0;
        for (const Tensor& t : copies.front()) expert_bytes += static_cast<double>(t.nbytes()) / shape->experts;
        const double bytes = expert_bytes * static_cast<double>(experts_used);
        std::printf("[moe expert gemm] %s, %ld tokens (%ld experts), K segments %s: %.2f us (%.0f GB/s)\n",
                    shape->name, static_cast<long>(tokens), static_cast<long>(experts_used),
                    segments == 0 ? "by rule" : std::to_string(segments).c_str(), us, bytes / us / 1e3);
        EXPECT_GT(us, 0.0) << shape->name << ", " << tokens << " tokens";
      }
    }
  }
}

}  // namespace
}  // namespace pagellm::moe_test
