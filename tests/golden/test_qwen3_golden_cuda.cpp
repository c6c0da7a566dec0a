// Qwen3 on the CUDA backend against the fixtures of test_qwen3_golden.cpp (written by transformers,
// tests/golden/qwen3/README.md), with the same bars: f32 checkpoints (f32 GEMMs, no TF32) the same
// greedy tokens and logits within 1e-4 relative; bf16 the same greedy tokens while the oracle's margin
// is clear, logits within a bf16 tolerance. Skips where this build or machine has no GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "runner/sequence_generator.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(PAGELLM_SOURCE_DIR) / "tests/golden/qwen3";

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  if (!fs::exists(kFixtures)) return names;
  for (const auto& entry : fs::directory_iterator(kFixtures))
    if (fs::exists(entry.path() / "expected.json")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class Qwen3GoldenCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3GoldenCuda, MatchesTransformers) {
  const fs::path dir = kFixtures / GetParam();
  const nlohmann::json expected = read_json(dir / "expected.json");
  const bool is_f32 = expected["dtype"] == "float32";
  const std::vector<std::string> names = available_backends();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) GTEST_SKIP() << "built without the CUDA backend";
  auto backend = make_backend("cuda");
  if (!backend.has_value()) GTEST_SKIP() << "no GPU to test on: " << backend.status().message();
  auto model = load_model(dir.string(), **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();

  for (const auto& c : expected["cases"]) {
    const std::vector<int32_t> prompt = c["prompt_ids"];
    const std::vector<int32_t> want = c["greedy_token_ids"];
    const std::vector<float> margins = c["top1_margins"];
    const std::vector<float> want_logits = c["prompt_next_token_logits"];
    SequenceOptions options;
    options.sampling.temperature = 0.0f;
    options.sampling.max_tokens = static_cast<int>(want.size());
    auto got = generate_sequence(**model, **backend, prompt, options);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    SCOPED_TRACE("prompt of " + std::to_string(prompt.size()) + " tokens");

    ASSERT_EQ(got->prompt_logits.size(), want_logits.size());
    double max_abs_logit = 0.0, max_err = 0.0;
    for (size_t i = 0; i < want_logits.size(); ++i) {
      max_abs_logit = std::max(max_abs_logit, std::fabs(static_cast<double>(want_logits[i])));
      max_err = std::max(max_err, std::fabs(static_cast<double>(got->prompt_logits[i]) - want_logits[i]));
    }
    if (is_f32) {
      EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_abs_logit)) << "max |logit| " << max_abs_logit;
      EXPECT_EQ(got->token_ids, want);
    } else {
      // bf16: every op rounds to 8 bits of mantissa; 2% of the logit range is a few bf16 ulps of
      // the largest logits after the rounding noise of every layer.
      const double tolerance = 0.02 * std::max(1.0, max_abs_logit);
      EXPECT_LE(max_err, tolerance) << "max |logit| " << max_abs_logit;
      // Greedy tokens must agree until the first step where the oracle itself was within the logit
      // tolerance of a tie (bf16 logits tie often); a parting at a confident step is a bug.
      size_t agreed = 0;
      while (agreed < want.size() && got->token_ids[agreed] == want[agreed]) ++agreed;
      if (agreed < want.size())
        EXPECT_LE(margins[agreed], 2 * tolerance) << "parted from the oracle at step " << agreed;
      std::fprintf(stderr, "  bf16: %zu of %zu greedy tokens agree\n", agreed, want.size());
    }
    std::fprintf(stderr, "  %s prompt %zu: max |logit err| %.3g of max |logit| %.3g\n", GetParam().c_str(),
                 prompt.size(), max_err, max_abs_logit);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen3GoldenCuda, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Qwen3GoldenCuda);

}  // namespace
}  // namespace pagellm
