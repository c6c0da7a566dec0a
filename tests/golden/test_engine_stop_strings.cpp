// Stop strings through the engine, many requests at once. The engine publishes a step's outputs
// while the next step already runs (engine.h), so a stop string is found after its request was
// planned once more: the extra token must never reach the output, the text must end right before
// the stop string, and every block must come back.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "golden_util.h"

namespace pagellm {
namespace {

void expect_text_ends_before_the_stop_string(int async_scheduling) {
  const fs::path dir = qwen3_fixture_with_tokenizer("stop_strings");
  if (dir.empty()) GTEST_SKIP() << "assets/tokenizers/qwen3 missing (scripts/setup.sh)";
  EngineConfig config;
  config.async_scheduling = async_scheduling;
  auto llm = make_test_llm(dir, config);
  ASSERT_TRUE(llm);

  // Free runs: 12 prompts, 48 greedy tokens each.
  constexpr int kRequests = 12, kTokens = 48;
  std::vector<GenerateRequest> free_runs;
  for (int i = 0; i < kRequests; ++i) {
    GenerateRequest r = greedy_request({static_cast<TokenId>(10 + i), static_cast<TokenId>(20 + 3 * i), 7}, kTokens);
    r.sampling.ignore_eos = true;
    free_runs.push_back(r);
  }
  const std::vector<CompletedRequest> full = llm->generate(free_runs);

  // The same requests with a stop string taken from the middle of each free run's text: two
  // characters that first occur at or after character 10.
  std::vector<GenerateRequest> stopped_runs = free_runs;
  std::vector<std::string> stops(kRequests), want(kRequests);
  int with_stop = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::string& text = full[static_cast<size_t>(i)].text;
    for (size_t at = 10; at + 2 <= text.size(); ++at) {
      const std::string candidate = text.substr(at, 2);
      if (static_cast<unsigned char>(candidate[0]) >= 0x80 || static_cast<unsigned char>(candidate[1]) >= 0x80) continue;
      if (text.find(candidate) != at) continue;
      stops[static_cast<size_t>(i)] = candidate;
      want[static_cast<size_t>(i)] = text.substr(0, at);
      stopped_runs[static_cast<size_t>(i)].stop_strings = {candidate};
      ++with_stop;
      break;
    }
  }
  ASSERT_GE(with_stop, kRequests / 2) << "the free runs' texts gave too few usable stop strings";
  // Requests without a usable stop string run as before (max_tokens 1 keeps them out of the way).
  for (int i = 0; i < kRequests; ++i)
    if (stops[static_cast<size_t>(i)].empty()) stopped_runs[static_cast<size_t>(i)].sampling.max_tokens = 1;
  const uint64_t steps_before = llm->engine().metrics().steps;
  const std::vector<CompletedRequest> stopped = llm->generate(stopped_runs);
  // Every output is in; let the engine go idle before counting its steps.
  for (int i = 0; i < 200 && !llm->engine().is_idle_and_leak_free(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
  const uint64_t steps = llm->engine().metrics().steps - steps_before;
  size_t longest = 0;
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + " stop '" + stops[static_cast<size_t>(i)] + "'");
    const CompletedRequest& got = stopped[static_cast<size_t>(i)];
    ASSERT_TRUE(got.error.is_ok()) << got.error.message();
    if (stops[static_cast<size_t>(i)].empty()) continue;
    longest = std::max(longest, got.token_ids.size());
    EXPECT_EQ(got.finish_reason, FinishReason::kStop);
    EXPECT_EQ(got.text, want[static_cast<size_t>(i)]);
    // The tokens are the free run's, up to the one that completed the stop string.
    ASSERT_LE(got.token_ids.size(), full[static_cast<size_t>(i)].token_ids.size());
    EXPECT_TRUE(std::equal(got.token_ids.begin(), got.token_ids.end(), full[static_cast<size_t>(i)].token_ids.begin()));
  }
  // A stopped request stops computing: one prefill step, a step per token, and at most one more
  // (the step already planned when its stop string was found).
  EXPECT_LE(steps, longest + 2) << "stopped requests kept running";
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

TEST(EngineStopStrings, TextEndsBeforeTheStopStringAndNothingLeaks) { expect_text_ends_before_the_stop_string(0); }

// Planned a step ahead, the step after the stop string is already queued when it is found.
TEST(EngineStopStrings, TextEndsBeforeTheStopStringWithAsyncScheduling) { expect_text_ends_before_the_stop_string(1); }

}  // namespace
}  // namespace pagellm
