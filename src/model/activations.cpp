#include "model/activations.h"

#include <algorithm>

namespace pagellm {

void Activations::define(size_t index, int64_t width) {
  if (buffers_.size() <= index) buffers_.resize(index + 1);
  buffers_[index].width = width;
}

TensorView Activations::rows(size_t index, int64_t rows) {
  CHECK(index < buffers_.size() && buffers_[index].width > 0);
  Buffer& buffer = buffers_[index];
  if (!buffer.tensor.defined() || buffer.tensor.size(0) < rows) {
    const int64_t capacity = std::max<int64_t>(rows, buffer.tensor.defined() ? buffer.tensor.size(0) * 2 : 16);
    if (buffer.tensor.defined() && backend_.device() != Device::kCpu) retired_.push_back(std::move(buffer.tensor));
    buffer.tensor = backend_.alloc({capacity, buffer.width}, dtype_);
  }
  return buffer.tensor.view().slice_rows(0, rows);
}

TensorView head_columns(const TensorView& rows_2d, int64_t first_col, int64_t num_heads, int64_t head_dim) {
  CHECK(rows_2d.ndim() == 2 && rows_2d.strides[1] == 1);
  CHECK(first_col + num_heads * head_dim <= rows_2d.size(1));
  TensorView view = rows_2d;
  view.data = static_cast<char*>(rows_2d.data) + static_cast<size_t>(first_col) * dtype_size_bytes(rows_2d.dtype);
  view.shape = Shape{rows_2d.size(0), num_heads, head_dim};
  view.strides = {rows_2d.strides[0], head_dim, 1, 0};
  return view;
}

}  // namespace pagellm
