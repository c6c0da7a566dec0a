#include "model/moe_ffn.h"

#include "model/layers/gated_mlp.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "model/gdn_mixer.h"

namespace pagellm {

namespace {

// Activation buffers of the block, by index (act_: activation dtype; routing_: i32; weights_: f32).
enum Buffer : size_t { kRouter, kSharedGate, kSharedGateUp, kSharedAct, kExpertAct, kExpertOut };
enum RoutingBuffer : size_t { kTopkIds, kTilePairs, kTileExperts };
enum WeightBuffer : size_t { kTopkWeights };

// A tensor-parallel rank keeps its columns of the expert's width (gate and up rows, down's input
// columns), so the expert's output is a partial sum the decoder adds up over the ranks.
Expected<SwiGluWeights> load_swiglu(WeightLoader& loader, const std::string& p, int64_t hidden, int64_t width) {
  SwiGluWeights w;
  std::vector<TensorSlice> rows, columns;
  if (loader.tp_size() > 1) {
    const ShardRange mine = layers::intermediate_shard(width, loader.tp_rank(), loader.tp_size());
    rows.assign(2, TensorSlice{mine.begin, mine.count, 0, -1});
    columns.assign(1, TensorSlice{0, -1, mine.begin, mine.count});
  }
  PAGELLM_ASSIGN_OR_RETURN(w.gate_up.weight, loader.load_rows({p + "gate_proj.weight", p + "up_proj.weight"},
                                                              {{width, hidden}, {width, hidden}}, rows));
  PAGELLM_ASSIGN_OR_RETURN(w.down.weight, loader.load_rows({p + "down_proj.weight"}, {{hidden, width}}, columns));
  return w;
}

// transformers >= 5 may store the experts fused: gate_up_proj [E, 2 I, H] (gate rows first), down_proj [E, H, I]:
// already the stacked layout.
Status load_fused_experts(WeightLoader& loader, Backend& backend, DType weight_dtype, const std::string& p,
                          int64_t num_experts, int64_t hidden, int64_t width, MoeWeights& out) {
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> gate_up,
                           loader.load_host_f32(p + "experts.gate_up_proj", {num_experts, 2 * width, hidden}));
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> down, loader.load_host_f32(p + "experts.down_proj", {num_experts, hidden, width}));
  out.gate_up.weight = upload_matrix(backend, gate_up, Shape{num_experts, 2 * width, hidden}, weight_dtype);
  out.down.weight = upload_matrix(backend, down, Shape{num_experts, hidden, width}, weight_dtype);
  return Status::ok();
}

}  // namespace

Expected<MoeWeights> load_moe_weights(WeightLoader& loader, Backend& backend, DType weight_dtype,
                                      const ModelConfig& c, const std::string& p) {
  const int64_t h = c.hidden_size, e_count = c.num_experts, width = c.moe_intermediate_size;
  MoeWeights w;
  PAGELLM_ASSIGN_OR_RETURN(w.router.weight, loader.load(p + "gate.weight", {e_count, h}));
  if (loader.has(p + "experts.gate_up_proj")) {
    if (loader.tp_size() > 1)
      return unimplemented("[model] {}experts.gate_up_proj: tensor parallelism over fused expert tensors is not "
                           "supported yet (per-expert tensors are)", p);
    PAGELLM_RETURN_IF_ERROR(load_fused_experts(loader, backend, weight_dtype, p, e_count, h, width, w));
  } else {
    std::vector<Tensor> gate_up, down;
    for (int64_t e = 0; e < e_count; ++e) {
      PAGELLM_ASSIGN_OR_RETURN(SwiGluWeights expert, load_swiglu(loader, fmt::format("{}experts.{}.", p, e), h, width));
      gate_up.push_back(std::move(expert.gate_up.weight));
      down.push_back(std::move(expert.down.weight));
    }
    w.gate_up.weight = stack_experts(backend, gate_up);
    w.down.weight = stack_experts(backend, down);
  }
  if (c.shared_expert_intermediate_size > 0) {
    PAGELLM_ASSIGN_OR_RETURN(w.shared, load_swiglu(loader, p + "shared_expert.", h, c.shared_expert_intermediate_size));
    PAGELLM_ASSIGN_OR_RETURN(w.shared_gate, loader.load(p + "shared_expert_gate.weight", {1, h}));
  }
  return w;
}

Tensor stack_experts(Backend& backend, const std::vector<Tensor>& parts) {
  CHECK(!parts.empty());
  const Shape part = parts.front().shape();
  CHECK(part.ndim < kMaxDims);
  Shape dims;  // [E, part...]
  dims.ndim = part.ndim + 1;
  dims[0] = static_cast<int64_t>(parts.size());
  for (int d = 0; d < part.ndim; ++d) dims[d + 1] = part[d];
  Tensor stacked = backend.alloc(dims, parts.front().dtype());
  for (size_t e = 0; e < parts.size(); ++e) {
    CHECK(parts[e].shape() == part && parts[e].dtype() == stacked.dtype());
    backend.copy(stacked.view().slice_rows(static_cast<int64_t>(e), static_cast<int64_t>(e) + 1).reshape(part), parts[e].view());
  }
  return stacked;
}

