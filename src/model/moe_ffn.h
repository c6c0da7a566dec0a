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
// Routing is planned on the host (the router logits come back once per layer): per expert, the
// rows that chose it are gathered, run through that expert's SwiGLU, and added back scaled.
#pragma once

#include <string>
#include <vector>

#include "io/model_config.h"
#include "model/activations.h"
#include "model/layers/linear.h"
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

struct MoeWeights {
  layers::Linear router;               // [E, H] (+ bias [E] for gpt-oss)
  std::vector<SwiGluWeights> experts;  // [E], width moe_intermediate_size
  SwiGluWeights shared;                // width shared_expert_intermediate_size (undefined: none)
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
  // out[T, H] = MoE(normed[T, H]).
  void forward(const MoeWeights& weights, const TensorView& normed, TensorView out);

 private:
  // One SwiGLU expert over `rows` rows of `x` into y.
  void swiglu(const SwiGluWeights& weights, const TensorView& x, TensorView y, size_t gate_up_buffer,
              size_t act_buffer);
  TensorView upload(const Tensor& host);

  ModelConfig config_;
  MoeStyle style_;
  Backend& backend_;
  Activations act_;
  std::vector<Tensor> step_inputs_;  // routing tensors of the current forward, kept alive until the next
};

}  // namespace pagellm
