// Reasoning parsers (qwen3, deepseek_r1, openai) and the chat output pipeline (reasoning, then
// tool calls; tool_choice required / named), whole text and streamed split at every byte.
#include <gtest/gtest.h>

#include "parser_test_util.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser_choice.h"

namespace pagellm::server::test {
namespace {

ParserFactory reasoning_parser(const std::string& name, const std::string& prompt = "") {
  return [name, prompt](ToolCallIdFn) { return make_reasoning_parser(name, prompt); };
}

constexpr const char* kQwen3Prompt = "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n";

TEST(Qwen3ReasoningParser, ThinkBlockIsReasoning) {
  expect_parses(reasoning_parser("qwen3", kQwen3Prompt),
                "<think>\nRayleigh scattering: shorter wavelengths scatter more. 蓝色.\n</think>\n\nBecause of Rayleigh scattering.",
                {"Because of Rayleigh scattering.", {}, "\nRayleigh scattering: shorter wavelengths scatter more. 蓝色.\n"});
}

TEST(Qwen3ReasoningParser, NoThinkBlockIsContent) {
  expect_parses(reasoning_parser("qwen3", kQwen3Prompt), "Because of Rayleigh scattering. </think> stays.",
                {"Because of Rayleigh scattering. </think> stays.", {}, ""});
  // enable_thinking=false: the template wrote an empty, closed block into the prompt.
  expect_parses(reasoning_parser("qwen3", std::string(kQwen3Prompt) + "<think>\n\n</think>\n\n"), "Short answer.",
                {"Short answer.", {}, ""});
}

TEST(Qwen3ReasoningParser, LeadingEndTagClosesAnEmptyBlock) {
  // A constrained answer after the reasoning: the model skipped its thinking and wrote </think>.
  expect_parses(reasoning_parser("qwen3", kQwen3Prompt), "</think>{\"city\":\"Oslo\"}", {"{\"city\":\"Oslo\"}", {}, ""});
  expect_parses(reasoning_parser("qwen3", kQwen3Prompt), "</thin", {"</thin", {}, ""});  // cut off: text
}

TEST(Qwen3ReasoningParser, PromptThatOpensTheBlockMakesTheOutputStartInReasoning) {
  // Qwen3-2507 thinking templates end the generation prompt with "<think>\n".
  expect_parses(reasoning_parser("qwen3", std::string(kQwen3Prompt) + "<think>\n"),
                "The user asks about the sky.\n</think>\n\nRayleigh scattering.",
                {"Rayleigh scattering.", {}, "The user asks about the sky.\n"});
  EXPECT_TRUE(prompt_opens_think_block("a<think>\n"));
  EXPECT_FALSE(prompt_opens_think_block("a<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_think_block("no block"));
}

TEST(Qwen3ReasoningParser, CutOffWhileThinkingIsAllReasoning) {
  expect_parses(reasoning_parser("qwen3", kQwen3Prompt), "<think>\nStill thinking about </thi",
                {"", {}, "\nStill thinking about </thi"});
}

TEST(DeepSeekR1ReasoningParser, EverythingBeforeTheEndTagIsReasoning) {
  expect_parses(reasoning_parser("deepseek_r1"), "Let me compute 3*7 = 21.\n</think>\n\n**21**", {"**21**", {}, "Let me compute 3*7 = 21.\n"});
  expect_parses(reasoning_parser("deepseek_r1"), "<think>r</think>a", {"a", {}, "r"});
  expect_parses(reasoning_parser("deepseek_r1"), "no end tag yet", {"", {}, "no end tag yet"});
}

TEST(OpenAiReasoningParser, AnalysisIsReasoningFinalIsContentCallsStayContent) {
  expect_parses(reasoning_parser("openai"),
                "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
                {"Done.", {}, "Think."});
}

ParserFactory chat_parser(ChatOutputOptions options, std::string prompt) {
  return [options, prompt](ToolCallIdFn ids) -> std::unique_ptr<OutputParser> {
    // The pipeline makes its own ids; the tests compare calls by name and arguments, so ids are
    // replaced by counting ones in a thin wrapper.
    struct Renumber final : OutputParser {
      std::unique_ptr<OutputParser> inner;
      ToolCallIdFn ids;
      void fix(MessageDelta& out, size_t from) {
        for (size_t i = from; i < out.tool_calls.size(); ++i)
          if (!out.tool_calls[i].id.empty()) out.tool_calls[i].id = ids();
      }
      void feed(std::string_view text, MessageDelta& out) override {
        const size_t from = out.tool_calls.size();
        inner->feed(text, out);
        fix(out, from);
      }
      void finish(MessageDelta& out) override {
        const size_t from = out.tool_calls.size();
        inner->finish(out);
        fix(out, from);
      }
    };
    auto wrapper = std::make_unique<Renumber>();
    wrapper->inner = make_chat_output_parser(options, prompt);
    wrapper->ids = std::move(ids);
    return wrapper;
  };
}

Json weather_tools() {
  return Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "get_time"}}])");
}

