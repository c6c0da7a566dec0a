// Structured outputs through the engine on the qwen3 fixture with the Qwen3 tokenizer: the grammar
// constrains from the first token, or (with a reasoning parser) only after the reasoning's end
// marker, the tokens before it being exactly the free run's; in sync and async scheduling.
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "golden_util.h"

namespace pagellm {
namespace {

class StructuredEngine : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = qwen3_fixture_with_tokenizer("structured");
    if (dir_.empty()) GTEST_SKIP() << "assets/tokenizers/qwen3 missing (scripts/setup.sh)";
    EngineConfig config;
    config.async_scheduling = GetParam();
    llm_ = make_test_llm(dir_, config);
    ASSERT_TRUE(llm_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::shared_ptr<const structured::CompiledGrammar> three_digits() {
    auto compiler = llm_->engine().grammar_compiler();
    EXPECT_TRUE(compiler.has_value());
    auto grammar = (*compiler)->compile({structured::ConstraintKind::kRegex, "[0-9]{3}", {}});
    EXPECT_TRUE(grammar.has_value()) << grammar.status().message();
    return *grammar;
  }
  std::string text_of(const std::vector<TokenId>& ids) const {
    return llm_->engine().tokenizer()->decode(ids, /*skip_special_tokens=*/false);
  }
  fs::path dir_;
  std::unique_ptr<LLM> llm_;
};
INSTANTIATE_TEST_SUITE_P(SyncAndAsync, StructuredEngine, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) { return info.param ? "async" : "sync"; });

TEST_P(StructuredEngine, TheGrammarStartsAfterTheReasoningEndMarker) {
  // The fixture has no EOS: each constrained run ends by max_tokens right after its three digits.
  constexpr int kFreeTokens = 12;
  const std::vector<std::vector<TokenId>> prompts = {{10, 20, 7}, {3, 99, 41, 5}, {200, 1}};
  std::vector<GenerateRequest> free_runs;
  for (const auto& prompt : prompts) free_runs.push_back(greedy_request(prompt, kFreeTokens));
  const std::vector<CompletedRequest> free = llm_->generate(free_runs);

  std::vector<GenerateRequest> constrained;
  std::vector<size_t> marker_at;
  for (size_t i = 0; i < prompts.size(); ++i) {
    // The marker: the first free token after the first that did not come before (so the reasoning
    // ends there), or the first token when the free run repeats one token.
    const std::vector<TokenId>& out = free[i].token_ids;
    ASSERT_EQ(out.size(), static_cast<size_t>(kFreeTokens));
    size_t at = 1;
    while (at < out.size() && std::find(out.begin(), out.begin() + static_cast<long>(at), out[at]) != out.begin() + static_cast<long>(at)) ++at;
    if (at == out.size()) at = 0;
    marker_at.push_back(at);
    GenerateRequest r = greedy_request(prompts[i], static_cast<int>(at) + 1 + 3);
    r.grammar = three_digits();
    r.grammar_starts_after = {out[at]};
    constrained.push_back(r);
  }
  // A grammar whose marker never comes: the whole run is free reasoning.
  GenerateRequest never = greedy_request(prompts[0], kFreeTokens);
  never.grammar = three_digits();
  never.grammar_starts_after = {-7};
  constrained.push_back(never);
  // No marker (the prompt already ended the reasoning): digits from the first token.
  GenerateRequest at_once = greedy_request(prompts[1], 3);
  at_once.grammar = three_digits();
  constrained.push_back(at_once);

  const std::vector<CompletedRequest> outs = llm_->generate(constrained);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    ASSERT_TRUE(outs[i].error.is_ok()) << outs[i].error.message();
    const std::vector<TokenId>& out = outs[i].token_ids;
    const size_t reasoning = marker_at[i] + 1;
    ASSERT_EQ(out.size(), reasoning + 3);
    EXPECT_EQ(std::vector<TokenId>(out.begin(), out.begin() + static_cast<long>(reasoning)),
              std::vector<TokenId>(free[i].token_ids.begin(), free[i].token_ids.begin() + static_cast<long>(reasoning)));
    const std::string answer = text_of(std::vector<TokenId>(out.begin() + static_cast<long>(reasoning), out.end()));
    EXPECT_TRUE(std::regex_match(answer, std::regex("[0-9]{3}"))) << answer;
  }
  EXPECT_EQ(outs[prompts.size()].token_ids, free[0].token_ids);
  EXPECT_TRUE(std::regex_match(text_of(outs.back().token_ids), std::regex("[0-9]{3}"))) << text_of(outs.back().token_ids);
  EXPECT_TRUE(llm_->engine().is_idle_and_leak_free());
}

}  // namespace
}  // namespace pagellm
