// Launchers of the MoE kernels (moe.cu): backend.h moe_route, moe_group, moe_route_group, moe_expert_gemm,
// moe_combine, moe_combine_add_rms_norm.
// cuda_backend.cpp validates the views and calls these; plain pointers and kernels.h Rows only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/moe_kinds.h"

namespace pagellm::cuda {

// topk_ids / topk_weights [T, k] contiguous; logits [T, E] rows (E <= 2048).
cudaError_t launch_moe_route(DType dtype, int32_t* topk_ids, float* topk_weights, Rows logits, int64_t top_k,
                             MoeRouting routing, bool renormalize, cudaStream_t stream);
// tile_pairs [num_tiles, 8], tile_experts [num_tiles], topk_ids [pairs]; E <= 512. One block.
cudaError_t launch_moe_group(int32_t* tile_pairs, int32_t* tile_experts, int64_t num_tiles, const int32_t* topk_ids,
                             int64_t pairs, int64_t num_experts, cudaStream_t stream);
// Both of the above in one launch (the same results), where moe_route_group_fits: T <= 16, E <= 512.
bool moe_route_group_fits(int64_t tokens, int64_t num_experts, int64_t top_k);
cudaError_t launch_moe_route_group(DType dtype, int32_t* topk_ids, float* topk_weights, int32_t* tile_pairs,
                                   int32_t* tile_experts, int64_t num_tiles, Rows logits, int64_t top_k,
                                   MoeRouting routing, bool renormalize, cudaStream_t stream);
// MXFP4 scale bytes (e8m0) for which the kernels' fast conversion is exact (moe.cu mxfp4_piece_fast);
// weights whose scales all lie here (MoeExpertWeights::scale_min / scale_max) run kernels without the
// general conversion, whose code in the inner loops cost instruction-cache misses.
inline constexpr unsigned kMxfp4FastScaleMin = 16, kMxfp4FastScaleMax = 129;
struct MoeGemmArgs {
  void* out = nullptr;            // [pairs, out columns], row stride ld_out
  int64_t ld_out = 0;
  const void* x = nullptr;        // [rows, k], row stride ld_x
  int64_t ld_x = 0;
  const void* weight = nullptr;   // dense [E, n, k] (x's dtype), or MXFP4 blocks [E, n, k / 2]
  const uint8_t* scales = nullptr;  // MXFP4 [E, n, k / 32]; nullptr: dense
  const void* bias = nullptr;     // [E, n] (x's dtype) or nullptr
  const int32_t* tile_pairs = nullptr;
  const int32_t* tile_experts = nullptr;
  int64_t num_tiles = 0;
  int64_t num_pairs = 0;          // out's rows: the pairs of the step (a tile holds at most min(8, num_pairs))
  int64_t n = 0, k = 0;           // k % 32 == 0
  int64_t pairs_per_x_row = 1;
  int num_experts = 0;            // E of the weights
  bool fuse_act = false;          // out = act(gate) * up of the n = 2 * out columns
  bool mxfp4_fast_scales = false;  // every scale byte in [kMxfp4FastScaleMin, kMxfp4FastScaleMax]
  Activation act = Activation::kSilu;
  // K in segments of this many super-steps of 128 (moe_k_segment_steps; 0: one segment): each output
  // is the sum, in segment order, of one f32 chain a segment, in both tensor-core kernels.
  int k_segment_steps = 0;
  // The tiled kernel's per-thread running sums between segments: moe_fold_scratch_bytes(num_sms)
  // bytes, needed where k_segment_steps > 0.
  float* fold_scratch = nullptr;
};
// The segment length for K and a requested number of segments (0: the kernels' own rule), a function of
// (K, the request) alone, so a pair's bits do not depend on the batch; 0 where K is one segment.
int moe_k_segment_steps(int64_t k, int64_t requested_segments);
int64_t moe_fold_scratch_bytes(int num_sms);
// num_sms: the tiled kernel's persistent grid (a block an SM). tiled_min_rows: grouped rows (num_tiles x 8)
// from which the tiled kernel runs instead of the decode one (KernelOptions::moe_tiled_min_rows; 0: the
// kernel's own threshold). Both give the same bits.
cudaError_t launch_moe_expert_gemm(DType dtype, const MoeGemmArgs& args, int num_sms, int64_t tiled_min_rows,
                                   cudaStream_t stream);
// out [T, H] rows += the weighted y [T * k, H] rows, slots in ascending expert order (k <= 32); from
// +0 instead of out's rows when !accumulate.
cudaError_t launch_moe_combine(DType dtype, Rows out, Rows y, const int32_t* topk_ids, const float* topk_weights,
                               int64_t top_k, bool accumulate, cudaStream_t stream);
// launch_moe_combine, then hidden += out and normed = rms_norm(hidden) * w as launch_add_rms_norm
// computes them (Backend::moe_combine_add_rms_norm): one block a token where rows take the norm's
// register form (512 <= H <= 8,192), else the two launches.
cudaError_t launch_moe_combine_add_rms_norm(DType dtype, Rows out, Rows hidden, Rows normed, Rows y,
                                            const int32_t* topk_ids, const float* topk_weights, int64_t top_k,
                                            bool accumulate, const void* w, float eps, NormForm form,
                                            cudaStream_t stream);

}  // namespace pagellm::cuda
