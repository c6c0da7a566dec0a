// The CPU twins of Backend::apply_penalties and Backend::logprobs (backend/sampling_math.cpp) against
// sample_token, the host sampler the runner used for these rows before they moved to the device:
// penalised copy -> argmax / Backend::sample must give sample_token's token, and logprobs must
// equal its sampled logprob and top list bit for bit (same f32 / f64 arithmetic, same order).
// Random rows at vocab 1000 and 151,936, f32 and bf16 logits (bf16 makes many ties), histories
// with repeats whose ids include the row's top tokens (so the penalties change the choice).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/sampling_math.h"
#include "core/dtype.h"
#include "runner/sampler.h"

namespace pagellm {
namespace {

std::unique_ptr<Backend> cpu_backend() {
  auto made = make_backend("cpu");
  EXPECT_TRUE(made.has_value());
  return std::move(*made);
}

struct Row {
  std::vector<float> logits;     // [vocab], as the device holds them (bf16-rounded for bf16)
  SamplingParams params;
  std::vector<TokenId> history;  // prompt + outputs
  int num_prompt_tokens = 0;
  uint64_t seed = 0;
  int num_output_tokens() const { return static_cast<int>(history.size()) - num_prompt_tokens; }
};

std::vector<float> random_logits(int64_t vocab, std::mt19937_64& rng, DType dtype) {
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) x = normal(rng);
  for (int i = 0; i < 5; ++i) logits[rng() % static_cast<uint64_t>(vocab)] += 8.0f;  // a peaked head
  if (dtype == DType::kBF16)
    for (float& x : logits) x = round_to_bf16(x);
  return logits;
}

// Prompt and outputs drawn from a pool of ids that holds the row's ten best tokens, so ids repeat
// and the penalties move the argmax and the draw.
std::vector<TokenId> random_history(const std::vector<float>& logits, int length, std::mt19937_64& rng) {
  std::vector<TokenId> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<TokenId>(i);
  std::partial_sort(order.begin(), order.begin() + 10, order.end(),
                    [&](TokenId a, TokenId b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
  std::vector<TokenId> pool(order.begin(), order.begin() + 10);
  for (int i = 0; i < 20; ++i) pool.push_back(static_cast<TokenId>(rng() % logits.size()));
  std::vector<TokenId> history(static_cast<size_t>(length));
  for (TokenId& id : history) id = pool[rng() % pool.size()];
  return history;
}

std::vector<Row> make_rows(int64_t vocab, DType dtype, std::mt19937_64& rng) {
  std::vector<Row> rows;
  std::uniform_int_distribution<int> length(1, 80);
  for (float repetition : {1.0f, 1.3f, 0.8f})
    for (float presence : {0.0f, 0.6f, -0.4f})
      for (float frequency : {0.0f, 0.25f})
        for (float temperature : {0.0f, 0.8f}) {
          if (repetition == 1.0f && presence == 0.0f && frequency == 0.0f) continue;  // not a penalty row
          Row row;
          row.logits = random_logits(vocab, rng, dtype);
          row.params.temperature = temperature;
          row.params.top_k = rows.size() % 3 == 0 ? 20 : 0;
          row.params.top_p = rows.size() % 2 == 0 ? 0.9f : 1.0f;
          row.params.repetition_penalty = repetition;
          row.params.presence_penalty = presence;
          row.params.frequency_penalty = frequency;
          row.params.num_logprobs = static_cast<int>(rows.size() % 4 == 0 ? 0 : rows.size() % 21);
          row.history = random_history(row.logits, length(rng), rng);
          row.num_prompt_tokens = std::uniform_int_distribution<int>(0, static_cast<int>(row.history.size()))(rng);
          row.seed = rng();
          rows.push_back(std::move(row));
        }
  return rows;
}

SampleOutput reference(const Row& row) {
  SampleInputs in;
  in.logits = row.logits;
  in.params = &row.params;
  in.history = row.history;
  in.num_prompt_tokens = row.num_prompt_tokens;
  in.num_output_tokens = row.num_output_tokens();
  in.seed = row.seed;
  return sample_token(in);
}

// logits [R, vocab] in `dtype`, as the runner's logits buffer.
Tensor logits_tensor(const std::vector<Row>& rows, int64_t vocab, DType dtype) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(rows.size()), vocab}, dtype);
  const size_t row_bytes = static_cast<size_t>(vocab) * dtype_size_bytes(dtype);
  for (size_t r = 0; r < rows.size(); ++r)
    convert_from_f32(rows[r].logits.data(), t.ptr<char>() + r * row_bytes, dtype, static_cast<size_t>(vocab));
  return t;
}