MoeFfn::MoeFfn(const ModelConfig& config, Backend& backend, MoeStyle style)
    : config_(config),
      style_(style),
      backend_(backend),
      act_(backend, config.dtype),
      routing_(backend, DType::kI32),
      weights_(backend, DType::kF32) {
  const int64_t h = config.hidden_size;
  // A tensor-parallel rank computes its columns of each expert's width (the shared expert's too).
  auto local = [&](int64_t width) {
    return layers::intermediate_shard(width, backend.tensor_parallel_rank(), backend.tensor_parallel_size()).count;
  };
  act_.define(kRouter, config.num_experts);
  if (config.shared_expert_intermediate_size > 0) {
    act_.define(kSharedGate, 1);
    act_.define(kSharedGateUp, 2 * local(config.shared_expert_intermediate_size));
    act_.define(kSharedAct, local(config.shared_expert_intermediate_size));
  }
  const Expected<ShardRange> gpt_oss_columns = gpt_oss_expert_shard(
      config.moe_intermediate_size, backend.tensor_parallel_rank(), backend.tensor_parallel_size());
  const int64_t width = style != MoeStyle::kGptOss ? local(config.moe_intermediate_size)
                        : gpt_oss_columns.has_value() ? gpt_oss_columns->count
                                                      : 0;  // make_decoder refuses that split first
  act_.define(kExpertAct, width);  // [T * k, I]: one row per (token, slot) pair
  act_.define(kExpertOut, h);      // [T * k, H]
  routing_.define(kTopkIds, config.num_experts_per_tok);
  routing_.define(kTilePairs, kMoeTileRows);
  routing_.define(kTileExperts, 1);
  weights_.define(kTopkWeights, config.num_experts_per_tok);
}

void MoeFfn::shared_swiglu(const SwiGluWeights& w, const TensorView& x, TensorView y) {
  const int64_t rows = x.size(0);
  TensorView gate_up = act_.rows(kSharedGateUp, rows);  // [rows, 2 I]
  TensorView act = act_.rows(kSharedAct, rows);         // [rows, I]
  w.gate_up.forward(backend_, gate_up, x);
  backend_.act_mul(act, gate_up, Activation::kSilu);
  w.down.forward(backend_, y, act);
}

void MoeFfn::forward(const MoeWeights& w, const TensorView& normed, TensorView out, const ResidualNorm* then) {
  const int64_t num_tokens = normed.size(0), num_experts = config_.num_experts;
  const int64_t top_k = config_.num_experts_per_tok, pairs = num_tokens * top_k;
  // The shared expert writes `out` first and the routed experts add into it; without one the combine
  // starts from zeros (transformers' index_add into a zero tensor).
  if (w.has_shared_expert()) {
    TensorView shared_gate = act_.rows(kSharedGate, num_tokens);  // [T, 1]
    shared_swiglu(w.shared, normed, out);
    backend_.matmul(shared_gate, normed, w.shared_gate);
    backend_.sigmoid_mul(out, out, shared_gate);
  }

  TensorView router = act_.rows(kRouter, num_tokens);  // [T, E]
  w.router.forward(backend_, router, normed);
  TensorView topk_ids = routing_.rows(kTopkIds, num_tokens);         // [T, k] i32
  TensorView topk_weights = weights_.rows(kTopkWeights, num_tokens); // [T, k] f32
  const int64_t num_tiles = moe_max_tiles(pairs, num_experts);
  TensorView tile_pairs = routing_.rows(kTilePairs, num_tiles);  // [tiles, kMoeTileRows] i32
  TensorView tile_experts = routing_.rows(kTileExperts, num_tiles).reshape({num_tiles});
  const bool gpt_oss = style_ == MoeStyle::kGptOss;
  backend_.moe_route_group(topk_ids, topk_weights, tile_pairs, tile_experts, router,
                           gpt_oss ? MoeRouting::kTopKSoftmax : MoeRouting::kSoftmaxTopK,
                           !gpt_oss && config_.norm_topk_prob);
  TensorView act = act_.rows(kExpertAct, pairs);        // [T * k, I]
  TensorView expert_out = act_.rows(kExpertOut, pairs); // [T * k, H]
  backend_.moe_expert_gemm(act, normed, w.gate_up.view(), tile_pairs, tile_experts, top_k,
                           gpt_oss ? Activation::kClampedSwiglu : Activation::kSilu);
  backend_.moe_expert_gemm(expert_out, act, w.down.view(), tile_pairs, tile_experts, 1, std::nullopt);
  if (then == nullptr) {
    backend_.moe_combine(out, expert_out, topk_ids, topk_weights, w.has_shared_expert());
    return;
  }
  const layers::RmsNorm& norm = *then->norm;
  backend_.moe_combine_add_rms_norm(out, then->hidden, then->normed, expert_out, topk_ids, topk_weights,
                                    w.has_shared_expert(), norm.weight, norm.eps, norm.mode);
}

}  // namespace pagellm
