// Linear: y = x W^T (+ b), the one home of a projection's weights. Fused projections (q|k|v,
// gate|up) are one Linear whose rows stack the checkpoint's tensors, so each layer launches few
// GEMMs. Quantized formats and tensor-parallel shards change this struct and its loader, not the
// model files.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/weights.h"

namespace pagellm::layers {

struct Linear {
  Tensor weight;  // [out_features, in_features], the backend's weight dtype
  Tensor bias;    // [out_features], or undefined when the projection has none

  int64_t out_features() const { return weight.size(0); }
  // out[T, out_features] = x[T, in_features] . W^T (+ bias)
  void forward(Backend& backend, TensorView out, const TensorView& x) const;
};

// One part of a (possibly fused) projection: checkpoint prefix ("model.layers.0.self_attn.q_proj")
// and its number of output rows.
struct LinearPart {
  std::string prefix;
  int64_t out_features = 0;
};

// Loads prefix.weight of each part stacked by rows ([sum out, in_features]), and prefix.bias of each
// part when with_bias.
Expected<Linear> load_linear(WeightLoader& loader, const std::vector<LinearPart>& parts, int64_t in_features,
                             bool with_bias);

}  // namespace pagellm::layers
