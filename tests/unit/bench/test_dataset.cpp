// Datasets: seeded random prompts within the range ratio, ShareGPT loading and filtering.
#include <cstdlib>
#include <map>
#include <string>
#include <set>

#include <gtest/gtest.h>

#include "bench/dataset.h"

namespace pagellm::bench {
namespace {

const std::string kShareGptPath = std::string(PAGELLM_SOURCE_DIR) + "/tests/data/bench/sharegpt_small.json";

// Two tokens per word; decodes id i to "t<i>".
class TwoTokensPerWord : public BenchTokenizer {
 public:
  int count_tokens(std::string_view text) const override { return 2 * count_words(text); }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += "t" + std::to_string(id);
    return out;
  }
  int vocab_size() const override { return 50; }
};

TEST(RandomDataset, LengthsWithinRangeRatioAndSeeded) {
  RandomDatasetOptions options;
  options.num_prompts = 200;
  options.input_len = 100;
  options.output_len = 20;
  options.range_ratio = 0.25;
  options.seed = 3;
  Dataset a = make_random_dataset(options, nullptr).value();
  ASSERT_EQ(a.requests.size(), 200u);
  std::set<int> input_lens;
  for (const BenchRequest& r : a.requests) {
    EXPECT_GE(r.prompt_len, 75);
    EXPECT_LE(r.prompt_len, 125);
    EXPECT_GE(r.output_len, 15);
    EXPECT_LE(r.output_len, 25);
    EXPECT_EQ(static_cast<int>(r.prompt_token_ids.size()), r.prompt_len);
    for (int32_t id : r.prompt_token_ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, kDefaultRandomVocabSize);
    }
    input_lens.insert(r.prompt_len);
  }
  EXPECT_GT(input_lens.size(), 20u);  // really spread over the range
  EXPECT_TRUE(a.notes.empty());
  Dataset b = make_random_dataset(options, nullptr).value();
  EXPECT_EQ(a.requests[17].prompt_token_ids, b.requests[17].prompt_token_ids);
  options.seed = 4;
  Dataset c = make_random_dataset(options, nullptr).value();
  EXPECT_NE(a.requests[17].prompt_token_ids, c.requests[17].prompt_token_ids);
}

TEST(RandomDataset, FixedLengthsWithoutRangeRatio) {
  RandomDatasetOptions options;
  options.num_prompts = 10;
  options.input_len = 32;
  options.output_len = 8;
  Dataset fixed = make_random_dataset(options, nullptr).value();
  for (const BenchRequest& r : fixed.requests) {
    EXPECT_EQ(r.prompt_len, 32);
    EXPECT_EQ(r.output_len, 8);
  }
  options.range_ratio = 1.0;
  EXPECT_FALSE(make_random_dataset(options, nullptr).has_value());
}

TEST(RandomDataset, TextForChatDecodesWithTokenizerOrFallsBackToWords) {
  RandomDatasetOptions options;
  options.num_prompts = 3;
  options.input_len = 16;
  options.as_text = true;
  TwoTokensPerWord tokenizer;
  Dataset decoded = make_random_dataset(options, &tokenizer).value();
  EXPECT_TRUE(decoded.requests[0].prompt_token_ids.empty());
  EXPECT_EQ(decoded.requests[0].prompt_text.rfind("t", 0), 0u);
  EXPECT_TRUE(decoded.notes.empty());

  Dataset words = make_random_dataset(options, nullptr).value();
  EXPECT_EQ(count_words(words.requests[0].prompt_text), 16);
  ASSERT_EQ(words.notes.size(), 1u);
  EXPECT_NE(words.notes[0].find("approximate"), std::string::npos);
}

