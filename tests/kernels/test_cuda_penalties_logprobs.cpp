// Backend::apply_penalties and Backend::logprobs on CUDA (backend/cuda/sampling.cu) against their CPU
// twins (backend/sampling_math.cpp; tests/unit/runner/test_penalty_logprob_ops.cpp holds the twins to
// sample_token). Random rows at vocab 1000 and 151,936, f32 and bf16 logits, histories with repeats
// (one of 6,000 ids, so a row's history spans many blocks):
//   - penalised rows equal the twin's bit for bit (same f32 operations, no FMA);
//   - argmax + draw over them give the twin's token, except where the CPU, given a draw or a top-p
//     cut moved by 1e-5, gives the GPU's (expf's last ulps; counted and printed);
//   - logprobs within 1e-5 of the twin's, top ids equal except where the two logprobs tie;
//   - a second call gives the same bits (the occurrence words are left zeroed, nothing races).
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

using sampling::LogprobRow;
using sampling::PenaltyRow;
using sampling::RowParams;

struct Batch {
  int64_t vocab = 0;
  std::vector<std::vector<float>> rows;  // [R][vocab], as the device holds them (after rounding)
  std::vector<PenaltyRow> penalties;     // [R], logits_row = r
  std::vector<RowParams> draws;          // [R], temperature 0 = argmax
  std::vector<int32_t> history;          // [H]
  std::vector<LogprobRow> logprobs;      // [R], id_index = r
};

Batch make_batch(int64_t vocab, DType dtype, std::mt19937_64& rng) {
  Batch b;
  b.vocab = vocab;
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int index = 0;
  for (float repetition : {1.0f, 1.3f, 0.8f})
    for (float presence : {0.0f, 0.6f, -0.4f})
      for (float frequency : {0.0f, 0.25f})
        for (float temperature : {0.0f, 0.8f}) {
          std::vector<float> row(static_cast<size_t>(vocab));
          for (float& x : row) x = normal(rng);
          if (index % 3 == 0)
            for (float& x : row) x = std::round(x * 2.0f) / 2.0f;  // many ties
          for (int i = 0; i < 5; ++i) row[rng() % static_cast<uint64_t>(vocab)] += 8.0f;
          if (dtype == DType::kBF16)
            for (float& x : row) x = round_to_bf16(x);
          // History from a pool holding the ten best ids, so ids repeat and the penalties matter.
          std::vector<int32_t> order(static_cast<size_t>(vocab));
          for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
          std::partial_sort(order.begin(), order.begin() + 10, order.end(),
                            [&](int32_t a, int32_t c) { return row[static_cast<size_t>(a)] > row[static_cast<size_t>(c)]; });
          std::vector<int32_t> pool(order.begin(), order.begin() + 10);
          for (int i = 0; i < 40; ++i) pool.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
          const int length = index == 7 ? 6000 : 1 + static_cast<int>(rng() % 120);
          PenaltyRow p;
          p.logits_row = index;
          p.history_offset = static_cast<int32_t>(b.history.size());
          p.num_prompt_tokens = static_cast<int32_t>(rng() % static_cast<uint64_t>(length + 1));
          p.num_output_tokens = length - p.num_prompt_tokens;
          p.repetition_penalty = repetition;
          p.presence_penalty = presence;
          p.frequency_penalty = frequency;
          for (int i = 0; i < length; ++i) b.history.push_back(pool[rng() % pool.size()]);
          RowParams d;
          if (temperature > 0) d = {temperature, index % 3 == 0 ? 20 : 0, index % 2 == 0 ? 0.9f : 1.0f, 0.0f, uniform(rng)};
          b.rows.push_back(std::move(row));
          b.penalties.push_back(p);
          b.draws.push_back(d);
          b.logprobs.push_back({index, index, index % 4 == 0 ? 0 : index % 21});
          ++index;
        }
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

template <typename Struct>
Tensor bytes_tensor(const std::vector<Struct>& items) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(items.size()), static_cast<int64_t>(sizeof(Struct))}, DType::kU8);
  std::memcpy(t.view().data, items.data(), items.size() * sizeof(Struct));
  return t;
}

Tensor i32_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(values.size())}, DType::kI32);
  std::copy(values.begin(), values.end(), t.ptr<int32_t>());
  return t;
}

