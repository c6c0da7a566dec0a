// Row iteration over views whose last dimension is contiguous: a "row" is one vector of the last
// dimension, e.g. one head of one token in [T, num_heads, head_dim] (which may be a strided view
// into a fused qkv buffer).
#pragma once

#include <cstdint>

#include "core/check.h"
#include "core/tensor.h"

namespace pagellm::cpu {

struct RowLayout {
  int64_t num_rows = 0;
  int64_t row_size = 0;     // elements in the last dim
  int64_t inner_rows = 1;   // rows per outer index (dim -2 size for 3-D views)
  int64_t outer_stride = 0; // elements between outer indices
  int64_t inner_stride = 0; // elements between inner rows

  explicit RowLayout(const TensorView& v) {
    CHECK_MSG(v.ndim() >= 1 && v.ndim() <= 3, "row views are 1-3 dims, got {}", v.ndim());
    CHECK_MSG(v.strides[static_cast<size_t>(v.ndim() - 1)] == 1, "last dim must be contiguous");
    row_size = v.size(-1);
    if (v.ndim() == 1) {
      num_rows = 1;
    } else if (v.ndim() == 2) {
      num_rows = v.size(0);
      outer_stride = v.strides[0];
    } else {
      inner_rows = v.size(1);
      num_rows = v.size(0) * inner_rows;
      outer_stride = v.strides[0];
      inner_stride = v.strides[1];
    }
  }
  // Element offset of row r.
  int64_t offset(int64_t r) const {
    return (r / inner_rows) * outer_stride + (r % inner_rows) * inner_stride;
  }
};

// Reads row r of v as f32 into dst[row_size].
void load_row_f32(const TensorView& v, const RowLayout& layout, int64_t r, float* dst);
// Writes src[row_size] into row r of v, rounding to v's dtype.
void store_row_f32(TensorView v, const RowLayout& layout, int64_t r, const float* src);

}  // namespace pagellm::cpu
