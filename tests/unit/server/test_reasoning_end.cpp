// Where the grammar of a constrained answer starts with a reasoning parser, on the real tokenizers:
// after </think> (Qwen3, DeepSeek-R1) or the harmony final channel's header (gpt-oss), unless the
// rendered prompt already ended the reasoning (Qwen3's enable_thinking=false renders an empty,
// closed think block).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "server/reasoning_end.h"

namespace pagellm::server {
namespace {

std::shared_ptr<const Tokenizer> tokenizer_of(const std::string& family) {
  const std::string dir = std::string(PAGELLM_SOURCE_DIR) + "/assets/tokenizers/" + family;
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return nullptr;
  auto tokenizer = Tokenizer::from_dir(dir);
  EXPECT_TRUE(tokenizer.has_value()) << tokenizer.status().message();
  return tokenizer.has_value() ? *tokenizer : nullptr;
}

std::vector<TokenId> encode(const Tokenizer& tokenizer, const std::string& text) {
  auto ids = tokenizer.encode(text, /*add_special_tokens=*/false);
  EXPECT_TRUE(ids.has_value());
  return ids.has_value() ? *ids : std::vector<TokenId>{};
}

TEST(ReasoningEnd, ThinkBlocksEndAtTheCloseTokenUnlessThePromptClosedThem) {
  const auto tokenizer = tokenizer_of("qwen3");
  if (!tokenizer) GTEST_SKIP() << "assets/tokenizers/qwen3 missing (scripts/setup.sh)";
  const TokenId think_end = *tokenizer->token_to_id("</think>");
  const std::string user = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  // Thinking on: the model opens the block itself, or the template opened it.
  for (const std::string& prompt : {user, user + "<think>\n"}) {
    EXPECT_EQ(grammar_start_marker("qwen3", *tokenizer, encode(*tokenizer, prompt)), std::vector<TokenId>{think_end});
    EXPECT_EQ(grammar_start_marker("deepseek_r1", *tokenizer, encode(*tokenizer, prompt)), std::vector<TokenId>{think_end});
  }
  // enable_thinking=false: the prompt ends with an empty block, the answer starts at once.
  EXPECT_TRUE(grammar_start_marker("qwen3", *tokenizer, encode(*tokenizer, user + "<think>\n\n</think>\n\n")).empty());
  // A closed block earlier, then a new one opened: still reasoning.
  EXPECT_FALSE(
      grammar_start_marker("qwen3", *tokenizer, encode(*tokenizer, user + "<think>\n\n</think>\n\nok<|im_end|>\n" + user + "<think>"))
          .empty());
  // No reasoning parser: the grammar applies from the first token.
  EXPECT_TRUE(grammar_start_marker("", *tokenizer, encode(*tokenizer, user)).empty());
}

TEST(ReasoningEnd, HarmonyEndsAtTheFinalChannelHeader) {
  const auto tokenizer = tokenizer_of("gptoss");
  if (!tokenizer) GTEST_SKIP() << "assets/tokenizers/gptoss missing (scripts/setup.sh)";
  const std::vector<TokenId> header = encode(*tokenizer, "<|channel|>final<|message|>");
  ASSERT_EQ(header.size(), 3u);
  const std::string history =
      "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello<|end|>"
      "<|start|>user<|message|>Again<|end|>";
  // An earlier turn's final channel does not end this turn's reasoning.
  EXPECT_EQ(grammar_start_marker("openai", *tokenizer, encode(*tokenizer, history + "<|start|>assistant")), header);
  EXPECT_TRUE(
      grammar_start_marker("openai", *tokenizer, encode(*tokenizer, history + "<|start|>assistant<|channel|>final<|message|>"))
          .empty());
}

}  // namespace
}  // namespace pagellm::server
