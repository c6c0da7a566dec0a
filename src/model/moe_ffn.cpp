#include "model/moe_ffn.h"

#include "model/layers/gated_mlp.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "model/gdn_mixer.h"

namespace pagellm {

namespace {

// Activation buffers of the block, by index.
enum Buffer : size_t { kRouter, kSharedGate, kSharedGateUp, kSharedAct, kGathered, kExpertGateUp, kExpertAct, kExpertOut };

// The experts each token picked and their weights (spec B.13), from router logits [T, E] in f32.
struct Routing {
  std::vector<std::vector<int32_t>> rows;  // [E][tokens routed to e]
  std::vector<std::vector<float>> weights; // [E][same], rounded to the activation dtype
};

// gpt-oss: the top-k logits (ties to the lower expert), then a softmax over those k.
Routing route_top_k_softmax(const std::vector<float>& logits, int64_t num_tokens, int64_t num_experts, int64_t top_k,
                            DType activation_dtype) {
  Routing routing;
  routing.rows.resize(static_cast<size_t>(num_experts));
  routing.weights.resize(static_cast<size_t>(num_experts));
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  std::vector<float> p(static_cast<size_t>(top_k));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits.data() + t * num_experts;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return row[x] > row[y]; });
    const float max_logit = row[order[0]];
    float sum = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) sum += p[static_cast<size_t>(j)] = std::exp(row[order[static_cast<size_t>(j)]] - max_logit);
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      routing.rows[static_cast<size_t>(e)].push_back(static_cast<int32_t>(t));
      routing.weights[static_cast<size_t>(e)].push_back(round_to_dtype(p[static_cast<size_t>(j)] / sum, activation_dtype));
    }
  }
  return routing;
}

Routing route(const std::vector<float>& logits, int64_t num_tokens, int64_t num_experts, int64_t top_k,
              bool renormalise, DType activation_dtype) {
  Routing routing;
  routing.rows.resize(static_cast<size_t>(num_experts));
  routing.weights.resize(static_cast<size_t>(num_experts));
  std::vector<float> p(static_cast<size_t>(num_experts));
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits.data() + t * num_experts;
    const float max_logit = *std::max_element(row, row + num_experts);
    float sum = 0.0f;
    for (int64_t e = 0; e < num_experts; ++e) sum += p[static_cast<size_t>(e)] = std::exp(row[e] - max_logit);
    for (float& value : p) value /= sum;
    std::iota(order.begin(), order.end(), 0);
    // Highest probability first; ties to the lower expert index.
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return p[static_cast<size_t>(x)] > p[static_cast<size_t>(y)]; });
    float top_sum = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) top_sum += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      const float weight = renormalise ? p[static_cast<size_t>(e)] / top_sum : p[static_cast<size_t>(e)];
      routing.rows[static_cast<size_t>(e)].push_back(static_cast<int32_t>(t));
      routing.weights[static_cast<size_t>(e)].push_back(round_to_dtype(weight, activation_dtype));
    }
  }
  return routing;
}

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

// transformers >= 5 may store the experts fused: gate_up_proj [E, 2 I, H] (gate rows first), down_proj [E, H, I].
Status load_fused_experts(WeightLoader& loader, Backend& backend, DType weight_dtype, const std::string& p,
                          int64_t num_experts, int64_t hidden, int64_t width, MoeWeights& out) {
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> gate_up,
                           loader.load_host_f32(p + "experts.gate_up_proj", {num_experts, 2 * width, hidden}));
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> down, loader.load_host_f32(p + "experts.down_proj", {num_experts, hidden, width}));
  const auto per_gate_up = static_cast<size_t>(2 * width * hidden), per_down = static_cast<size_t>(hidden * width);
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto ue = static_cast<size_t>(e);
    SwiGluWeights w;
    w.gate_up.weight = upload_matrix(backend, {gate_up.begin() + ue * per_gate_up, gate_up.begin() + (ue + 1) * per_gate_up},
                              Shape{2 * width, hidden}, weight_dtype);
    w.down.weight = upload_matrix(backend, {down.begin() + ue * per_down, down.begin() + (ue + 1) * per_down},
                           Shape{hidden, width}, weight_dtype);
    out.experts.push_back(std::move(w));
  }
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
    for (int64_t e = 0; e < e_count; ++e) {
      PAGELLM_ASSIGN_OR_RETURN(SwiGluWeights expert, load_swiglu(loader, fmt::format("{}experts.{}.", p, e), h, width));
      w.experts.push_back(std::move(expert));
    }
  }
  if (c.shared_expert_intermediate_size > 0) {
    PAGELLM_ASSIGN_OR_RETURN(w.shared, load_swiglu(loader, p + "shared_expert.", h, c.shared_expert_intermediate_size));
    PAGELLM_ASSIGN_OR_RETURN(w.shared_gate, loader.load(p + "shared_expert_gate.weight", {1, h}));
  }
  return w;
}

