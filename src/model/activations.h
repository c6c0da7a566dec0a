// Activations: grow-only scratch buffers of a model forward, sized in tokens, so the step loop does
// not allocate once the largest batch has been seen. On a device (not the CPU) an outgrown buffer
// stays allocated: a graph captured from an earlier, smaller forward still reads and writes it.
#pragma once

#include <vector>

#include "backend/backend.h"

namespace pagellm {

class Activations {
 public:
  Activations(Backend& backend, DType dtype) : backend_(backend), dtype_(dtype) {}
  // Declares buffer `index` as [rows, width]; call once per buffer before use.
  void define(size_t index, int64_t width);
  // Rows [0, rows) of buffer `index`, reallocated (bigger) when it holds fewer rows.
  TensorView rows(size_t index, int64_t rows);

 private:
  struct Buffer {
    int64_t width = 0;
    Tensor tensor;
  };
  Backend& backend_;
  DType dtype_;
  std::vector<Buffer> buffers_;
  std::vector<Tensor> retired_;  // outgrown device buffers (see above)
};

// [T, num_heads, head_dim] view of columns [first_col, first_col + num_heads * head_dim) of a
// row-major [T, C] buffer: how q, k and v are read out of a fused qkv projection without a copy.
TensorView head_columns(const TensorView& rows_2d, int64_t first_col, int64_t num_heads, int64_t head_dim);

}  // namespace pagellm
