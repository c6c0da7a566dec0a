// The CPU twins of the MoE ops (backend/cpu/moe.h): routing against a sort-based reference (ties to
// the lower expert), the grouped layout's invariants, and the grouped pipeline bitwise equal to the
// per-expert ops it replaces (gather, matmul / matmul_mxfp4, add_bias, act_mul, add_rows_scaled in
// ascending expert order), for Qwen3-MoE and gpt-oss (MXFP4, biases, clamped SwiGLU) in bf16 and f32.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "moe_test_data.h"

namespace pagellm::moe_test {
namespace {

// Routing as the host computed it before moe_route: a stable sort of all experts.
void sorted_route(const MoeCase& c, std::vector<int32_t>& ids, std::vector<float>& weights) {
  ids.clear(), weights.clear();
  std::vector<float> row(static_cast<size_t>(c.experts)), p(row.size());
  std::vector<int32_t> order(row.size());
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t e = 0; e < c.experts; ++e)
      row[static_cast<size_t>(e)] = attention_test::load_float(c.logits.view().data, c.dtype, t * c.experts + e);
    std::iota(order.begin(), order.end(), 0);
    const float max_logit = *std::max_element(row.begin(), row.end());
    float sum = 0.0f;
    for (size_t e = 0; e < row.size(); ++e) sum += p[e] = std::exp(row[e] - max_logit);
    for (float& v : p) v /= sum;
    const std::vector<float>& key = c.routing == MoeRouting::kTopKSoftmax ? row : p;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key[a] > key[b]; });
    std::vector<float> w(static_cast<size_t>(c.top_k));
    float total = 0.0f;
    for (int64_t j = 0; j < c.top_k; ++j) {
      const auto e = static_cast<size_t>(order[static_cast<size_t>(j)]);
      w[static_cast<size_t>(j)] = c.routing == MoeRouting::kTopKSoftmax ? std::exp(row[e] - row[static_cast<size_t>(order[0])]) : p[e];
      total += w[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < c.top_k; ++j) {
      ids.push_back(order[static_cast<size_t>(j)]);
      const bool divide = c.routing == MoeRouting::kTopKSoftmax || c.renormalize;
      weights.push_back(round_to_dtype(divide ? w[static_cast<size_t>(j)] / total : w[static_cast<size_t>(j)], c.dtype));
    }
  }
}

// out = residual + the routed experts, one expert at a time (the ops MoeFfn ran before the grouped ones).
Tensor per_expert_reference(Backend& cpu, const MoeCase& c, const Tensor& topk_ids, const Tensor& topk_weights) {
  Tensor out = reshaped(c.residual, c.residual.shape());
  for (int64_t e = 0; e < c.experts; ++e) {
    std::vector<int32_t> rows;
    std::vector<float> weights;
    for (int64_t p = 0; p < c.tokens * c.top_k; ++p)
      if (topk_ids.ptr<int32_t>()[p] == e) rows.push_back(static_cast<int32_t>(p / c.top_k)), weights.push_back(topk_weights.ptr<float>()[p]);
    if (rows.empty()) continue;
    const auto n = static_cast<int64_t>(rows.size());
    Tensor ids = Tensor::cpu({n}, DType::kI32), w = Tensor::cpu({n}, DType::kF32);
    std::copy(rows.begin(), rows.end(), ids.ptr<int32_t>());
    std::copy(weights.begin(), weights.end(), w.ptr<float>());
    Tensor gathered = Tensor::cpu({n, c.hidden}, c.dtype), gate_up = Tensor::cpu({n, 2 * c.width}, c.dtype);
    Tensor act = Tensor::cpu({n, c.width}, c.dtype), y = Tensor::cpu({n, c.hidden}, c.dtype);
    cpu.embedding(gathered.view(), c.x.view(), ids.view());
    auto project = [&](TensorView dst, const TensorView& src, const Tensor& weight, const Tensor& scales, const Tensor& bias) {
      const int64_t rows_n = weight.size(1);
      if (scales.defined())
        cpu.matmul_mxfp4(dst, src, weight.view().slice_rows(e, e + 1).reshape({rows_n, weight.size(2)}),
                         scales.view().slice_rows(e, e + 1).reshape({rows_n, scales.size(2)}));
      else
        cpu.matmul(dst, src, weight.view().slice_rows(e, e + 1).reshape({rows_n, weight.size(2)}));
      if (bias.defined()) cpu.add_bias(dst, bias.view().slice_rows(e, e + 1).reshape({rows_n}));
    };
    project(gate_up.view(), gathered.view(), c.gate_up, c.gate_up_scales, c.gate_up_bias);
    cpu.act_mul(act.view(), gate_up.view(), c.act);
    project(y.view(), act.view(), c.down, c.down_scales, c.down_bias);
    cpu.add_rows_scaled(out.view(), y.view(), ids.view(), w.view());
  }
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.ptr<void>(), b.ptr<void>(), a.nbytes()) == 0;
}

