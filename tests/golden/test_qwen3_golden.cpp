// Qwen3 on every backend of this build (CPU; CUDA where built and a GPU is present) against fixtures
// written by transformers (tools/hf_golden.py, see tests/golden/qwen3/README.md): f32 checkpoints
// must give the same greedy tokens and logits within 1e-4 relative (the CUDA backend runs f32 GEMMs
// without TF32); bf16 checkpoints the same greedy tokens while the oracle's margin is clear, and
// logits within a bf16 tolerance.
#include <gtest/gtest.h>

#include "golden_util.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("qwen3");

class Qwen3Golden : public ::testing::TestWithParam<BackendFixture> {};

TEST_P(Qwen3Golden, MatchesTransformers) {
  SKIP_UNLESS_BACKEND(GetParam().device);
  expect_matches_transformers(GetParam().device, kFixtures / GetParam().fixture);
}

INSTANTIATE_TEST_SUITE_P(Cpu, Qwen3Golden, ::testing::ValuesIn(backend_fixtures("cpu", kFixtures)),
                         [](const auto& info) { return info.param.fixture; });
INSTANTIATE_TEST_SUITE_P(Cuda, Qwen3Golden, ::testing::ValuesIn(backend_fixtures("cuda", kFixtures)),
                         [](const auto& info) { return info.param.fixture; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Qwen3Golden);

}  // namespace
}  // namespace pagellm