// What one backend computes for the batch: penalised rows, ids (argmax, then draws), logprobs.
// ids_for_logprobs, when given, replaces the ids the logprobs read (so both sides score one token).
struct Result {
  Tensor penalised;       // [R, vocab] f32
  std::vector<int32_t> ids;
  Tensor top_ids, top_logprobs;  // [R, 1 + kMaxTopLogprobs]
};

Result run(Backend& be, const Batch& b, const Tensor& logits_host, const std::vector<int32_t>* ids_for_logprobs) {
  const bool gpu = be.device() != Device::kCpu;
  auto put = [&](const Tensor& host) { return gpu ? to_device(be, host.view()) : host; };
  auto get = [&](const Tensor& t) { return gpu ? to_host(be, t.view()) : t; };
  const int64_t rows = static_cast<int64_t>(b.rows.size());
  const int64_t width = 1 + sampling::kMaxTopLogprobs;
  Tensor logits = put(logits_host);
  Tensor penalised = be.alloc({rows, b.vocab}, DType::kF32);
  be.apply_penalties(penalised.view(), logits.view(), put(bytes_tensor(b.penalties)).view(), put(i32_tensor(b.history)).view());
  Tensor ids = be.alloc({rows}, DType::kI32);
  be.argmax(ids.view(), penalised.view());
  be.sample(ids.view(), penalised.view(), put(bytes_tensor(b.draws)).view());
  Tensor scored = ids_for_logprobs ? put(i32_tensor(*ids_for_logprobs)) : ids;
  Tensor top_ids = be.alloc({rows, width}, DType::kI32), top_logprobs = be.alloc({rows, width}, DType::kF32);
  be.logprobs(top_ids.view(), top_logprobs.view(), logits.view(), scored.view(), put(bytes_tensor(b.logprobs)).view());
  Result out{get(penalised), {}, get(top_ids), get(top_logprobs)};
  const Tensor ids_host = get(ids);
  be.synchronize();
  out.ids.assign(ids_host.ptr<int32_t>(), ids_host.ptr<int32_t>() + rows);
  return out;
}

// True when the CPU draws `token` from `row` with the draw or the top-p cut moved by up to eps.
bool near_boundary(const float* row, int64_t vocab, const RowParams& p, int32_t token, double eps = 1e-5) {
  for (float dp : {0.0f, -1.0f, 1.0f}) {
    RowParams q = p;
    q.top_p = p.top_p >= 1.0f ? 1.0f : std::min(1.0f, p.top_p + dp * static_cast<float>(eps));
    q.uniform = std::max(0.0, p.uniform - eps);
    const int32_t lo = sampling::draw_token(row, vocab, q);
    q.uniform = std::min(1.0 - 1e-12, p.uniform + eps);
    const int32_t hi = sampling::draw_token(row, vocab, q);
    if (lo <= token && token <= hi) return true;
  }
  return false;
}