template <typename Struct>
Tensor struct_tensor(const std::vector<Struct>& items) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(items.size()), static_cast<int64_t>(sizeof(Struct))}, DType::kU8);
  if (!items.empty()) std::memcpy(t.ptr<char>(), items.data(), items.size() * sizeof(Struct));
  return t;
}

// The runner's device path on the CPU backend: penalised copies, argmax, draw; then logprobs of the
// raw rows for the chosen ids. Returns ids [R] and the logprob outputs [R, 1 + kMaxTopLogprobs].
struct OpResult {
  std::vector<int32_t> ids;
  Tensor top_ids, top_logprobs;
};

OpResult run_ops(Backend& backend, const std::vector<Row>& rows, int64_t vocab, DType dtype) {
  const int64_t n = static_cast<int64_t>(rows.size());
  Tensor logits = logits_tensor(rows, vocab, dtype);
  std::vector<sampling::PenaltyRow> penalty_rows;
  std::vector<sampling::RowParams> draw_params;
  std::vector<sampling::LogprobRow> logprob_rows;
  std::vector<int32_t> history;
  for (int64_t r = 0; r < n; ++r) {
    const Row& row = rows[static_cast<size_t>(r)];
    sampling::PenaltyRow p;
    p.logits_row = static_cast<int32_t>(r);
    p.history_offset = static_cast<int32_t>(history.size());
    p.num_prompt_tokens = row.num_prompt_tokens;
    p.num_output_tokens = row.num_output_tokens();
    p.repetition_penalty = row.params.repetition_penalty;
    p.presence_penalty = row.params.presence_penalty;
    p.frequency_penalty = row.params.frequency_penalty;
    penalty_rows.push_back(p);
    history.insert(history.end(), row.history.begin(), row.history.end());
    sampling::RowParams d;
    if (!row.params.is_greedy()) {
      d.temperature = row.params.temperature;
      d.top_k = row.params.top_k;
      d.top_p = row.params.top_p;
      d.min_p = row.params.min_p;
      d.uniform = counter_uniform(row.seed, static_cast<uint64_t>(row.num_output_tokens()));
    }
    draw_params.push_back(d);
    logprob_rows.push_back({static_cast<int32_t>(r), static_cast<int32_t>(r), *row.params.num_logprobs});
  }
  Tensor history_t = Tensor::cpu({static_cast<int64_t>(history.size())}, DType::kI32);
  std::copy(history.begin(), history.end(), history_t.ptr<int32_t>());
  Tensor penalised = Tensor::cpu({n, vocab}, DType::kF32);
  backend.apply_penalties(penalised.view(), logits.view(), struct_tensor(penalty_rows).view(), history_t.view());
  Tensor ids = Tensor::cpu({n}, DType::kI32);
  backend.argmax(ids.view(), penalised.view());
  backend.sample(ids.view(), penalised.view(), struct_tensor(draw_params).view());
  OpResult out;
  out.top_ids = Tensor::cpu({n, 1 + sampling::kMaxTopLogprobs}, DType::kI32);
  out.top_logprobs = Tensor::cpu({n, 1 + sampling::kMaxTopLogprobs}, DType::kF32);
  backend.logprobs(out.top_ids.view(), out.top_logprobs.view(), logits.view(), ids.view(),
                   struct_tensor(logprob_rows).view());
  out.ids.assign(ids.ptr<int32_t>(), ids.ptr<int32_t>() + n);
  return out;
}

struct Case {
  int64_t vocab;
  DType dtype;
};

class PenaltyLogprobOps : public ::testing::TestWithParam<Case> {};

