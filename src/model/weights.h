// WeightLoader: checkpoint tensors -> backend tensors in the backend's weight dtype, with the
// shape checks that turn a wrong checkpoint into a one-line error, and row-concatenation for fused
// weights (q|k|v, gate|up) so each layer launches few GEMMs.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/safetensors.h"

namespace pagellm {

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& checkpoint, Backend& backend, DType weight_dtype)
      : checkpoint_(checkpoint), backend_(backend), weight_dtype_(weight_dtype) {}

  // The tensor `name` with exactly `shape`.
  Expected<Tensor> load(const std::string& name, const std::vector<int64_t>& shape);
  // Tensors stacked along dim 0 (each [rows_i, cols]) into one [sum rows_i, cols].
  Expected<Tensor> load_rows(const std::vector<std::string>& names,
                             const std::vector<std::vector<int64_t>>& shapes);
  bool has(const std::string& name) const { return checkpoint_.find(name) != nullptr; }
  // A small host f32 vector (e.g. a per-head parameter the model reads on the host).
  Expected<std::vector<float>> load_host_f32(const std::string& name, const std::vector<int64_t>& shape);

 private:
  const Checkpoint& checkpoint_;
  Backend& backend_;
  DType weight_dtype_;
};

}  // namespace pagellm
