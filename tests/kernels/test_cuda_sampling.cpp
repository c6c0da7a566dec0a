// The device sampler (backend/cuda/sampling.cu) against its CPU twin (sampling::draw_token, which
// is also what sample_token runs for rows without penalties: tests/unit/runner/test_sample_op.cpp
// holds the twin to sample_token exactly). Random rows at vocab 1000 and 151,936, f32 and bf16
// logits (bf16 and rounded rows make many ties), temperatures 0.3-1.5, top-k 0/1/20, top-p
// 0.5/0.9/1.0, min-p 0/0.05. A token may differ only where the CPU, given a draw or a top-p /
// min-p cut moved by 1e-5, gives the GPU's token (expf's last ulps on either side); the count of
// such rows is printed. Also: temperature-0 rows keep their id, repeated launches agree, and a row
// alone draws what it draws inside the batch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/sampling_math.h"
#include "cuda_test_util.h"

namespace pagellm::cuda_test {
namespace {

using sampling::RowParams;

struct Batch {
  int64_t vocab = 0;
  std::vector<std::vector<float>> rows;  // [R][vocab], the logits as the GPU sees them (after rounding)
  std::vector<RowParams> params;         // [R]
};

std::vector<float> random_logits(int64_t vocab, std::mt19937_64& rng, float tie_step) {
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) {
    x = normal(rng);
    if (tie_step > 0) x = std::round(x / tie_step) * tie_step;
  }
  for (int i = 0; i < 5; ++i) logits[rng() % static_cast<uint64_t>(vocab)] += 8.0f;  // a peaked head
  return logits;
}

// Every knob combination `repeats` times, plus one temperature-0 row at the end.
Batch make_batch(int64_t vocab, int repeats, std::mt19937_64& rng) {
  Batch b;
  b.vocab = vocab;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int rep = 0; rep < repeats; ++rep)
    for (float t : {0.3f, 0.7f, 1.0f, 1.5f})
      for (int k : {0, 1, 20})
        for (float p : {0.5f, 0.9f, 1.0f})
          for (float m : {0.0f, 0.05f}) {
            const size_t r = b.rows.size();
            b.rows.push_back(random_logits(vocab, rng, r % 3 == 0 ? 0.5f : 0.0f));
            b.params.push_back({t, k, p, m, uniform(rng)});
          }
  b.rows.push_back(random_logits(vocab, rng, 0.0f));
  b.params.push_back(RowParams{});  // temperature 0
  return b;
}

Tensor logits_tensor(const Batch& b, DType dtype) {
  const int64_t rows = static_cast<int64_t>(b.rows.size());
  Tensor t = Tensor::cpu({rows, b.vocab}, dtype);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < b.vocab; ++i)
      store_float(t.view().data, dtype, r * b.vocab + i, b.rows[static_cast<size_t>(r)][static_cast<size_t>(i)]);
  return t;
}

Tensor params_tensor(const std::vector<RowParams>& params) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(params.size()), static_cast<int64_t>(sizeof(RowParams))}, DType::kU8);
  std::memcpy(t.view().data, params.data(), params.size() * sizeof(RowParams));
  return t;
}

// ids the GPU draws for the batch (ids start at -7 so a row the kernel skips shows).
std::vector<int32_t> gpu_sample(Backend& gpu, const Tensor& logits, const std::vector<RowParams>& params) {
  const int64_t rows = logits.size(0);
  Tensor ids_host = Tensor::cpu({rows}, DType::kI32);
  std::fill(ids_host.ptr<int32_t>(), ids_host.ptr<int32_t>() + rows, -7);
  Tensor ids = to_device(gpu, ids_host.view());
  Tensor device_logits = to_device(gpu, logits.view());
  Tensor device_params = to_device(gpu, params_tensor(params).view());
  gpu.sample(ids.view(), device_logits.view(), device_params.view());
  Tensor out = to_host(gpu, ids.view());
  gpu.synchronize();
  return {out.ptr<int32_t>(), out.ptr<int32_t>() + rows};
}

