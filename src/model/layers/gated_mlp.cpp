#include "model/layers/gated_mlp.h"

#include <algorithm>

namespace pagellm::layers {

namespace {
enum Buffer : size_t { kGateUp, kAct };
}  // namespace

Expected<MlpWeights> load_gated_mlp(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                                    int64_t intermediate, Activation activation, bool with_bias) {
  MlpWeights w;
  w.activation = activation;
  const ShardRange mine = intermediate_shard(intermediate, loader.tp_rank(), loader.tp_size());
  PAGELLM_ASSIGN_OR_RETURN(w.gate_up, load_linear(loader, {shard_rows(loader, prefix + "gate_proj", intermediate, mine),
                                                           shard_rows(loader, prefix + "up_proj", intermediate, mine)},
                                                  hidden, with_bias));
  PAGELLM_ASSIGN_OR_RETURN(w.down, load_linear(loader, {{prefix + "down_proj", hidden}}, intermediate, with_bias,
                                               shard_columns(loader, mine)));
  return w;
}

ShardRange intermediate_shard(int64_t intermediate, int rank, int size) { return shard_range(intermediate, rank, size); }

Expected<Activation> parse_activation(const std::string& name) {
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_tanh") return Activation::kGeluTanh;
  return unimplemented("[config] hidden_act '{}' is not supported (silu and gelu_pytorch_tanh are)", name);
}

GatedMlp::GatedMlp(Backend& backend, DType dtype, int64_t intermediate) : backend_(backend), act_(backend, dtype) {
  act_.define(kGateUp, 2 * std::max<int64_t>(intermediate, 1));
  act_.define(kAct, std::max<int64_t>(intermediate, 1));
}

void GatedMlp::forward(const MlpWeights& w, const TensorView& normed, TensorView out) {
  const int64_t num_tokens = normed.size(0);
  TensorView gate_up = act_.rows(kGateUp, num_tokens);  // [T, 2 I]
  TensorView act = act_.rows(kAct, num_tokens);         // [T, I]
  w.gate_up.forward(backend_, gate_up, normed);
  backend_.act_mul(act, gate_up, w.activation);
  w.down.forward(backend_, out, act);
}

}  // namespace pagellm::layers
