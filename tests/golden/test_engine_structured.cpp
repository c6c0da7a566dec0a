// Structured outputs through the engine on the qwen3 fixture with the Qwen3 tokenizer: the grammar
// constrains from the first token, or (with a reasoning parser) only after the reasoning's end
// marker, the tokens before it being exactly the free run's; in sync and async scheduling, which
// give the same tokens (async fills a step's masks while its forward runs); aborts mid-flight.
#include <algorithm>
#include <optional>
#include <regex>
#include <string>
#include <thread>
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

// Seeded requests at temperature 1 of every constraint the server sends (json_schema, json_object,
// regex, tool_choice required's list of calls, a grammar after the reasoning) mixed with free ones:
// async scheduling, which fills a step's masks only after the step before is committed, while the
// step's forward runs, gives exactly the tokens of sync scheduling.
TEST(StructuredEngineAsync, ConstrainedOutputsAreTheSameWithAndWithoutAsyncScheduling) {
  const fs::path dir = qwen3_fixture_with_tokenizer("structured_async");
  if (dir.empty()) GTEST_SKIP() << "assets/tokenizers/qwen3 missing (scripts/setup.sh)";
  const std::vector<structured::Constraint> constraints = {
      {structured::ConstraintKind::kJsonSchema,
       R"({"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "integer"}},
           "inner": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},
           "required": ["name", "tags", "inner"], "additionalProperties": false})",
       {}},
      {structured::ConstraintKind::kJsonObject, "", {}},
      {structured::ConstraintKind::kRegex, "[a-z]{3,8}(-[0-9]{2,4})+", {}},
      // tool_choice "required" (server/tool_parser_choice.cpp's schema for two tools).
      {structured::ConstraintKind::kJsonSchema,
       R"({"type": "array", "minItems": 1, "items": {"anyOf": [
           {"type": "object", "properties": {"name": {"type": "string", "enum": ["get_weather"]},
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            "required": ["name", "parameters"]},
           {"type": "object", "properties": {"name": {"type": "string", "enum": ["add"]},
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]}}, "required": ["name", "parameters"]}]}})",
       {}},
  };
  auto run = [&](int async_scheduling) {
    EngineConfig config;
    config.async_scheduling = async_scheduling;
    config.max_num_batched_tokens = 16;  // prompts in chunks: constrained rows start at different steps
    auto llm = make_test_llm(dir, config);
    EXPECT_TRUE(llm);
    if (!llm) return std::vector<CompletedRequest>{};
    auto compiler = llm->engine().grammar_compiler();
    EXPECT_TRUE(compiler.has_value());
    std::vector<GenerateRequest> requests;
    std::vector<std::pair<size_t, std::vector<TokenId>>> reasonings;  // request index, free run to the marker
    for (uint64_t seed : {1u, 2u, 3u}) {
      for (size_t c = 0; c < constraints.size(); ++c) {
        GenerateRequest r = greedy_request({static_cast<TokenId>(10 + c), 20, static_cast<TokenId>(seed), 7}, 24 + static_cast<int>(4 * c));
        r.sampling.temperature = 1.0f;
        r.sampling.seed = seed;
        auto grammar = (*compiler)->compile(constraints[c]);
        EXPECT_TRUE(grammar.has_value()) << grammar.status().message();
        r.grammar = *grammar;
        requests.push_back(r);
      }
      // A grammar after the reasoning: the reasoning is the same seed's free run (its masks are all
      // ones), so the marker, its token 2 + seed, comes then and the grammar starts after it.
      GenerateRequest reasoning = greedy_request({30, 31, static_cast<TokenId>(seed)}, 24);
      reasoning.sampling.temperature = 1.0f;
      reasoning.sampling.seed = seed;
      const std::vector<TokenId> free_reasoning = llm->generate({reasoning})[0].token_ids;
      reasoning.grammar = *(*compiler)->compile(constraints[2]);
      reasoning.grammar_starts_after = {free_reasoning.at(2 + seed)};
      const auto marker = std::find(free_reasoning.begin(), free_reasoning.end(), free_reasoning[2 + seed]);
      reasonings.emplace_back(requests.size(), std::vector<TokenId>(free_reasoning.begin(), marker + 1));
      requests.push_back(reasoning);
      GenerateRequest free_run = greedy_request({40, static_cast<TokenId>(seed)}, 16);
      free_run.sampling.temperature = 1.0f;
      free_run.sampling.seed = seed;
      requests.push_back(free_run);
    }
    std::vector<CompletedRequest> outs = llm->generate(std::move(requests));
    EXPECT_TRUE(llm->engine().is_idle_and_leak_free());
    for (const auto& [i, reasoned] : reasonings) {
      const std::vector<TokenId>& out = outs[i].token_ids;
      EXPECT_GT(out.size(), reasoned.size());
      EXPECT_TRUE(std::equal(reasoned.begin(), reasoned.end(), out.begin())) << "request " << i;
      const std::string answer = llm->engine().tokenizer()->decode(
          std::vector<TokenId>(out.begin() + static_cast<long>(reasoned.size()), out.end()), false);
      EXPECT_TRUE(std::regex_match(answer, std::regex("[a-z]{3,8}(-[0-9]{2,4})*-?[0-9]{0,4}"))) << answer;
    }
    return outs;
  };
  const std::vector<CompletedRequest> sync = run(0), async = run(1);
  ASSERT_EQ(sync.size(), async.size());
  for (size_t i = 0; i < sync.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + ": " + sync[i].text);
    EXPECT_TRUE(sync[i].error.is_ok()) << sync[i].error.message();
    EXPECT_FALSE(sync[i].token_ids.empty());
    EXPECT_EQ(sync[i].token_ids, async[i].token_ids);
    EXPECT_EQ(sync[i].text, async[i].text);
    EXPECT_EQ(sync[i].finish_reason, async[i].finish_reason);
  }
  fs::remove_all(dir);
}

// Aborting a constrained request while its steps are in flight frees everything, and the
// constrained request beside it still gives the tokens it gives alone.
TEST_P(StructuredEngine, AbortOfAConstrainedRequestMidFlight) {
  auto request = [&](TokenId first, int max_tokens) {
    GenerateRequest r = greedy_request({first, 20, 7}, max_tokens);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 5;
    auto compiler = llm_->engine().grammar_compiler();
    r.grammar = *(*compiler)->compile({structured::ConstraintKind::kRegex, "[a-z]+(-[a-z]+)*", {}});
    return r;
  };
  const std::vector<CompletedRequest> alone = llm_->generate({request(11, 20)});
  ASSERT_TRUE(alone[0].error.is_ok()) << alone[0].error.message();
  auto doomed = llm_->engine().submit(request(12, 200));
  auto kept = llm_->engine().submit(request(11, 20));
  ASSERT_TRUE(doomed.has_value() && kept.has_value());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*doomed)->next().has_value());
  llm_->engine().abort((*doomed)->id());
  std::optional<FinishReason> reason;
  while (auto out = (*doomed)->next()) reason = out->finish_reason;
  EXPECT_EQ(reason, FinishReason::kAbort);
  std::vector<TokenId> kept_ids;
  while (auto out = (*kept)->next()) kept_ids.insert(kept_ids.end(), out->token_ids.begin(), out->token_ids.end());
  EXPECT_EQ(kept_ids, alone[0].token_ids);
  for (int i = 0; i < 100 && !llm_->engine().is_idle_and_leak_free(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(llm_->engine().is_idle_and_leak_free());
}

}  // namespace
}  // namespace pagellm
