#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include <fmt/format.h>

namespace pagellm {

namespace {
constexpr size_t kLazyZeroBytes = size_t{1} << 24;
}  // namespace

std::string_view device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

Shape::Shape(std::initializer_list<int64_t> list) {
  CHECK_MSG(list.size() <= kMaxDims, "at most {} dims", kMaxDims);
  for (int64_t d : list) dims[static_cast<size_t>(ndim++)] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim != other.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[static_cast<size_t>(i)] != other.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string out = "[";
  for (int i = 0; i < ndim; ++i) out += fmt::format("{}{}", i ? ", " : "", dims[static_cast<size_t>(i)]);
  return out + "]";
}

TensorView::TensorView(void* data_in, Shape shape_in, DType dtype_in, Device device_in)
    : data(data_in), shape(shape_in), dtype(dtype_in), device(device_in) {
  int64_t stride = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    strides[static_cast<size_t>(i)] = stride;
    stride *= shape[i];
  }
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int i = shape.ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[static_cast<size_t>(i)] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

TensorView TensorView::slice_rows(int64_t begin, int64_t end) const {
  CHECK(begin >= 0 && begin <= end && end <= shape[0]);
  TensorView out = *this;
  out.shape[0] = end - begin;
  out.data = static_cast<char*>(data) + static_cast<size_t>(begin * strides[0]) * dtype_size_bytes(dtype);
  return out;
}

TensorView TensorView::reshape(Shape new_shape) const {
  CHECK_MSG(is_contiguous(), "reshape of a non-contiguous view");
  CHECK_MSG(new_shape.numel() == numel(), "reshape {} -> {}", shape.to_string(), new_shape.to_string());
  return TensorView(data, new_shape, dtype, device);
}

Tensor Tensor::cpu(Shape shape, DType dtype) {
  const size_t nbytes = static_cast<size_t>(shape.numel()) * dtype_size_bytes(dtype);
  if (nbytes >= kLazyZeroBytes) {
    // Big buffers (KV caches) come from anonymous mappings: zero pages arrive on first touch, so
    // start-up does not spend seconds clearing memory that may never be used.
    void* memory = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK_MSG(memory != MAP_FAILED, "out of host memory mapping {} bytes", nbytes);
    std::shared_ptr<void> owner(memory, [nbytes](void* p) { munmap(p, nbytes); });
    return Tensor(TensorView(memory, shape, dtype, Device::kCpu), std::move(owner));
  }
  const size_t aligned = (nbytes + 63) / 64 * 64;
  void* memory = std::aligned_alloc(64, aligned == 0 ? 64 : aligned);
  CHECK_MSG(memory != nullptr, "out of host memory allocating {} bytes", nbytes);
  std::memset(memory, 0, aligned == 0 ? 64 : aligned);
  std::shared_ptr<void> owner(memory, [](void* p) { std::free(p); });
  return Tensor(TensorView(memory, shape, dtype, Device::kCpu), std::move(owner));
}

}  // namespace pagellm
