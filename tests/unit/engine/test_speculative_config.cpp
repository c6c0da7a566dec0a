// --speculative-config: vLLM's keys and defaults; every bad value is a one-line error naming it.
#include <gtest/gtest.h>

#include "engine/speculative_config.h"

namespace pagellm {
namespace {

TEST(SpeculativeConfig, NgramWithVllmDefaults) {
  auto both = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2})");
  ASSERT_TRUE(both.has_value()) << both.status().message();
  EXPECT_EQ(both->method, SpeculativeMethod::kNgram);
  EXPECT_EQ(both->num_speculative_tokens, 3);
  EXPECT_EQ(both->prompt_lookup_min, 2);
  EXPECT_EQ(both->prompt_lookup_max, 4);
  auto neither = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 1})");
  ASSERT_TRUE(neither.has_value());
  EXPECT_EQ(neither->prompt_lookup_min, 5);
  EXPECT_EQ(neither->prompt_lookup_max, 5);
  auto only_max = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_max": 3})");
  ASSERT_TRUE(only_max.has_value());
  EXPECT_EQ(only_max->prompt_lookup_min, 3);
  auto off = parse_speculative_config("  ");
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->enabled());
}

TEST(SpeculativeConfig, DraftModelImpliedByAModel) {
  auto draft = parse_speculative_config(R"({"model": "/m/draft", "num_speculative_tokens": 4})");
  ASSERT_TRUE(draft.has_value()) << draft.status().message();
  EXPECT_EQ(draft->method, SpeculativeMethod::kDraftModel);
  EXPECT_EQ(draft->draft_model_dir, "/m/draft");
  auto named = parse_speculative_config(R"({"method": "draft_model", "model": "d", "num_speculative_tokens": 2})");
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->method, SpeculativeMethod::kDraftModel);
}

TEST(SpeculativeConfig, MtpNeedsOnlyK) {
  auto mtp = parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 2})");
  ASSERT_TRUE(mtp.has_value()) << mtp.status().message();
  EXPECT_EQ(mtp->method, SpeculativeMethod::kMtp);
  EXPECT_EQ(mtp->num_speculative_tokens, 2);
  EXPECT_EQ(speculative_method_name(mtp->method), "mtp");
}

TEST(SpeculativeConfig, BadInputIsAOneLineErrorNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"{not json", "not valid JSON"},
      {"[1, 2]", "must be a JSON object"},
      {R"({"method": "ngram", "num_speculative_tokens": 3, "lookahead": 2})", "unknown key 'lookahead'"},
      {R"({"method": "eagle", "num_speculative_tokens": 3})", "unknown method 'eagle'"},
      {R"({"method": "mtp", "num_speculative_tokens": 1, "model": "x"})", "method mtp takes no model"},
      {R"({"method": 3, "num_speculative_tokens": 3})", "method must be a string"},
      {R"({"num_speculative_tokens": 3})", "needs a \"method\""},
      {R"({"method": "ngram"})", "needs num_speculative_tokens"},
      {R"({"method": "ngram", "num_speculative_tokens": 0})", "must be in [1, 15], got 0"},
      {R"({"method": "ngram", "num_speculative_tokens": 16})", "must be in [1, 15], got 16"},
      {R"({"method": "ngram", "num_speculative_tokens": 2.5})", "num_speculative_tokens must be an integer"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2})",
       "prompt_lookup_max (2) must be >= prompt_lookup_min (4)"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": -1})", "prompt_lookup_min must be >= 1"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "model": "x"})", "ngram takes no model"},
      {R"({"model": "x", "num_speculative_tokens": 2, "prompt_lookup_min": 2})", "are for method ngram"},
      {R"({"method": "draft_model", "num_speculative_tokens": 2})", "needs \"model\""},
  };
  for (const auto& [json, message] : cases) {
    auto parsed = parse_speculative_config(json);
    ASSERT_FALSE(parsed.has_value()) << json;
    const std::string& text = parsed.status().message();
    EXPECT_NE(text.find(message), std::string::npos) << json << " -> " << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    EXPECT_EQ(text.rfind("[speculative-config]", 0), 0u) << text;
  }
}

}  // namespace
}  // namespace pagellm
