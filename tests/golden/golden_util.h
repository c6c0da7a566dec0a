// Helpers shared by the golden tests (tests/golden/*.cpp, one test_golden binary): reading the
// transformers fixtures' expected.json, listing fixture folders, skipping where a backend can't be
// tested, and making engines and greedy requests. No TEST()s here.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/llm.h"
#include "runner/sequence_generator.h"

namespace pagellm {

namespace fs = std::filesystem;

// The source tree: $PAGELLM_SOURCE_DIR when set (binaries run elsewhere than they were built, as
// scripts/gpu-check.sh does with GPU_CHECK_PREBUILT), else the folder compiled in.
fs::path source_root();
// tests/golden/<family> in the source tree ("qwen3", "hybrid").
fs::path golden_fixture_root(const std::string& family);

// One case of a fixture's expected.json: transformers' prompt, its greedy tokens, the top-1 margin at
// each greedy step, and the next-token logits after the prompt.
struct GoldenCase {
  std::vector<TokenId> prompt, greedy;
  std::vector<float> margins, logits;
  // Top-5 (id, logprob) of the full forward at each greedy step, when the fixture records them.
  std::vector<std::vector<std::pair<TokenId, float>>> top5;
  // greedy holds the full-forward (no cache) greedy tokens when the fixture records them: the
  // model's math with no cache path in between, checked in full.
  bool full_forward = false;
  // Whether transformers agrees with itself on this case: the first-step margin of its generate()
  // equals the top-2 gap of its full-forward logits. In qwen3_5_text_tiny_f32's 33-token case it
  // does not (0.682 vs 0.582, same argmax): generate's cached prefill computed other numbers than
  // model(ids), and its greedy tokens part from model(ids)'s own at step 11 (we match model(ids):
  // logits to 4e-5, and prefill of prompt + 11 tokens picks 207 over 511 by 0.075). Such a case
  // checks the first token only, unless the fixture records full-forward greedy tokens.
  bool oracle_consistent() const;
  // tokens, or only their first where the oracle is not consistent.
  std::vector<TokenId> checked(const std::vector<TokenId>& tokens) const;
};

std::vector<GoldenCase> read_golden_cases(const fs::path& fixture_dir);
// The checkpoint's dtype as expected.json records it ("float32", "bfloat16").
std::string read_golden_dtype(const fs::path& fixture_dir);

// Sorted names of the folders under root that hold an expected.json; none if root is missing.
std::vector<std::string> golden_fixture_names(const fs::path& root);

// The largest |want[i]| and the largest |got[i] - want[i]| (sizes must match; the caller asserts).
struct LogitError {
  double max_abs_logit = 0.0;
  double max_err = 0.0;
};
LogitError logit_error(const std::vector<float>& got, const std::vector<float>& want);

// Why tests can't run on device here (built without its backend, or no such device), or nullopt
// when they can. "cpu" is always testable: a CPU backend that fails to start is a failure, not a skip.
std::optional<std::string> backend_unavailable(const std::string& device);

#define SKIP_UNLESS_BACKEND(device)                                                              \
  do {                                                                                           \
    if (const std::optional<std::string> why_unavailable = ::pagellm::backend_unavailable(device)) \
      GTEST_SKIP() << "can't test on " << (device) << ": " << *why_unavailable;                  \
  } while (0)

// A parameter for tests run on every backend over every fixture of a family.
struct BackendFixture {
  std::string device;
  std::string fixture;
};
void PrintTo(const BackendFixture& param, std::ostream* os);
std::vector<BackendFixture> backend_fixtures(const std::string& device, const fs::path& root);

// Random prompts (of 150, 65, 9 and 64 tokens) longer than one 64-token chunk of the delta rule.
std::vector<std::vector<TokenId>> long_gdn_prompts();

SequenceOptions greedy_options(int max_tokens);
GenerateRequest greedy_request(std::vector<TokenId> prompt, int max_tokens);

// The transformers fixture in `dir` through the contiguous path on `device`: f32 checkpoints give the
// same greedy tokens, logits within 1e-4 relative and (where recorded) top-5 logprobs within 1e-3 at
// every step; bf16 ones the same greedy tokens while the oracle's margin is clear, logits within 2%.
void expect_matches_transformers(const std::string& device, const fs::path& dir);

// Writes <dst_dir>/model.safetensors: the checkpoint of src_dir with "model." names moved under
// text_prefix ("model.language_model.", "language_model.model."), plus zero [4, 4] f32 tensors
// named `extra` (vision towers and other weights a text engine must ignore). As released
// vision-language checkpoints keep their text model.
Status write_as_vision_language_weights(const fs::path& src_dir, const fs::path& dst_dir, const std::string& text_prefix,
                                        const std::vector<std::string>& extra);

// An engine for model_dir on device, with 64 MiB of KV cache unless config says otherwise; null (and
// a failed expectation) if it doesn't load.
std::unique_ptr<LLM> make_test_llm(const fs::path& model_dir, EngineConfig config, const std::string& device = "cpu");

// The qwen3 fixture's checkpoint tied_gqa2_hd32_f32 with the Qwen3 tokenizer beside it (its ids all
// decode), in a temporary folder named after `tag`; empty when the tokenizer assets are missing
// (scripts/setup.sh fetches them).
fs::path qwen3_fixture_with_tokenizer(const std::string& tag);

}  // namespace pagellm