TEST(MoeOps, RouteIsTheSortedTopKWithTiesToTheLowerExpert) {
  CpuBackend cpu;
  for (const bool gpt_oss : {false, true})
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      MoeCase c = make_case(37, dtype, gpt_oss, 11);
      for (const bool renormalize : {true, false}) {
        if (gpt_oss && renormalize) continue;
        c.renormalize = renormalize;
        const MoeRun r = run_grouped(cpu, c);
        std::vector<int32_t> ids;
        std::vector<float> weights;
        sorted_route(c, ids, weights);
        SCOPED_TRACE(fmt::format("gpt_oss {} dtype {} renormalize {}", gpt_oss, dtype_name(dtype), renormalize));
        ASSERT_EQ(std::vector<int32_t>(r.topk_ids.ptr<int32_t>(), r.topk_ids.ptr<int32_t>() + ids.size()), ids);
        ASSERT_EQ(std::vector<float>(r.topk_weights.ptr<float>(), r.topk_weights.ptr<float>() + weights.size()), weights);
        // Row 0 has all logits equal: experts 0 .. k-1, in order.
        for (int64_t j = 0; j < c.top_k; ++j) EXPECT_EQ(ids[static_cast<size_t>(j)], j);
      }
    }
}

TEST(MoeOps, GroupLaysEachExpertsPairsOutInOrderInItsOwnTiles) {
  CpuBackend cpu;
  for (const int64_t tokens : {1, 7, 64, 300}) {
    const MoeCase c = make_case(tokens, DType::kBF16, false, 5 + static_cast<uint64_t>(tokens));
    const MoeRun r = run_grouped(cpu, c);
    const int64_t pairs = tokens * c.top_k, tiles = r.tile_experts.numel();
    const int32_t* ids = r.topk_ids.ptr<int32_t>();
    const int32_t* slot = r.tile_pairs.ptr<int32_t>();
    const int32_t* expert = r.tile_experts.ptr<int32_t>();
    std::vector<int> seen(static_cast<size_t>(pairs), 0);
    int64_t used = 0, previous_expert = -1, previous_pair = -1;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      if (expert[tile] < 0) {
        for (int64_t i = 0; i < kMoeTileRows; ++i) EXPECT_EQ(slot[tile * kMoeTileRows + i], -1) << "spare tile " << tile;
        continue;
      }
      EXPECT_EQ(used, tile) << "used tiles come first";
      ++used;
      EXPECT_GE(expert[tile], previous_expert);
      if (expert[tile] != previous_expert) previous_pair = -1;
      EXPECT_GE(slot[tile * kMoeTileRows], 0) << "a tile starts with a pair";
      for (int64_t i = 0; i < kMoeTileRows; ++i) {
        const int32_t p = slot[tile * kMoeTileRows + i];
        if (p < 0) continue;
        EXPECT_EQ(ids[p], expert[tile]);
        EXPECT_GT(p, previous_pair) << "ascending pairs within an expert";
        previous_pair = p;
        ++seen[static_cast<size_t>(p)];
      }
      previous_expert = expert[tile];
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << "every pair exactly once";
    if (tokens == 1) {
      EXPECT_EQ(used, c.top_k) << "one tile per chosen expert, none for the others";
    }
  }
}

TEST(MoeOps, GroupedOpsAreBitwiseThePerExpertOps) {
  CpuBackend cpu;
  for (const bool gpt_oss : {false, true})
    for (const DType dtype : {DType::kF32, DType::kBF16})
      for (const int64_t tokens : {1, 7, 64}) {
        const MoeCase c = make_case(tokens, dtype, gpt_oss, 17 + static_cast<uint64_t>(tokens));
        const MoeRun r = run_grouped(cpu, c);
        const Tensor want = per_expert_reference(cpu, c, r.topk_ids, r.topk_weights);
        EXPECT_TRUE(bitwise_equal(want, r.out))
            << fmt::format("gpt_oss {} dtype {} T {}: {}", gpt_oss, dtype_name(dtype), tokens,
                           cuda_test::compare_tensors(want, r.out, 0.0, 0.0));
      }
}

}  // namespace
}  // namespace pagellm::moe_test
