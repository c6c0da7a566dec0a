// Inputs of the MoE op tests (backend.h moe_*): router logits with exact ties, token rows, stacked
// expert weights (dense or MXFP4, with or without biases), all on the host, and the per-expert
// reference the grouped ops replace: each expert's rows gathered, its own matmul / add_bias / act_mul,
// then add_rows_scaled in ascending expert order.
#pragma once

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "cuda_test_util.h"
#include "quant_test_data.h"

namespace pagellm::moe_test {

using attention_test::Rng;
using cuda_test::random_tensor;

struct MoeCase {
  int64_t tokens = 0, hidden = 64, width = 32, experts = 16, top_k = 4;
  DType dtype = DType::kBF16;
  MoeRouting routing = MoeRouting::kSoftmaxTopK;
  bool renormalize = true;
  bool mxfp4 = false, biases = false;
  Activation act = Activation::kSilu;
  Tensor logits;                    // [T, E]
  Tensor x;                         // [T, H]
  Tensor gate_up, gate_up_scales;   // [E, 2 I, H] dense (dtype) or MXFP4 blocks [E, 2 I, H / 2] + scales
  Tensor down, down_scales;         // [E, H, I]
  Tensor gate_up_bias, down_bias;   // [E, 2 I], [E, H] or undefined
  Tensor residual;                  // [T, H]: what out holds before the combine
};

// The same bytes under another shape (a copy).
inline Tensor reshaped(const Tensor& t, Shape shape) {
  Tensor out = Tensor::cpu(shape, t.dtype());
  std::memcpy(out.ptr<void>(), t.ptr<void>(), t.nbytes());
  return out;
}

// Stacked MXFP4 weight of E experts: one random [E * n, k] weight seen as [E, n, k / 2] and [E, n, k / 32].
inline void random_mxfp4_stack(int64_t experts, int64_t n, int64_t k, Rng& rng, Tensor& blocks, Tensor& scales) {
  const quant_test::Mxfp4Weight w = quant_test::random_mxfp4_weight(experts * n, k, rng);
  blocks = reshaped(w.blocks, {experts, n, k / 2});
  scales = reshaped(w.scales, {experts, n, k / kMxfp4Group});
}

// Logits with exact ties in every row (pairs of equal values), so the lower expert must win.
// experts / top_k: 0 = the family's (16 top 4; gpt-oss 8 top 2).
inline MoeCase make_case(int64_t tokens, DType dtype, bool gpt_oss, uint64_t seed, int64_t hidden = 64,
                         int64_t width = 32, int64_t experts = 0, int64_t top_k = 0) {
  MoeCase c;
  c.tokens = tokens;
  c.hidden = hidden;
  c.width = width;
  c.dtype = dtype;
  Rng rng(seed);
  if (gpt_oss) {
    c.experts = 8, c.top_k = 2, c.routing = MoeRouting::kTopKSoftmax, c.renormalize = false;
    c.mxfp4 = dtype != DType::kF16, c.biases = true, c.act = Activation::kClampedSwiglu;
  }
  if (experts > 0) c.experts = experts;
  if (top_k > 0) c.top_k = top_k;
  c.logits = random_tensor({tokens, c.experts}, dtype, rng, -4.0f, 4.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t a = rng.below(c.experts), b = rng.below(c.experts);
    attention_test::store_float(c.logits.view().data, dtype, t * c.experts + b,
                                attention_test::load_float(c.logits.view().data, dtype, t * c.experts + a));
  }
  if (tokens > 0) {  // row 0: all logits equal
    for (int64_t e = 0; e < c.experts; ++e) attention_test::store_float(c.logits.view().data, dtype, e, 0.5f);
  }
  c.x = random_tensor({tokens, c.hidden}, dtype, rng);
  const float scale = 0.25f;
  if (c.mxfp4) {
    random_mxfp4_stack(c.experts, 2 * c.width, c.hidden, rng, c.gate_up, c.gate_up_scales);
    random_mxfp4_stack(c.experts, c.hidden, c.width, rng, c.down, c.down_scales);
  } else {
    c.gate_up = random_tensor({c.experts, 2 * c.width, c.hidden}, dtype, rng, -scale, scale);
    c.down = random_tensor({c.experts, c.hidden, c.width}, dtype, rng, -scale, scale);
  }
  if (c.biases) {
    c.gate_up_bias = random_tensor({c.experts, 2 * c.width}, dtype, rng, -0.5f, 0.5f);
    c.down_bias = random_tensor({c.experts, c.hidden}, dtype, rng, -0.5f, 0.5f);
  }
  c.residual = random_tensor({tokens, c.hidden}, dtype, rng);
  return c;
}

// The routed tensors of one run of the grouped ops.
struct MoeRun {
  Tensor topk_ids, topk_weights, tile_pairs, tile_experts, act, y, out;
};

// The case's tensors on `backend` (copies, or the host tensors on the CPU).
struct MoeOperands {
  Tensor logits, x, gate_up, gate_up_scales, down, down_scales, gate_up_bias, down_bias, residual;
};

inline Tensor on(Backend& backend, const Tensor& host) {
  if (!host.defined() || backend.device() == Device::kCpu) return host;
  return cuda_test::to_device(backend, host.view());
}

// Dense expert weights in the backend's weight dtype (the CPU keeps f16 checkpoints' weights in f32).
inline Tensor weight_on(Backend& backend, const MoeCase& c, const Tensor& host) {
  if (c.mxfp4 || backend.weight_dtype(c.dtype) == host.dtype()) return on(backend, host);
  return on(backend, cuda_test::converted(host, backend.weight_dtype(c.dtype)));
}

inline MoeOperands operands(Backend& backend, const MoeCase& c) {
  return {on(backend, c.logits),         on(backend, c.x),
          weight_on(backend, c, c.gate_up), on(backend, c.gate_up_scales),
          weight_on(backend, c, c.down),    on(backend, c.down_scales),
          on(backend, c.gate_up_bias),   on(backend, c.down_bias),
          on(backend, c.residual)};
}

inline Tensor host_copy(Backend& backend, const Tensor& t) {
  if (backend.device() == Device::kCpu) return t;
  return cuda_test::to_host(backend, t.view());
}

// The whole grouped MoE on `backend`: route and group (moe_route_group, as the model calls them),
// gate_up (+ act), down, combine into a copy of the residual. Returns every intermediate on the host.
inline MoeRun run_grouped(Backend& backend, const MoeCase& c) {
  const MoeOperands o = operands(backend, c);
  const int64_t pairs = c.tokens * c.top_k, tiles = moe_max_tiles(pairs, c.experts);
  MoeRun r;
  r.topk_ids = backend.alloc({c.tokens, c.top_k}, DType::kI32);
  r.topk_weights = backend.alloc({c.tokens, c.top_k}, DType::kF32);
  r.tile_pairs = backend.alloc({tiles, kMoeTileRows}, DType::kI32);
  r.tile_experts = backend.alloc({tiles}, DType::kI32);
  r.act = backend.alloc({pairs, c.width}, c.dtype);
  r.y = backend.alloc({pairs, c.hidden}, c.dtype);
  r.out = backend.alloc({c.tokens, c.hidden}, c.dtype);
  backend.copy(r.out.view(), o.residual.view());
  backend.moe_route_group(r.topk_ids.view(), r.topk_weights.view(), r.tile_pairs.view(), r.tile_experts.view(),
                          o.logits.view(), c.routing, c.renormalize);
  const MoeExpertWeights gate_up{o.gate_up.view(), o.gate_up_scales.view(), o.gate_up_bias.view()};
  const MoeExpertWeights down{o.down.view(), o.down_scales.view(), o.down_bias.view()};
  backend.moe_expert_gemm(r.act.view(), o.x.view(), gate_up, r.tile_pairs.view(), r.tile_experts.view(), c.top_k, c.act);
  backend.moe_expert_gemm(r.y.view(), r.act.view(), down, r.tile_pairs.view(), r.tile_experts.view(), 1, std::nullopt);
  backend.moe_combine(r.out.view(), r.y.view(), r.topk_ids.view(), r.topk_weights.view(), true);
  return {host_copy(backend, r.topk_ids),   host_copy(backend, r.topk_weights), host_copy(backend, r.tile_pairs),
          host_copy(backend, r.tile_experts), host_copy(backend, r.act),         host_copy(backend, r.y),
          host_copy(backend, r.out)};
}

}  // namespace pagellm::moe_test