TEST(ChatOutputParser, Qwen3ThinkingThenHermesCalls) {
  ChatOutputOptions options;
  options.reasoning_parser = "qwen3";
  options.tool_parser = "hermes";
  options.tools = weather_tools();
  expect_parses(chat_parser(options, kQwen3Prompt),
                "<think>\nThe user wants weather for two cities.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
                "\"arguments\": {\"city\": \"Lyon\"}}\n</tool_call>",
                {"", {{"get_weather", R"({"city": "Paris"})"}, {"get_weather", R"({"city": "Lyon"})"}},
                 "\nThe user wants weather for two cities.\n"});
  options.parallel_tool_calls = false;
  expect_parses(chat_parser(options, kQwen3Prompt),
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                {"", {{"get_weather", R"({"city": "Paris"})"}}});
}

TEST(ChatOutputParser, NamedAndRequiredToolChoiceReadTheWholeText) {
  ChatOutputOptions named;
  named.tools = weather_tools();
  named.tool_choice = {ToolChoice::Mode::kNamed, "get_weather"};
  expect_parses(chat_parser(named, ""), "{\"city\": \"Paris\"}", {"", {{"get_weather", R"({"city": "Paris"})"}}});
  expect_parses(chat_parser(named, ""), "not json", {"not json", {}});
  ChatOutputOptions required = named;
  required.tool_choice = {ToolChoice::Mode::kRequired, ""};
  expect_parses(chat_parser(required, ""),
                "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}, {\"name\": \"get_time\", \"parameters\": {}}]",
                {"", {{"get_weather", R"({"city": "Oslo"})"}, {"get_time", "{}"}}});
  expect_parses(chat_parser(required, ""), "[]", {"[]", {}});
}

TEST(ChatOutputParser, NothingToParseIsNull) {
  ChatOutputOptions options;
  options.tool_choice.mode = ToolChoice::Mode::kNone;
  options.tool_parser = "hermes";
  EXPECT_EQ(make_chat_output_parser(options, ""), nullptr);
}

TEST(ToolChoiceSchema, NamedIsTheParametersRequiredIsAListOfCalls) {
  const Json tools = weather_tools();
  EXPECT_EQ(tool_choice_schema({ToolChoice::Mode::kNamed, "get_weather"}, tools, true), tools[0]["function"]["parameters"]);
  EXPECT_EQ(tool_choice_schema({ToolChoice::Mode::kNamed, "get_time"}, tools, true),
            Json::parse(R"({"type": "object", "properties": {}})"));
  const Json required = tool_choice_schema({ToolChoice::Mode::kRequired, ""}, tools, false);
  EXPECT_EQ(required["type"], "array");
  EXPECT_EQ(required["minItems"], 1);
  EXPECT_EQ(required["maxItems"], 1);
  ASSERT_EQ(required["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(required["items"]["anyOf"][0]["properties"]["name"]["enum"], Json::array({"get_weather"}));
  EXPECT_EQ(required["items"]["anyOf"][0]["properties"]["parameters"], tools[0]["function"]["parameters"]);
  EXPECT_EQ(required["items"]["anyOf"][1]["required"], Json::array({"name", "parameters"}));
  EXPECT_TRUE(tool_choice_schema({ToolChoice::Mode::kAuto, ""}, tools, true).is_null());
}

}  // namespace
}  // namespace pagellm::server::test
