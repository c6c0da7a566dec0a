// MoeFfn: the sparse MoE block of Qwen3-MoE, and with a shared expert of Qwen3-Next / Qwen3.5-MoE
// (spec/models.md B.13).
//
//   p       = softmax_f32(x W_router^T)           top-k experts per token, weights renormalised
//                                                 (norm_topk_prob)
//   routed  = sum_j w_j · down_e(silu(gate_e x) ⊙ up_e x)
//   out     = sigmoid(x · w_sg) ⊙ SwiGLU_shared(x) + routed    (out = routed without a shared expert)
//
// gpt-oss (MoeStyle::kGptOss, model/gpt_oss_moe.cpp loads it):
//   logits  = x W_router^T + b_router;  top-k logits, softmax over those k
//   routed  = sum_j w_j · down_e(clamped_swiglu(gate_up_e x + b_gu) ) + b_down   (backend.h kClampedSwiglu)
//
// Everything runs on the device, without a read back to the host (so decode steps are captured in
// graphs): moe_route picks each token's experts, moe_group lays the (token, slot) pairs out by expert
// in tiles (both through moe_route_group: one launch for a decode step on CUDA), one grouped GEMM launch computes every expert's gate | up with the activation fused, a
// second the down projection, and moe_combine adds the weighted results into `out` per token in
// ascending expert order (transformers' order, so the f32 and bf16 results are its bits).
#pragma once

#include <string>
#include <vector>

#include "io/model_config.h"
#include "model/activations.h"
#include "model/layers/linear.h"
#include "model/layers/norm.h"
#include "model/weights.h"

namespace pagellm {

struct SwiGluWeights {
  layers::Linear gate_up;  // [2 I, H]  rows: gate | up (dense, or MXFP4 for gpt-oss; optional bias)
  layers::Linear down;     // [H, I]
};

// How the router turns logits into expert weights, and which gated activation the experts use.
enum class MoeStyle {
  kQwen,    // softmax over all experts, top-k, renormalised when norm_topk_prob; SiLU
  kGptOss,  // top-k logits, softmax over those k; clamped SwiGLU
};

// One projection of all routed experts, stacked so one grouped GEMM launch serves them
// (backend.h MoeExpertWeights).
struct ExpertStack {
  Tensor weight;  // dense [E, N, K] (weight dtype), or MXFP4 blocks [E, N, K / 2] u8
  Tensor scales;  // MXFP4: [E, N, K / 32] u8 e8m0; undefined when dense
  Tensor bias;    // [E, N] or undefined
  uint8_t scale_min = 0, scale_max = 255;  // MXFP4: the bounds of the scales' bytes (backend.h)
  MoeExpertWeights view() const { return {weight.view(), scales.view(), bias.view(), scale_min, scale_max}; }
};

// Stacks per-expert tensors of one shape into [E, ...] on the backend's device (the parts are copied,
// so the caller may drop them afterwards).
Tensor stack_experts(Backend& backend, const std::vector<Tensor>& parts);

struct MoeWeights {
  layers::Linear router;  // [E, H] (+ bias [E] for gpt-oss)
  ExpertStack gate_up;    // [E, 2 I, H]: gate rows | up rows; I = moe_intermediate_size (a rank's share)
  ExpertStack down;       // [E, H, I]
  SwiGluWeights shared;   // width shared_expert_intermediate_size (undefined: none)
  Tensor shared_gate;                  // [1, H]
  bool has_shared_expert() const { return shared_gate.defined(); }
};

// Loads `prefix` + "gate.weight", "experts.{e}.*" (per-expert names, as released checkpoints hold
// them, or the fused experts.gate_up_proj / down_proj that transformers 5 writes), and, when the config
// has shared_expert_intermediate_size, "shared_expert.*" and "shared_expert_gate.weight".
Expected<MoeWeights> load_moe_weights(WeightLoader& loader, Backend& backend, DType weight_dtype,
                                      const ModelConfig& config, const std::string& prefix);

// gpt-oss: `prefix` + "router.*" and "experts.*" (dense bf16/f32, or MXFP4 blocks and scales as
// released; model/gpt_oss_moe.cpp). The experts' width is the config's intermediate_size.
Expected<MoeWeights> load_gpt_oss_moe_weights(WeightLoader& loader, Backend& backend, const ModelConfig& config,
                                              const std::string& prefix);

// The columns of each gpt-oss expert's width a tensor-parallel rank keeps: whole groups of 32 (the
// MXFP4 blocks of down's input), as evenly as shard_range splits them; an error when a rank would get none.
Expected<ShardRange> gpt_oss_expert_shard(int64_t width, int rank, int size);

class MoeFfn {
 public:
  MoeFfn(const ModelConfig& config, Backend& backend, MoeStyle style = MoeStyle::kQwen);
  // What follows the block when the combine takes it along: hidden += out, then normed = norm(hidden)
  // (the next block's input norm; `normed` may be the block's input, which is read before).
  struct ResidualNorm {
    TensorView hidden;
    TensorView normed;
    const layers::RmsNorm* norm = nullptr;
  };
  // out[T, H] = MoE(normed[T, H]), then `then` where given (Backend::moe_combine_add_rms_norm).
  void forward(const MoeWeights& weights, const TensorView& normed, TensorView out,
               const ResidualNorm* then = nullptr);

 private:
  // The shared expert's SwiGLU over `x` into y.
  void shared_swiglu(const SwiGluWeights& weights, const TensorView& x, TensorView y);

  ModelConfig config_;
  MoeStyle style_;
  Backend& backend_;
  Activations act_;      // activation dtype
  Activations routing_;  // i32 / f32 routing buffers (one Activations per dtype)
  Activations weights_;
};

}  // namespace pagellm
