// Qwen3 on every backend of this build (CPU; CUDA where built and a GPU is present) against fixtures
// written by transformers (tools/hf_golden.py, see tests/golden/qwen3/README.md): f32 checkpoints
// must give the same greedy tokens and logits within 1e-4 relative (the CUDA backend runs f32 GEMMs
// without TF32); bf16 checkpoints the same greedy tokens while the oracle's margin is clear, and
// logits within a bf16 tolerance.
#include <algorithm>
#include <cstdio>

#include <gtest/gtest.h>

#include "golden_util.h"
#include "model/model.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("qwen3");

class Qwen3Golden : public ::testing::TestWithParam<BackendFixture> {};

TEST_P(Qwen3Golden, MatchesTransformers) {
  const std::string& device = GetParam().device;
  const std::string& fixture = GetParam().fixture;
  SKIP_UNLESS_BACKEND(device);
  const fs::path dir = kFixtures / fixture;
  const bool is_f32 = read_golden_dtype(dir) == "float32";
  auto backend = make_backend(device);
  ASSERT_TRUE(backend.has_value()) << backend.status().message();
  auto model = load_model(dir.string(), **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();

  for (const GoldenCase& c : read_golden_cases(dir)) {
    const std::vector<TokenId>& prompt = c.prompt;
    const std::vector<TokenId>& want = c.greedy;
    const std::vector<float>& margins = c.margins;
    const std::vector<float>& want_logits = c.logits;
    auto got = generate_sequence(**model, **backend, prompt, greedy_options(static_cast<int>(want.size())));
    ASSERT_TRUE(got.has_value()) << got.status().message();
    SCOPED_TRACE("prompt of " + std::to_string(prompt.size()) + " tokens");

    ASSERT_EQ(got->prompt_logits.size(), want_logits.size());
    const auto [max_abs_logit, max_err] = logit_error(got->prompt_logits, want_logits);
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
      if (agreed < want.size()) {
        EXPECT_LE(margins[agreed], 2 * tolerance) << "parted from the oracle at step " << agreed;
      }
      std::fprintf(stderr, "  bf16: %zu of %zu greedy tokens agree\n", agreed, want.size());
    }
    std::fprintf(stderr, "  %s prompt %zu: max |logit err| %.3g of max |logit| %.3g\n", fixture.c_str(),
                 prompt.size(), max_err, max_abs_logit);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Qwen3Golden, ::testing::ValuesIn(backend_fixtures("cpu", kFixtures)),
                         [](const auto& info) { return info.param.fixture; });
INSTANTIATE_TEST_SUITE_P(Cuda, Qwen3Golden, ::testing::ValuesIn(backend_fixtures("cuda", kFixtures)),
                         [](const auto& info) { return info.param.fixture; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Qwen3Golden);

}  // namespace
}  // namespace pagellm
