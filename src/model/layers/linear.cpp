#include "model/layers/linear.h"

namespace pagellm::layers {

void Linear::forward(Backend& backend, TensorView out, const TensorView& x) const {
  backend.matmul(out, x, weight);
  if (bias.defined()) backend.add_bias(out, bias);
}

Expected<Linear> load_linear(WeightLoader& loader, const std::vector<LinearPart>& parts, int64_t in_features,
                             bool with_bias) {
  std::vector<std::string> weight_names, bias_names;
  std::vector<std::vector<int64_t>> weight_shapes, bias_shapes;
  for (const LinearPart& part : parts) {
    weight_names.push_back(part.prefix + ".weight");
    weight_shapes.push_back({part.out_features, in_features});
    bias_names.push_back(part.prefix + ".bias");
    bias_shapes.push_back({part.out_features});
  }
  Linear linear;
  PAGELLM_ASSIGN_OR_RETURN(linear.weight, loader.load_rows(weight_names, weight_shapes));
  if (with_bias) {
    PAGELLM_ASSIGN_OR_RETURN(linear.bias, loader.load_rows(bias_names, bias_shapes));
  }
  return linear;
}

}  // namespace pagellm::layers
