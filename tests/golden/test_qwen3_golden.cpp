// Qwen3 on every backend of this build (CPU; CUDA where built and a GPU is present) against fixtures
// written by transformers (tools/hf_golden.py, see tests/golden/qwen3/README.md): f32 checkpoints
// must give the same greedy tokens and logits within 1e-4 relative (the CUDA backend runs f32 GEMMs
// without TF32); bf16 checkpoints the same greedy tokens while the oracle's margin is clear, and
// logits within a bf16 tolerance.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

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

struct GoldenCase {
  std::string device;
  std::string fixture;
};

std::vector<GoldenCase> cases_on(const std::string& device) {
  std::vector<GoldenCase> cases;
  for (const std::string& name : fixture_names()) cases.push_back({device, name});
  return cases;
}

class Qwen3Golden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Qwen3Golden, MatchesTransformers) {
  const std::string& device = GetParam().device;
  const std::string& fixture = GetParam().fixture;
  const std::vector<std::string> built = available_backends();
  if (std::find(built.begin(), built.end(), device) == built.end()) GTEST_SKIP() << "built without " << device;
  const fs::path dir = kFixtures / fixture;
  const nlohmann::json expected = read_json(dir / "expected.json");
  const bool is_f32 = expected["dtype"] == "float32";
  auto backend = make_backend(device);
  if (!backend.has_value() && device != "cpu") GTEST_SKIP() << "no " << device << " device: " << backend.status().message();
  ASSERT_TRUE(backend.has_value()) << backend.status().message();
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
    std::fprintf(stderr, "  %s prompt %zu: max |logit err| %.3g of max |logit| %.3g\n", fixture.c_str(),
                 prompt.size(), max_err, max_abs_logit);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Qwen3Golden, ::testing::ValuesIn(cases_on("cpu")),
                         [](const auto& info) { return info.param.fixture; });
INSTANTIATE_TEST_SUITE_P(Cuda, Qwen3Golden, ::testing::ValuesIn(cases_on("cuda")),
                         [](const auto& info) { return info.param.fixture; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Qwen3Golden);

}  // namespace
}  // namespace pagellm
