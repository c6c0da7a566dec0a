// The CPU twins of the MoE ops (backend.h moe_route, moe_group, moe_expert_gemm, moe_combine): the
// readable reference the CUDA kernels are compared with, and what the CPU backend runs.
#pragma once

#include <optional>

#include "backend/backend.h"

namespace pagellm::cpu {

void moe_route(TensorView topk_ids, TensorView topk_weights, const TensorView& logits, MoeRouting routing,
               bool renormalize);
void moe_group(TensorView tile_pairs, TensorView tile_experts, const TensorView& topk_ids, int64_t num_experts);
// Per used tile: its pairs' x rows gathered, then `ops`' matmul (or matmul_mxfp4), add_bias and act_mul on
// the expert's slice of the stack, so each row is bitwise what the per-expert ops give.
void moe_expert_gemm(Backend& ops, TensorView out, const TensorView& x, const MoeExpertWeights& w,
                     const TensorView& tile_pairs, const TensorView& tile_experts, int64_t pairs_per_x_row,
                     std::optional<Activation> act);
void moe_combine(TensorView out, const TensorView& y, const TensorView& topk_ids, const TensorView& topk_weights,
                 bool accumulate);

}  // namespace pagellm::cpu