TEST_P(PenaltyLogprobOps, TwinsGiveSampleTokensTokenAndLogprobs) {
  const Case c = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(c.vocab) * 31 + static_cast<uint64_t>(c.dtype));
  auto backend = cpu_backend();
  ASSERT_TRUE(backend);
  const std::vector<Row> rows = make_rows(c.vocab, c.dtype, rng);
  const OpResult got = run_ops(*backend, rows, c.vocab, c.dtype);
  const int64_t width = 1 + sampling::kMaxTopLogprobs;
  int moved = 0;  // rows where the penalties changed the token (the test must exercise them)
  for (size_t r = 0; r < rows.size(); ++r) {
    SCOPED_TRACE(testing::Message() << "row " << r);
    const SampleOutput want = reference(rows[r]);
    EXPECT_EQ(got.ids[r], want.token_id);
    SamplingParams plain = rows[r].params;
    plain.repetition_penalty = 1.0f;
    plain.presence_penalty = plain.frequency_penalty = 0.0f;
    Row unpenalised = rows[r];
    unpenalised.params = plain;
    moved += reference(unpenalised).token_id != want.token_id ? 1 : 0;

    ASSERT_TRUE(want.logprobs.has_value());
    const int32_t* ids = got.top_ids.ptr<int32_t>() + static_cast<int64_t>(r) * width;
    const float* values = got.top_logprobs.ptr<float>() + static_cast<int64_t>(r) * width;
    EXPECT_EQ(ids[0], want.token_id);
    EXPECT_EQ(values[0], want.logprobs->sampled_logprob);
    const size_t k = want.logprobs->top.size();
    ASSERT_EQ(k, static_cast<size_t>(*rows[r].params.num_logprobs));
    for (size_t j = 0; j < k; ++j) {
      EXPECT_EQ(ids[1 + j], want.logprobs->top[j].token_id) << "entry " << j;
      EXPECT_EQ(values[1 + j], want.logprobs->top[j].logprob) << "entry " << j;
    }
    for (int64_t j = static_cast<int64_t>(k) + 1; j < width; ++j) EXPECT_EQ(ids[j], -1);
  }
  EXPECT_GE(moved, static_cast<int>(rows.size()) / 5) << "the penalties should change many tokens";
}

INSTANTIATE_TEST_SUITE_P(VocabAndDtype, PenaltyLogprobOps,
                         ::testing::Values(Case{1000, DType::kF32}, Case{1000, DType::kBF16},
                                           Case{151936, DType::kF32}, Case{151936, DType::kBF16}),
                         [](const auto& info) {
                           return std::to_string(info.param.vocab) + "_" +
                                  std::string(dtype_name(info.param.dtype));
                         });

// The rules on a row small enough to check by hand: repetition once per distinct id over prompt +
// outputs (divide positive logits, multiply negative ones), then frequency * output count +
// presence off each output id; ids outside the vocabulary are ignored; the raw logits stay as they were.
TEST(PenaltyLogprobOps, PenaltiesByHand) {
  auto backend = cpu_backend();
  ASSERT_TRUE(backend);
  const std::vector<float> raw = {2.0f, -1.0f, 4.0f, 0.5f, -2.0f, 3.0f};
  Tensor logits = Tensor::cpu({1, 6}, DType::kF32);
  std::copy(raw.begin(), raw.end(), logits.ptr<float>());
  // prompt: 0 0 1 9(out of range) | outputs: 2 2 1 -1(out of range)
  const std::vector<int32_t> history = {0, 0, 1, 9, 2, 2, 1, -1};
  Tensor history_t = Tensor::cpu({8}, DType::kI32);
  std::copy(history.begin(), history.end(), history_t.ptr<int32_t>());
  sampling::PenaltyRow p;
  p.num_prompt_tokens = 4;
  p.num_output_tokens = 4;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Tensor out = Tensor::cpu({1, 6}, DType::kF32);
  backend->apply_penalties(out.view(), logits.view(), struct_tensor(std::vector{p}).view(), history_t.view());
  const float* x = out.ptr<float>();
  EXPECT_EQ(x[0], 1.0f);                          // prompt only: 2 / 2
  EXPECT_EQ(x[1], -2.0f - (0.25f * 1 + 0.5f));    // -1 * 2, then one output
  EXPECT_EQ(x[2], 2.0f - (0.25f * 2 + 0.5f));     // 4 / 2, then two outputs
  EXPECT_EQ(x[3], 0.5f);
  EXPECT_EQ(x[4], -2.0f);
  EXPECT_EQ(x[5], 3.0f);
  EXPECT_EQ(logits.ptr<float>()[2], 4.0f);
}

}  // namespace
}  // namespace pagellm