// True when the CPU gives `token` for a draw within eps of p.uniform, with top-p and min-p moved
// by up to eps as well: the two sides then differ only in rounding at a boundary.
bool near_boundary(const std::vector<float>& row, const RowParams& p, int32_t token, double eps = 1e-5) {
  for (float dp : {0.0f, -1.0f, 1.0f})
    for (float dm : {0.0f, -1.0f, 1.0f}) {
      RowParams q = p;
      q.top_p = p.top_p >= 1.0f ? 1.0f : std::min(1.0f, p.top_p + dp * static_cast<float>(eps));
      q.min_p = p.min_p * (1.0f + dm * static_cast<float>(eps));
      q.uniform = std::max(0.0, p.uniform - eps);
      const int32_t lo = sampling::draw_token(row.data(), static_cast<int64_t>(row.size()), q);
      q.uniform = std::min(1.0 - 1e-12, p.uniform + eps);
      const int32_t hi = sampling::draw_token(row.data(), static_cast<int64_t>(row.size()), q);
      if (lo <= token && token <= hi) return true;
    }
  return false;
}

void expect_matches_cpu(Backend& gpu, int64_t vocab, int repeats, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b = make_batch(vocab, repeats, rng);
  const Tensor logits = logits_tensor(b, dtype);
  for (size_t r = 0; r < b.rows.size(); ++r)  // what the device reads, in f32
    for (int64_t i = 0; i < vocab; ++i) b.rows[r][static_cast<size_t>(i)] = load_float(logits.view().data, dtype, static_cast<int64_t>(r) * vocab + i);
  const std::vector<int32_t> got = gpu_sample(gpu, logits, b.params);
  const size_t rows = b.rows.size();
  EXPECT_EQ(got[rows - 1], -7) << "the temperature-0 row must keep its id";
  int near = 0;
  for (size_t r = 0; r + 1 < rows; ++r) {
    const RowParams& p = b.params[r];
    const int32_t want = sampling::draw_token(b.rows[r].data(), vocab, p);
    if (got[r] == want) continue;
    if (near_boundary(b.rows[r], p, got[r])) {
      ++near;
      continue;
    }
    ADD_FAILURE() << "vocab " << vocab << " " << dtype_name(dtype) << " row " << r << " (t " << p.temperature
                  << " k " << p.top_k << " p " << p.top_p << " min_p " << p.min_p << " u " << p.uniform
                  << "): GPU " << got[r] << ", CPU " << want;
  }
  std::printf("vocab %lld %s: %d of %zu rows differ from the CPU twin, each within 1e-5 of a boundary\n",
              static_cast<long long>(vocab), std::string(dtype_name(dtype)).c_str(), near, rows - 1);
  EXPECT_EQ(gpu_sample(gpu, logits, b.params), got) << "a second launch drew other tokens";

  // A row alone draws what it drew in the batch (one block per row, integer sums).
  for (size_t r : {size_t{0}, size_t{5}, rows / 2, rows - 2}) {
    Batch one;
    one.vocab = vocab;
    one.rows = {b.rows[r]};
    one.params = {b.params[r]};
    EXPECT_EQ(gpu_sample(gpu, logits_tensor(one, DType::kF32), one.params)[0], got[r]) << "row " << r << " alone";
  }
}

TEST(CudaSampling, SmallVocabMatchesTheCpuTwin) {
  PAGELLM_GPU_OR_SKIP(gpu);
  expect_matches_cpu(*gpu, 1000, 20, DType::kF32, 1);
  expect_matches_cpu(*gpu, 1000, 10, DType::kBF16, 2);
}

TEST(CudaSampling, QwenVocabMatchesTheCpuTwin) {
  PAGELLM_GPU_OR_SKIP(gpu);
  expect_matches_cpu(*gpu, 151936, 2, DType::kF32, 3);
  expect_matches_cpu(*gpu, 151936, 1, DType::kBF16, 4);
}

TEST(CudaSampling, AllTiedRowKeepsTheLowestIdsUnderTopK) {
  PAGELLM_GPU_OR_SKIP(gpu);
  // Every logit equal: top-k 20 keeps ids 0..19 and top-p 0.5 of those ids 0..9.
  const int64_t vocab = 151936;
  Batch b;
  b.vocab = vocab;
  for (double u : {0.0, 0.31, 0.77, 0.999}) {
    b.rows.push_back(std::vector<float>(static_cast<size_t>(vocab), 1.25f));
    b.params.push_back({1.0f, 20, 1.0f, 0.0f, u});
    b.rows.push_back(std::vector<float>(static_cast<size_t>(vocab), 1.25f));
    b.params.push_back({1.0f, 20, 0.5f, 0.0f, u});
  }
  const std::vector<int32_t> got = gpu_sample(*gpu, logits_tensor(b, DType::kF32), b.params);
  for (size_t r = 0; r < got.size(); ++r)
    EXPECT_EQ(got[r], sampling::draw_token(b.rows[r].data(), vocab, b.params[r])) << "row " << r;
}

}  // namespace
}  // namespace pagellm::cuda_test
