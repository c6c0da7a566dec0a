// Helpers of the CUDA kernel tests: the CUDA backend when this build and machine have one (else the
// reason to skip), host <-> device transfers through the Backend interface, random tensors, and
// elementwise comparison. No CUDA headers: the tests reach the GPU through make_backend("cuda"), so
// they compile (and skip) in builds without CUDA and on machines without a GPU.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attention_test_data.h"
#include "backend/backend.h"
#include "core/dtype.h"

namespace pagellm::cuda_test {

using attention_test::load_float;
using attention_test::Rng;
using attention_test::store_float;

// The process-wide CUDA backend, or nullptr with `why` set.
inline Backend* cuda_backend_or_null(std::string* why) {
  static std::unique_ptr<Backend> backend;
  static std::string reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const std::vector<std::string> names = available_backends();
    if (std::find(names.begin(), names.end(), "cuda") == names.end()) {
      reason = "this pagellm was built without the CUDA backend";
    } else {
      auto made = make_backend("cuda");
      if (made.has_value()) backend = std::move(*made);
      else reason = made.status().message();
    }
  }
  *why = reason;
  return backend.get();
}

#define PAGELLM_GPU_OR_SKIP(var)                                               \
  std::string var##_why;                                                       \
  ::pagellm::Backend* var = ::pagellm::cuda_test::cuda_backend_or_null(&var##_why); \
  if (var == nullptr) GTEST_SKIP() << "no GPU to test on: " << var##_why

// Changes one backend's kernel options (backend/kernel_options.h) for one scope and puts back what
// it had: the tests compare a backend's alternative paths this way.
class ScopedKernelOptions {
 public:
  ScopedKernelOptions(Backend& backend, const std::function<void(KernelOptions&)>& change)
      : backend_(backend), old_(backend.kernel_options()) {
    KernelOptions options = old_;
    change(options);
    backend_.set_kernel_options(options);
  }
  ~ScopedKernelOptions() { backend_.set_kernel_options(old_); }
  ScopedKernelOptions(const ScopedKernelOptions&) = delete;
  ScopedKernelOptions& operator=(const ScopedKernelOptions&) = delete;

 private:
  Backend& backend_;
  KernelOptions old_;
};

// Microseconds per call of `product` on the GPU: `warmup` calls, then the mean of `iterations`
// (the device synchronised before and after the timed calls). For the printed microbenchmarks.
inline double time_us(Backend& gpu, const std::function<void()>& product, int warmup, int iterations) {
  for (int i = 0; i < warmup; ++i) product();
  gpu.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) product();
  gpu.synchronize();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iterations;
}

inline Tensor to_device(Backend& gpu, const TensorView& host) {
  Tensor t = gpu.alloc(host.shape, host.dtype);
  gpu.copy(t.view(), host);
  return t;
}

inline Tensor to_host(Backend& gpu, const TensorView& device) {
  Tensor t = Tensor::cpu(device.shape, device.dtype);
  gpu.copy(t.view(), device);
  return t;
}

// Uniform values in [lo, hi), rounded to the tensor's dtype.
inline Tensor random_tensor(Shape shape, DType dtype, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::cpu(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) store_float(t.view().data, dtype, i, rng.uniform(lo, hi));
  return t;
}

// The same values in another dtype (exact when widening).
inline Tensor converted(const Tensor& t, DType dtype) {
  Tensor out = Tensor::cpu(t.shape(), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) store_float(out.view().data, dtype, i, load_float(t.view().data, t.dtype(), i));
  return out;
}

// |got - want| <= rel * |want| + abs elementwise (NaN fails); "" or the worst element.
inline std::string compare_tensors(const Tensor& want, const Tensor& got, double rel, double abs) {
  if (want.numel() != got.numel()) return fmt::format("numel {} vs {}", want.numel(), got.numel());
  auto want_at = [&](int64_t i) { return static_cast<double>(load_float(want.view().data, want.dtype(), i)); };
  auto got_at = [&](int64_t i) { return static_cast<double>(load_float(got.view().data, got.dtype(), i)); };
  const attention_test::Violations v = attention_test::find_violations(
      want.numel(), [&](int64_t i) { return std::fabs(got_at(i) - want_at(i)); },
      [&](int64_t i) { return rel * std::fabs(want_at(i)) + abs; });
  if (v.count == 0) return "";
  const int64_t worst = v.worst;
  return fmt::format("{} of {} elements differ; worst at {}: want {} got {}", v.count, want.numel(), worst,
                     load_float(want.view().data, want.dtype(), worst), load_float(got.view().data, got.dtype(), worst));
}

// Tolerances of one op's output, CUDA vs CPU: f32 near-exact; bf16 n ulps (an ulp is at most 2^-7
// each) for ops that round an intermediate, f16 likewise.
struct Tol {
  double rel, abs;
};
inline Tol ulps(DType dtype, int n, double abs = 1e-6) {
  switch (dtype) {
    case DType::kBF16: return {n * 0x1.0p-7, abs};
    case DType::kF16: return {n * 0x1.0p-10, abs};
    default: return {n * 2e-6, abs};
  }
}

}  // namespace pagellm::cuda_test
