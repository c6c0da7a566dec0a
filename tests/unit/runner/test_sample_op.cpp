// Backend::sample's CPU twin (backend/sampling_math.cpp) against sample_token, the host sampler the
// runner keeps for rows with penalties or logprobs: both must give the same token for every row
// without those (they share sampling::draw_token, and this test keeps it that way). draw_token is
// also checked against a naive reference (full sort, f64 probabilities) to pin down its rules;
// that one may differ only where f64 and the f32 / fixed-point weights fall on different sides of
// a boundary (a draw or a top-p / min-p cut within 1e-5 of the total).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/sampling_math.h"
#include "core/dtype.h"
#include "runner/sampler.h"

namespace pagellm {
namespace {

using sampling::RowParams;

// Logits like a model's: a few likely tokens over a long tail; `tie_step` > 0 rounds them to a
// grid so many tokens tie.
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

struct Knobs {
  float temperature;
  int top_k;
  float top_p, min_p;
};

std::vector<Knobs> knob_grid() {
  std::vector<Knobs> grid;
  for (float t : {0.3f, 0.7f, 1.0f, 1.5f})
    for (int k : {0, 1, 20})
      for (float p : {0.5f, 0.9f, 1.0f})
        for (float m : {0.0f, 0.05f}) grid.push_back({t, k, p, m});
  return grid;
}

SamplingParams sampling_params(const Knobs& k) {
  SamplingParams p;
  p.temperature = k.temperature;
  p.top_k = k.top_k;
  p.top_p = k.top_p;
  p.min_p = k.min_p;
  return p;
}

RowParams row_params(const Knobs& k, double uniform) {
  RowParams r;
  r.temperature = k.temperature;
  r.top_k = k.top_k;
  r.top_p = k.top_p;
  r.min_p = k.min_p;
  r.uniform = uniform;
  return r;
}

// The rules of sampling_math.h written the slow, obvious way, in f64: full rank sort, top-k,
// top-p over the renormalised top-k, min-p against the max, then an id-order walk.
int32_t naive_draw(const std::vector<float>& logits, const RowParams& p) {
  const size_t v = logits.size();
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> w(v);
  for (size_t i = 0; i < v; ++i) w[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / p.temperature);
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t n = p.top_k > 0 ? std::min<size_t>(v, static_cast<size_t>(p.top_k)) : v;
  if (p.top_p < 1.0f) {
    double total = 0;
    for (size_t j = 0; j < n; ++j) total += w[order[j]];
    double cumulative = 0;
    size_t j = 0;
    while (j < n && cumulative < p.top_p * total) cumulative += w[order[j++]];
    n = j;
  }
  std::vector<bool> kept(v, false);
  double total = 0;
  for (size_t j = 0; j < n; ++j)
    if (w[order[j]] >= p.min_p) {
      kept[order[j]] = true;
      total += w[order[j]];
    }
  double target = p.uniform * total;
  int32_t last = 0;
  for (size_t i = 0; i < v; ++i) {
    if (!kept[i]) continue;
    last = static_cast<int32_t>(i);
    target -= w[i];
    if (target < 0) return last;
  }
  return last;
}

// True when `token` is what `draw` gives for some draw within eps of the total around p.uniform,
// with top-p and min-p also moved by up to eps: the two samplers then disagree only on rounding.
template <typename DrawFn>
bool near_boundary(const DrawFn& draw, const RowParams& p, int32_t token, double eps = 1e-5) {
  for (float dp : {0.0f, -1.0f, 1.0f})
    for (float dm : {0.0f, -1.0f, 1.0f}) {
      RowParams q = p;
      q.top_p = std::min(1.0f, p.top_p + dp * static_cast<float>(eps));
      if (p.top_p >= 1.0f) q.top_p = 1.0f;
      q.min_p = p.min_p > 0 ? p.min_p * (1.0f + dm * static_cast<float>(eps)) : 0.0f;
      q.uniform = std::max(0.0, p.uniform - eps);
      const int32_t lo = draw(q);
      q.uniform = std::min(1.0 - 1e-12, p.uniform + eps);
      const int32_t hi = draw(q);
      if (lo <= token && token <= hi) return true;
    }
  return false;
}

TEST(SampleOp, CpuTwinGivesSampleTokensTokens) {
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  std::mt19937_64 rng(7);
  const std::vector<Knobs> grid = knob_grid();
  for (int64_t vocab : {1000, 151936}) {
    const int64_t rows = static_cast<int64_t>(grid.size()) + 1;  // + one greedy row left untouched
    Tensor logits = Tensor::cpu({rows, vocab}, DType::kF32);
    Tensor params = Tensor::cpu({rows, static_cast<int64_t>(sizeof(RowParams))}, DType::kU8);
    Tensor ids = Tensor::cpu({rows}, DType::kI32);
    std::vector<std::vector<float>> row_logits;
    for (int64_t r = 0; r < rows; ++r) {
      row_logits.push_back(random_logits(vocab, rng, r % 3 == 0 ? 0.5f : 0.0f));
      std::copy(row_logits.back().begin(), row_logits.back().end(), logits.ptr<float>() + r * vocab);
      RowParams p;  // temperature 0 for the last row
      if (r < static_cast<int64_t>(grid.size())) p = row_params(grid[static_cast<size_t>(r)], 0.0);
      std::memcpy(params.ptr<char>() + r * sizeof(RowParams), &p, sizeof p);
      ids.ptr<int32_t>()[r] = -7;
    }
    for (int counter : {0, 1, 17}) {
      // The uniform is counter_uniform(seed, counter), as the runner computes it.
      for (int64_t r = 0; r + 1 < rows; ++r) {
        RowParams p = row_params(grid[static_cast<size_t>(r)], counter_uniform(1000 + r, counter));
        std::memcpy(params.ptr<char>() + r * sizeof(RowParams), &p, sizeof p);
      }
      (*backend)->sample(ids.view(), logits.view(), params.view());
      EXPECT_EQ(ids.ptr<int32_t>()[rows - 1], -7) << "a temperature-0 row must keep its id";
      for (int64_t r = 0; r + 1 < rows; ++r) {
        const SamplingParams sp = sampling_params(grid[static_cast<size_t>(r)]);
        SampleInputs in;
        in.logits = row_logits[static_cast<size_t>(r)];
        in.params = &sp;
        in.num_output_tokens = counter;
        in.seed = static_cast<uint64_t>(1000 + r);
        EXPECT_EQ(ids.ptr<int32_t>()[r], sample_token(in).token_id) << "vocab " << vocab << " row " << r;
      }
    }
  }
}

TEST(SampleOp, CpuTwinReadsBf16Logits) {
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  std::mt19937_64 rng(11);
  const int64_t vocab = 5000;
  std::vector<float> row = random_logits(vocab, rng, 0.0f);
  Tensor logits = Tensor::cpu({1, vocab}, DType::kBF16);
  for (int64_t i = 0; i < vocab; ++i) {
    logits.ptr<uint16_t>()[i] = f32_to_bf16_bits(row[static_cast<size_t>(i)]);
    convert_to_f32(logits.ptr<uint16_t>() + i, DType::kBF16, &row[static_cast<size_t>(i)], 1);
  }
  const RowParams p = row_params({0.8f, 0, 0.9f, 0.0f}, 0.37);
  Tensor params = Tensor::cpu({1, static_cast<int64_t>(sizeof p)}, DType::kU8);
  std::memcpy(params.ptr<char>(), &p, sizeof p);
  Tensor ids = Tensor::cpu({1}, DType::kI32);
  (*backend)->sample(ids.view(), logits.view(), params.view());
  EXPECT_EQ(ids.ptr<int32_t>()[0], sampling::draw_token(row.data(), vocab, p));
}

TEST(SampleOp, DrawTokenFollowsTheNaiveRules) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::vector<Knobs> grid = knob_grid();
  int mismatches = 0, unexplained = 0, draws = 0;
  for (int64_t vocab : {1000, 151936}) {
    const int repeats = vocab == 1000 ? 20 : 1;
    for (int rep = 0; rep < repeats; ++rep)
      for (const Knobs& k : grid) {
        const std::vector<float> logits = random_logits(vocab, rng, rep % 3 == 0 ? 0.5f : 0.0f);
        const RowParams p = row_params(k, uniform(rng));
        const int32_t got = sampling::draw_token(logits.data(), vocab, p);
        const int32_t want = naive_draw(logits, p);
        ++draws;
        if (got == want) continue;
        ++mismatches;
        if (!near_boundary([&](const RowParams& q) { return naive_draw(logits, q); }, p, got)) {
          ++unexplained;
          ADD_FAILURE() << "vocab " << vocab << " t " << k.temperature << " k " << k.top_k << " p " << k.top_p
                        << " min_p " << k.min_p << " u " << p.uniform << ": draw_token " << got << ", naive "
                        << want;
        }
      }
  }
  std::printf("draw_token vs naive f64 reference: %d of %d draws differ, all within 1e-5 of a boundary\n",
              mismatches, draws);
  EXPECT_EQ(unexplained, 0);
}

TEST(SampleOp, TopKTiesKeepTheLowerIds) {
  // Ten tokens tie for the max; top-k 3 keeps ids 0, 1, 2 of them (rank order: lower id first).
  std::vector<float> logits(100, -5.0f);
  for (int i = 0; i < 10; ++i) logits[static_cast<size_t>(i * 7)] = 3.0f;
  for (double u : {0.0, 0.2, 0.5, 0.8, 0.999}) {
    const int32_t t = sampling::draw_token(logits.data(), 100, row_params({1.0f, 3, 1.0f, 0.0f}, u));
    EXPECT_TRUE(t == 0 || t == 7 || t == 14) << t;
  }
  EXPECT_EQ(sampling::draw_token(logits.data(), 100, row_params({1.0f, 3, 1.0f, 0.0f}, 0.0)), 0);
  EXPECT_EQ(sampling::draw_token(logits.data(), 100, row_params({1.0f, 3, 1.0f, 0.0f}, 0.999)), 14);
}

}  // namespace
}  // namespace pagellm