void expect_matches_cpu(Backend& gpu, int64_t vocab, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Batch b = make_batch(vocab, dtype, rng);
  const Tensor logits = logits_tensor(b, dtype);
  auto cpu = make_backend("cpu");
  ASSERT_TRUE(cpu.has_value());
  const Result got = run(gpu, b, logits, nullptr);
  const Result want = run(**cpu, b, logits, &got.ids);  // logprobs of the GPU's tokens
  const int64_t rows = static_cast<int64_t>(b.rows.size()), width = 1 + sampling::kMaxTopLogprobs;
  ASSERT_EQ(std::memcmp(got.penalised.view().data, want.penalised.view().data,
                        static_cast<size_t>(rows * vocab) * sizeof(float)),
            0)
      << "penalised rows differ from the CPU twin";
  int near = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t ri = static_cast<size_t>(r);
    if (got.ids[ri] != want.ids[ri]) {
      const float* row = want.penalised.ptr<float>() + r * vocab;
      if (b.draws[ri].temperature > 0 && near_boundary(row, vocab, b.draws[ri], got.ids[ri])) {
        ++near;
      } else {
        ADD_FAILURE() << "vocab " << vocab << " " << dtype_name(dtype) << " row " << r << ": GPU " << got.ids[ri]
                      << ", CPU " << want.ids[ri];
      }
    }
    const int32_t* gi = got.top_ids.ptr<int32_t>() + r * width;
    const int32_t* wi = want.top_ids.ptr<int32_t>() + r * width;
    const float* gl = got.top_logprobs.ptr<float>() + r * width;
    const float* wl = want.top_logprobs.ptr<float>() + r * width;
    EXPECT_EQ(gi[0], got.ids[ri]) << "row " << r;
    EXPECT_NEAR(gl[0], wl[0], 1e-5) << "row " << r << " sampled logprob";
    for (int64_t j = 1; j < width; ++j) {
      EXPECT_NEAR(gl[j], wl[j], 1e-5) << "row " << r << " entry " << j;
      // Ids may differ only between tokens whose logprobs tie on the GPU side.
      if (gi[j] != wi[j]) {
        const bool tie = (j > 1 && gl[j] == gl[j - 1]) || (j + 1 < width && gl[j] == gl[j + 1]);
        EXPECT_TRUE(tie) << "row " << r << " entry " << j << ": GPU id " << gi[j] << ", CPU id " << wi[j];
      }
    }
  }
  std::printf("vocab %lld %s: %d of %lld rows drew another token within 1e-5 of a boundary\n",
              static_cast<long long>(vocab), std::string(dtype_name(dtype)).c_str(), near,
              static_cast<long long>(rows));

  const Result again = run(gpu, b, logits, nullptr);
  EXPECT_EQ(again.ids, got.ids) << "a second call drew other tokens";
  EXPECT_EQ(std::memcmp(again.penalised.view().data, got.penalised.view().data,
                        static_cast<size_t>(rows * vocab) * sizeof(float)),
            0)
      << "a second call penalised differently (occurrence words not left zeroed?)";
  EXPECT_EQ(std::memcmp(again.top_logprobs.view().data, got.top_logprobs.view().data,
                        static_cast<size_t>(rows * width) * sizeof(float)),
            0);
}

TEST(CudaPenaltiesLogprobs, SmallVocabMatchesTheCpuTwin) {
  PAGELLM_GPU_OR_SKIP(gpu);
  expect_matches_cpu(*gpu, 1000, DType::kF32, 11);
  expect_matches_cpu(*gpu, 1000, DType::kBF16, 12);
}

TEST(CudaPenaltiesLogprobs, QwenVocabMatchesTheCpuTwin) {
  PAGELLM_GPU_OR_SKIP(gpu);
  expect_matches_cpu(*gpu, 151936, DType::kF32, 13);
  expect_matches_cpu(*gpu, 151936, DType::kBF16, 14);
}

TEST(CudaPenaltiesLogprobs, AllTiedRowListsTheLowestIds) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const int64_t vocab = 151936, width = 1 + sampling::kMaxTopLogprobs;
  Tensor logits = Tensor::cpu({1, vocab}, DType::kF32);
  std::fill(logits.ptr<float>(), logits.ptr<float>() + vocab, 1.25f);
  Tensor ids = to_device(*gpu, i32_tensor({777}).view());
  Tensor rows = to_device(*gpu, bytes_tensor(std::vector<LogprobRow>{{0, 0, 20}}).view());
  Tensor top_ids = gpu->alloc({1, width}, DType::kI32), top_logprobs = gpu->alloc({1, width}, DType::kF32);
  gpu->logprobs(top_ids.view(), top_logprobs.view(), to_device(*gpu, logits.view()).view(), ids.view(), rows.view());
  const Tensor got_ids = to_host(*gpu, top_ids.view()), got_logprobs = to_host(*gpu, top_logprobs.view());
  gpu->synchronize();
  const float uniform = static_cast<float>(-std::log(static_cast<double>(vocab)));
  EXPECT_EQ(got_ids.ptr<int32_t>()[0], 777);
  for (int64_t j = 0; j < width; ++j) {
    if (j > 0) {
      EXPECT_EQ(got_ids.ptr<int32_t>()[j], j - 1);
    }
    EXPECT_NEAR(got_logprobs.ptr<float>()[j], uniform, 1e-5);
  }
}

}  // namespace
}  // namespace pagellm::cuda_test