MoeFfn::MoeFfn(const ModelConfig& config, Backend& backend, MoeStyle style)
    : config_(config), style_(style), backend_(backend), act_(backend, config.dtype) {
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
  act_.define(kGathered, h);
  const Expected<ShardRange> gpt_oss_columns = gpt_oss_expert_shard(
      config.moe_intermediate_size, backend.tensor_parallel_rank(), backend.tensor_parallel_size());
  const int64_t width = style != MoeStyle::kGptOss ? local(config.moe_intermediate_size)
                        : gpt_oss_columns.has_value() ? gpt_oss_columns->count
                                                      : 0;  // make_decoder refuses that split first
  act_.define(kExpertGateUp, 2 * width);
  act_.define(kExpertAct, width);
  act_.define(kExpertOut, h);
}

TensorView MoeFfn::upload(const Tensor& host) {
  if (backend_.device() == Device::kCpu) {
    step_inputs_.push_back(host);
  } else {
    step_inputs_.push_back(backend_.alloc(host.shape(), host.dtype()));
    backend_.copy(step_inputs_.back().view(), host.view());
  }
  return step_inputs_.back().view();
}

void MoeFfn::swiglu(const SwiGluWeights& w, const TensorView& x, TensorView y, size_t gate_up_buffer,
                    size_t act_buffer) {
  const int64_t rows = x.size(0);
  TensorView gate_up = act_.rows(gate_up_buffer, rows);  // [rows, 2 I]
  TensorView act = act_.rows(act_buffer, rows);          // [rows, I]
  w.gate_up.forward(backend_, gate_up, x);
  backend_.act_mul(act, gate_up, style_ == MoeStyle::kGptOss ? Activation::kClampedSwiglu : Activation::kSilu);
  w.down.forward(backend_, y, act);
}

void MoeFfn::forward(const MoeWeights& w, const TensorView& normed, TensorView out) {
  const int64_t num_tokens = normed.size(0), num_experts = config_.num_experts;
  backend_.synchronize();  // the previous layer's routing tensors may still be read on a device
  step_inputs_.clear();
  // The shared expert writes `out` first; the routed experts add into it (into zeros without one, as
  // transformers' index_add into a zero tensor: 0 x the finite normed rows).
  if (w.has_shared_expert()) {
    TensorView shared_gate = act_.rows(kSharedGate, num_tokens);  // [T, 1]
    swiglu(w.shared, normed, out, kSharedGateUp, kSharedAct);
    backend_.matmul(shared_gate, normed, w.shared_gate);
    backend_.sigmoid_mul(out, out, shared_gate);
  } else {
    backend_.scale(out, normed, 0.0f);
  }

  TensorView router = act_.rows(kRouter, num_tokens);  // [T, E]
  w.router.forward(backend_, router, normed);
  Tensor router_host = Tensor::cpu(router.shape, router.dtype);
  backend_.copy(router_host.view(), router);
  std::vector<float> logits(static_cast<size_t>(router_host.numel()));
  convert_to_f32(router_host.ptr<void>(), router_host.dtype(), logits.data(), logits.size());
  const Routing routing =
      style_ == MoeStyle::kGptOss
          ? route_top_k_softmax(logits, num_tokens, num_experts, config_.num_experts_per_tok, config_.dtype)
          : route(logits, num_tokens, num_experts, config_.num_experts_per_tok, config_.norm_topk_prob, config_.dtype);
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::vector<int32_t>& rows = routing.rows[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const auto n = static_cast<int64_t>(rows.size());
    Tensor ids_host = Tensor::cpu({n}, DType::kI32), weights_host = Tensor::cpu({n}, DType::kF32);
    std::copy(rows.begin(), rows.end(), ids_host.ptr<int32_t>());
    const std::vector<float>& weights = routing.weights[static_cast<size_t>(e)];
    std::copy(weights.begin(), weights.end(), weights_host.ptr<float>());
    const TensorView ids = upload(ids_host), row_weights = upload(weights_host);
    TensorView gathered = act_.rows(kGathered, n);  // [n, H]
    TensorView expert_out = act_.rows(kExpertOut, n);
    backend_.embedding(gathered, normed, ids);      // a row gather
    swiglu(w.experts[static_cast<size_t>(e)], gathered, expert_out, kExpertGateUp, kExpertAct);
    backend_.add_rows_scaled(out, expert_out, ids, row_weights);
  }
}

}  // namespace pagellm
