// The logit constraints of structured outputs and logit_bias (Backend::apply_token_bitmask,
// Backend::add_logit_bias): what the host twin does on a small case, and the CUDA kernels against
// the host twin on vocabulary-sized rows.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "attention_test_data.h"
#include "cuda_test_util.h"

namespace pagellm::cuda_test {
namespace {

const DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

Tensor i32_tensor(const std::vector<int32_t>& values, Shape shape) {
  Tensor t = Tensor::cpu(shape, DType::kI32);
  std::memcpy(t.ptr<int32_t>(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

int32_t float_bits(float value) {
  int32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

TEST(LogitConstraints, BitmaskKeepsAllowedTokensOfTheNamedRowsOnly) {
  CpuBackend cpu;
  const int64_t vocab = 70;  // three words, the last one partial
  Tensor logits = Tensor::cpu({3, vocab}, DType::kF32);
  for (int64_t i = 0; i < 3 * vocab; ++i) logits.ptr<float>()[i] = static_cast<float>(i % 7);
  // Row 2 allows tokens 0, 33 and 69; row 0 allows everything but token 5.
  std::vector<int32_t> mask = {0, 0, 0, -1, -1, -1};
  mask[0] = 1;
  mask[1] = 1 << 1;
  mask[2] = 1 << (69 - 64);
  mask[3] = ~(1 << 5);
  cpu.apply_token_bitmask(logits.view(), i32_tensor(mask, {2, 3}).view(), i32_tensor({2, 0}, {2}).view());
  const float* row0 = logits.ptr<float>();
  const float* row1 = row0 + vocab;
  const float* row2 = row1 + vocab;
  for (int64_t v = 0; v < vocab; ++v) {
    EXPECT_EQ(std::isinf(row0[v]), v == 5) << v;
    EXPECT_FALSE(std::isinf(row1[v])) << "row 1 is not named: untouched";
    EXPECT_EQ(std::isinf(row2[v]) && row2[v] < 0, v != 0 && v != 33 && v != 69) << v;
  }
}

TEST(LogitConstraints, BiasAddsInOrderAndRoundsToTheDtype) {
  CpuBackend cpu;
  Tensor logits = Tensor::cpu({2, 8}, DType::kBF16);
  const float one = 1.0f;
  for (int64_t i = 0; i < 16; ++i) convert_from_f32(&one, logits.ptr<uint16_t>() + i, DType::kBF16, 1);
  const Tensor entries =
      i32_tensor({1, 3, float_bits(100.0f), 0, 7, float_bits(-0.001f), 1, 3, float_bits(0.5f)}, {3, 3});
  cpu.add_logit_bias(logits.view(), entries.view());
  std::vector<float> got(16);
  convert_to_f32(logits.ptr<uint16_t>(), DType::kBF16, got.data(), 16);
  EXPECT_EQ(got[8 + 3], round_to_dtype(round_to_dtype(101.0f, DType::kBF16) + 0.5f, DType::kBF16));
  EXPECT_EQ(got[7], round_to_dtype(1.0f - 0.001f, DType::kBF16));
  EXPECT_EQ(got[0], 1.0f);
}

TEST(CudaLogitConstraints, MatchTheHostTwin) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  attention_test::Rng rng(11);
  const int64_t vocab = 151936, rows = 5, words = (vocab + 31) / 32;
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor logits = random_tensor({rows, vocab}, dtype, rng, -10, 10);
    std::vector<int32_t> mask(static_cast<size_t>(3 * words));
    for (int32_t& word : mask) word = static_cast<int32_t>(rng.below(1u << 31)) ^ static_cast<int32_t>(rng.below(2) << 31);
    const Tensor bitmask = i32_tensor(mask, {3, words}), mask_rows = i32_tensor({4, 0, 2}, {3});
    const Tensor entries = i32_tensor({1, 17, float_bits(100.0f), 4, 151935, float_bits(-3.5f), 1, 17, float_bits(0.25f)},
                                      {3, 3});
    Tensor want = Tensor::cpu({rows, vocab}, dtype);
    std::memcpy(want.view().data, logits.view().data, logits.nbytes());
    cpu.add_logit_bias(want.view(), entries.view());
    cpu.apply_token_bitmask(want.view(), bitmask.view(), mask_rows.view());
    Tensor got = to_device(*gpu, logits.view());
    gpu->add_logit_bias(got.view(), to_device(*gpu, entries.view()).view());
    gpu->apply_token_bitmask(got.view(), to_device(*gpu, bitmask.view()).view(), to_device(*gpu, mask_rows.view()).view());
    // Bitwise: the same additions rounded the same way, the same -inf (a float comparison would
    // count -inf against -inf as a difference).
    const Tensor host = to_host(*gpu, got.view());
    int64_t differ = 0;
    for (size_t i = 0; i < want.nbytes(); ++i)
      differ += static_cast<const char*>(want.view().data)[i] != static_cast<const char*>(host.view().data)[i];
    EXPECT_EQ(differ, 0) << "bytes differ";
    std::vector<float> values(static_cast<size_t>(want.numel()));
    convert_to_f32(host.view().data, dtype, values.data(), values.size());
    int64_t masked = 0;
    for (float v : values) masked += std::isinf(v) && v < 0;
    EXPECT_GT(masked, vocab) << "the masks took effect";
  }
}

}  // namespace
}  // namespace pagellm::cuda_test
