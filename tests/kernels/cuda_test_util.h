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

// A device tensor of pseudo-random bytes (each AND-ed with byte_mask) or, for f32, values in
// [lo, lo + 2^-8): content for timing only, made without an f32 dequantization on the host.
inline Tensor bench_tensor(Backend& gpu, Shape shape, DType dtype, uint64_t seed, uint8_t byte_mask = 0xff,
                           float lo = 0.0f) {
  Tensor host = Tensor::cpu(shape, dtype);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next_byte = [&state] { return static_cast<uint8_t>((state = state * 6364136223846793005ull + 1) >> 56); };
  if (dtype == DType::kF32) {
    float* p = host.view().ptr<float>();
    for (int64_t i = 0; i < host.numel(); ++i) p[i] = lo + static_cast<float>(next_byte()) * 0x1.0p-16f;
  } else {
    uint8_t* p = static_cast<uint8_t*>(host.view().data);
    for (size_t i = 0; i < host.nbytes(); ++i) p[i] = next_byte() & byte_mask;
  }
  return to_device(gpu, host.view());
}

// Copies of one weight (its format's tensors) that together outgrow the L2 (50 MB on an H100): a
// decode step reads each layer's weight once, so a benchmark replaying one copy would time the L2.
// min_count: at least this many (a product that reads a part of each copy, as an MoE step its experts).
inline std::vector<std::vector<Tensor>> bench_copies(Backend& gpu, const std::vector<Tensor>& one,
                                                     size_t min_count = 2) {
  size_t bytes = 0;
  for (const Tensor& t : one) bytes += t.nbytes();
  const size_t count = std::max<size_t>(min_count, (size_t{256} << 20) / bytes + 1);
  std::vector<std::vector<Tensor>> copies(count);
  for (auto& copy : copies)
    for (const Tensor& t : one) {
      copy.push_back(gpu.alloc(t.shape(), t.dtype()));
      gpu.copy(copy.back().view(), t.view());
    }
  return copies;
}

// us per product: every copy once per round, 4 rounds recorded in one graph (no launch gaps of the
// host), the graph replayed 10 times after a warm-up.
inline double graph_us(Backend& gpu, const std::vector<std::vector<Tensor>>& copies,
                const std::function<void(const std::vector<Tensor>&)>& product) {
  constexpr int kRounds = 4, kReplays = 10;
  product(copies.front());  // grows a path's workspace (dequantization, W8A8) outside the capture
  const std::unique_ptr<OpGraph> graph = gpu.capture([&] {
    for (int r = 0; r < kRounds; ++r)
      for (const auto& copy : copies) product(copy);
  });
  if (!graph) return 0.0;
  graph->replay();
  gpu.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kReplays; ++i) graph->replay();
  gpu.synchronize();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return us / (kReplays * kRounds * static_cast<double>(copies.size()));
}

}  // namespace pagellm::cuda_test
