// Tensor (owns its memory) and TensorView (borrows it): shape, strides in elements, dtype, device.
// Ops take views; only allocators hand out Tensors.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace pagellm {

enum class Device : uint8_t { kCpu, kCuda };
std::string_view device_name(Device device);

inline constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> list);
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  std::string to_string() const;  // "[2, 3]"
};

struct TensorView {
  void* data = nullptr;
  Shape shape;
  std::array<int64_t, kMaxDims> strides{};  // in elements
  DType dtype = DType::kF32;
  Device device = Device::kCpu;

  TensorView() = default;
  // A contiguous (row-major) view of `data`.
  TensorView(void* data, Shape shape, DType dtype, Device device = Device::kCpu);

  int ndim() const { return shape.ndim; }
  int64_t size(int dim) const { return shape[dim < 0 ? dim + shape.ndim : dim]; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size_bytes(dtype); }
  bool is_contiguous() const;

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  // Rows [begin, end) of dimension 0.
  TensorView slice_rows(int64_t begin, int64_t end) const;
  // The same contiguous memory seen with another shape of equal numel.
  TensorView reshape(Shape new_shape) const;
};

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled host tensor.
  static Tensor cpu(Shape shape, DType dtype);
  // Wraps memory owned elsewhere; `owner` keeps it alive (e.g. an mmap, a device allocation).
  Tensor(TensorView view, std::shared_ptr<void> owner) : view_(view), owner_(std::move(owner)) {}

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }
  bool defined() const { return view_.data != nullptr; }
  const Shape& shape() const { return view_.shape; }
  int64_t size(int dim) const { return view_.size(dim); }
  int64_t numel() const { return view_.numel(); }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  size_t nbytes() const { return view_.nbytes(); }
  template <typename T>
  T* ptr() const { return view_.ptr<T>(); }

 private:
  TensorView view_;
  std::shared_ptr<void> owner_;
};

}  // namespace pagellm