TEST(MixedDataset, ClassesAlikeOftenShuffledAndSeeded) {
  MixedDatasetOptions options;
  options.random.num_prompts = 23;
  options.random.output_len = 8;
  options.random.seed = 4;
  options.input_lens = {300, 40, 7};
  const Dataset mixed = make_mixed_dataset(options, nullptr).value();
  ASSERT_EQ(mixed.requests.size(), 23u);
  std::map<int, int> per_class;
  std::string order;
  for (const BenchRequest& r : mixed.requests) {
    EXPECT_EQ(r.prompt_len, r.input_class);  // no range ratio: each prompt has its class's length
    EXPECT_EQ(static_cast<int>(r.prompt_token_ids.size()), r.prompt_len);
    EXPECT_EQ(r.output_len, 8);
    ++per_class[r.input_class];
    order += std::to_string(r.input_class) + " ";
  }
  EXPECT_EQ(per_class, (std::map<int, int>{{7, 7}, {40, 8}, {300, 8}}));
  // Shuffled: not the classes in turn; and the same seed gives the same prompts in the same order.
  EXPECT_NE(order.substr(0, 12), "300 40 7 300");
  const Dataset again = make_mixed_dataset(options, nullptr).value();
  for (size_t i = 0; i < mixed.requests.size(); ++i)
    EXPECT_EQ(again.requests[i].prompt_token_ids, mixed.requests[i].prompt_token_ids);
  options.random.num_prompts = 2;
  EXPECT_FALSE(make_mixed_dataset(options, nullptr).has_value());  // fewer prompts than classes
  options.input_lens.clear();
  EXPECT_FALSE(make_mixed_dataset(options, nullptr).has_value());
}

TEST(ShareGpt, ValidityRule) {
  EXPECT_TRUE(is_valid_sharegpt_pair(4, 4, false));
  EXPECT_FALSE(is_valid_sharegpt_pair(3, 100, false));
  EXPECT_FALSE(is_valid_sharegpt_pair(100, 3, false));
  EXPECT_TRUE(is_valid_sharegpt_pair(100, 3, true));
  EXPECT_TRUE(is_valid_sharegpt_pair(1024, 1024, false));
  EXPECT_FALSE(is_valid_sharegpt_pair(1025, 4, false));
  EXPECT_FALSE(is_valid_sharegpt_pair(1000, 1049, false));
}

TEST(ShareGpt, WhitespaceFallbackFiltersTheSmallFile) {
  ShareGptOptions options;
  options.path = kShareGptPath;
  options.num_prompts = 100;
  Dataset all = load_sharegpt_dataset(options, nullptr).value();
  // 12 good conversations; short prompt, short answer, one turn, prompt > 1024, total > 2048 and
  // a malformed entry are dropped; the rest repeat to reach 100.
  ASSERT_EQ(all.requests.size(), 100u);
  std::set<std::string> unique;
  for (const BenchRequest& r : all.requests) {
    unique.insert(r.prompt_text);
    EXPECT_TRUE(is_valid_sharegpt_pair(r.prompt_len, r.output_len, false));
    EXPECT_EQ(r.prompt_len, count_words(r.prompt_text));
    EXPECT_TRUE(r.prompt_token_ids.empty());
  }
  EXPECT_EQ(unique.size(), 12u);
  ASSERT_EQ(all.notes.size(), 2u);
  EXPECT_NE(all.notes[0].find("only 12 usable"), std::string::npos);
  EXPECT_NE(all.notes[1].find("whitespace"), std::string::npos);

  options.num_prompts = 5;
  Dataset five = load_sharegpt_dataset(options, nullptr).value();
  EXPECT_EQ(five.requests.size(), 5u);
  EXPECT_EQ(five.notes.size(), 1u);
  options.seed = 1;
  Dataset other_order = load_sharegpt_dataset(options, nullptr).value();
  EXPECT_NE(five.requests[0].prompt_text + five.requests[1].prompt_text,
            other_order.requests[0].prompt_text + other_order.requests[1].prompt_text);
}

TEST(ShareGpt, FixedOutputLenSkipsTheOutputCheck) {
  ShareGptOptions options;
  options.path = kShareGptPath;
  options.num_prompts = 100;
  options.fixed_output_len = 2;
  Dataset d = load_sharegpt_dataset(options, nullptr).value();
  std::set<std::string> unique;
  for (const BenchRequest& r : d.requests) {
    unique.insert(r.prompt_text);
    EXPECT_EQ(r.output_len, 2);
  }
  EXPECT_EQ(unique.size(), 14u);  // + the short answer, + the 1000-word prompt (1002 ≤ 2048)
}

