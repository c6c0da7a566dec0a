// WeightLoader: checkpoint tensors -> backend tensors in the backend's weight dtype, with the
// shape checks that turn a wrong checkpoint into a one-line error, and row-concatenation for fused
// weights (q|k|v, gate|up) so each layer launches few GEMMs.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

namespace pagellm {

// The block of a 2-D checkpoint tensor that a tensor-parallel rank keeps: rows [row_begin, row_begin +
// row_count) and columns [col_begin, col_begin + col_count); a count of -1 runs to the end.
struct TensorSlice {
  int64_t row_begin = 0, row_count = -1;
  int64_t col_begin = 0, col_count = -1;
  bool is_whole() const { return row_begin == 0 && row_count < 0 && col_begin == 0 && col_count < 0; }
};

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& checkpoint, Backend& backend, DType weight_dtype,
               QuantConfig quantization = {})
      : checkpoint_(checkpoint), backend_(backend), weight_dtype_(weight_dtype),
        quantization_(std::move(quantization)) {}

  Backend& backend() { return backend_; }
  DType weight_dtype() const { return weight_dtype_; }
  // The checkpoint's quantization_config (layers::load_linear reads quantized projections by it).
  const QuantConfig& quantization() const { return quantization_; }
  // The checkpoint's tensor as stored (any dtype), with exactly `shape`.
  Expected<const TensorInfo*> raw(const std::string& name, const std::vector<int64_t>& shape) const {
    return checkpoint_.get(name, shape);
  }
  const TensorInfo* find(const std::string& name) const { return checkpoint_.find(name); }
  // A host tensor on this backend's device (CPU: moved as it is).
  Tensor upload(Tensor host);

  // The tensor `name` with exactly `shape`.
  Expected<Tensor> load(const std::string& name, const std::vector<int64_t>& shape);
  // Tensors stacked along dim 0 (each [rows_i, cols]) into one [sum rows_i, cols]; with `slices`
  // (one per name, 2-D tensors), only each tensor's slice is read and stacked.
  Expected<Tensor> load_rows(const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
                             const std::vector<TensorSlice>& slices = {});
  // Tensor parallelism: this rank and the group's size (0 and 1 without tensor parallelism).
  int tp_rank() const { return backend_.tensor_parallel_rank(); }
  int tp_size() const { return backend_.tensor_parallel_size(); }
  bool has(const std::string& name) const { return checkpoint_.find(name) != nullptr; }
  // A small host f32 vector (e.g. a per-head parameter the model reads on the host).
  Expected<std::vector<float>> load_host_f32(const std::string& name, const std::vector<int64_t>& shape);

 private:
  const Checkpoint& checkpoint_;
  Backend& backend_;
  DType weight_dtype_;
  QuantConfig quantization_;
};

}  // namespace pagellm
