// GatedMlp: down(act(gate(x)) * up(x)) with the activation as a parameter (SiLU: Llama, Qwen;
// GELU-tanh: Gemma). gate and up are one fused Linear (rows gate | up).
#pragma once

#include <string>

#include "model/activations.h"
#include "model/layers/linear.h"

namespace pagellm::layers {

struct MlpWeights {
  Linear gate_up;  // [2 I, H]  rows: gate | up
  Linear down;     // [H, I]
  Activation activation = Activation::kSilu;
};

// prefix.gate_proj / up_proj / down_proj (+ .bias each when with_bias). A tensor-parallel shard keeps
// its columns intermediate_shard(...) of gate and up and the same columns of down's input, so its
// output is a partial sum over the ranks.
Expected<MlpWeights> load_gated_mlp(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                                    int64_t intermediate, Activation activation, bool with_bias);
// The intermediate columns rank `rank` of `size` computes.
ShardRange intermediate_shard(int64_t intermediate, int rank, int size);
// A hidden_act / hidden_activation name of config.json; unknown names are an error naming the field.
Expected<Activation> parse_activation(const std::string& name);

// One object serves every layer (its scratch buffers are reused).
class GatedMlp {
 public:
  GatedMlp(Backend& backend, DType dtype, int64_t intermediate);
  // out[T, H] = mlp(normed[T, H]).
  void forward(const MlpWeights& weights, const TensorView& normed, TensorView out);

 private:
  Backend& backend_;
  Activations act_;
};

}  // namespace pagellm::layers