TEST(ShareGpt, UsesTheTokenizerWhenGiven) {
  ShareGptOptions options;
  options.path = kShareGptPath;
  options.num_prompts = 100;
  TwoTokensPerWord tokenizer;
  Dataset d = load_sharegpt_dataset(options, &tokenizer).value();
  std::set<std::string> unique;
  for (const BenchRequest& r : d.requests) {
    unique.insert(r.prompt_text);
    EXPECT_EQ(r.prompt_len, 2 * count_words(r.prompt_text));
  }
  EXPECT_EQ(unique.size(), 13u);  // the 2-word prompt is 4 tokens now; the 1-word answer still too short
  ASSERT_EQ(d.notes.size(), 1u);  // only the repetition note
}

TEST(ShareGpt, ErrorsSayWhatIsWrong) {
  ShareGptOptions options;
  options.path = "/nonexistent/sharegpt.json";
  EXPECT_NE(load_sharegpt_dataset(options, nullptr).status().message().find("cannot open"), std::string::npos);
  options.path = "";
  EXPECT_NE(load_sharegpt_dataset(options, nullptr).status().message().find("--dataset-path"), std::string::npos);
}

TEST(Tokenizer, MissingDirectoryIsABenchError) {
  auto tokenizer = load_bench_tokenizer("/nonexistent/model");
  ASSERT_FALSE(tokenizer.has_value());
  EXPECT_EQ(tokenizer.status().message().rfind("[bench] --tokenizer", 0), 0u) << tokenizer.status().message();
}

// With a real tokenizer (assets/tokenizers/, fetched by the setup script): exact ShareGPT lengths and
// random ids decoded to chat text.
TEST(Tokenizer, RealTokenizerDrivesBothDatasets) {
  const std::string dir = std::string(PAGELLM_SOURCE_DIR) + "/assets/tokenizers/qwen3";
  auto loaded = load_bench_tokenizer(dir);
  if (!loaded.has_value()) GTEST_SKIP() << loaded.status().message();
  const BenchTokenizer& tokenizer = **loaded;
  EXPECT_GT(tokenizer.vocab_size(), 100000);
  EXPECT_GE(tokenizer.count_tokens("Hello world, this is a test."), 5);

  ShareGptOptions sharegpt;
  sharegpt.path = kShareGptPath;
  sharegpt.num_prompts = 5;
  Dataset exact = load_sharegpt_dataset(sharegpt, &tokenizer).value();
  ASSERT_EQ(exact.requests.size(), 5u);
  EXPECT_EQ(exact.requests[0].prompt_len, tokenizer.count_tokens(exact.requests[0].prompt_text));
  EXPECT_TRUE(exact.notes.empty());

  RandomDatasetOptions random;
  random.num_prompts = 2;
  random.input_len = 32;
  random.as_text = true;
  Dataset text = make_random_dataset(random, &tokenizer).value();
  EXPECT_FALSE(text.requests[0].prompt_text.empty());
  EXPECT_TRUE(text.notes.empty());
}

// Random ids stay inside the text model's vocabulary: Gemma 3's tokenizer ends with the special
// <image_soft_token> (262144), one past gemma-3-1b's 262144 embedding rows; Qwen3's added tokens end
// with the non-special </think>, so its range (and every Qwen3 benchmark's prompts) is unchanged.
TEST(Tokenizer, RandomIdsSkipATrailingRunOfSpecialTokens) {
  const std::string root = std::string(PAGELLM_SOURCE_DIR) + "/assets/tokenizers/";
  auto gemma = load_bench_tokenizer(root + "gemma3");
  auto qwen = load_bench_tokenizer(root + "qwen3");
  if (!gemma.has_value() || !qwen.has_value()) {
    if (std::getenv("CI") != nullptr) FAIL() << "tokenizer assets missing (scripts/setup.sh fetches them)";
    GTEST_SKIP() << "tokenizer assets missing";
  }
  EXPECT_EQ((*gemma)->vocab_size(), 262144);
  EXPECT_EQ((*qwen)->vocab_size(), 151669);
}

}  // namespace
}  // namespace pagellm::bench
