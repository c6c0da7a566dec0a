// The CUDA MoE ops (backend/cuda/moe.cu) against their CPU twins (backend/cpu/moe.cpp) on the same
// inputs: routing (ids exact, ties to the lower expert; weights to an ulp of their dtype, the only
// difference being expf's last bit), the grouped layout (exact), the grouped expert GEMMs (the
// tensor-core path for bf16 / f16, MXFP4 dequantized in registers; the FMA path for f32) and the
// combine, for T = 1, 7, 64, 300 (experts without a token included); bitwise batch invariance of a
// token's output; and the decode-sized timing (printed). Skips without a GPU.
#include <cstring>

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

// The combine alone, from the same y and weights on both devices: the same bits.
TEST(CudaMoe, CombineIsBitwiseTheCpuTwin) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    const MoeCase c = make_case(64, dtype, false, 7);
    const MoeRun routed = run_grouped(cpu, c);
    Tensor want = reshaped(c.residual, c.residual.shape());
    cpu.moe_combine(want.view(), routed.y.view(), routed.topk_ids.view(), routed.topk_weights.view());
    const Tensor out = cuda_test::to_device(*gpu, c.residual.view()), y = cuda_test::to_device(*gpu, routed.y.view());
    const Tensor ids = cuda_test::to_device(*gpu, routed.topk_ids.view());
    const Tensor weights = cuda_test::to_device(*gpu, routed.topk_weights.view());
    gpu->moe_combine(out.view(), y.view(), ids.view(), weights.view());
    EXPECT_TRUE(same_bits(want, cuda_test::to_host(*gpu, out.view()))) << dtype_name(dtype);
  }
}

// A token's output does not depend on the batch around it: token 5 alone, and in batches of 7, 64, 300.
TEST(CudaMoe, TokenOutputIsBatchInvariant) {
  PAGELLM_GPU_OR_SKIP(gpu);
  for (const bool gpt_oss : {false, true}) {
    MoeCase big = make_case(300, DType::kBF16, gpt_oss, 3);
    const MoeRun all = run_grouped(*gpu, big);
    const int64_t token = 5;
    for (const int64_t tokens : {1, 7, 64}) {
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
      const MoeRun some = run_grouped(*gpu, part);
      EXPECT_TRUE(same_bits(host_row(all.out, token), host_row(some.out, row)))
          << fmt::format("gpt_oss {} T {}", gpt_oss, tokens);
    }
  }
}

}  // namespace
}  // namespace pagellm::moe_test
