// RmsNorm: a norm weight with its form (w·x or (1+w)·x) and epsilon, so a block applies it without
// knowing which family it belongs to.
#pragma once

#include <string>

#include "backend/backend.h"
#include "model/weights.h"

namespace pagellm::layers {

struct RmsNorm {
  Tensor weight;  // [D]
  NormWeight mode = NormWeight::kPlain;
  float eps = 1e-6f;

  bool defined() const { return weight.defined(); }
  // out[rows, D] = rms_norm(x[rows, D]); out may be x.
  void forward(Backend& backend, TensorView out, const TensorView& x) const {
    backend.rms_norm(out, x, weight, eps, mode);
  }
  // hidden += delta, then normed = rms_norm(hidden): a residual add fused with the next norm.
  void add_forward(Backend& backend, TensorView hidden, TensorView normed, const TensorView& delta) const {
    backend.add_rms_norm(hidden, normed, delta, weight, eps, mode);
  }
};

inline Expected<RmsNorm> load_rms_norm(WeightLoader& loader, const std::string& name, int64_t size, NormWeight mode,
                                       float eps) {
  RmsNorm norm{Tensor(), mode, eps};
  PAGELLM_ASSIGN_OR_RETURN(norm.weight, loader.load(name, {size}));
  return norm;
}

}  // namespace pagellm::layers
