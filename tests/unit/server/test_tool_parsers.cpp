// Tool-call parsers on output texts written the way each model family writes them (Qwen3,
// Qwen3-Coder, Llama 3.1, Mistral, gpt-oss): whole text, and streamed split at every byte.
#include <gtest/gtest.h>

#include "parser_test_util.h"
#include "server/tool_parser.h"

namespace pagellm::server::test {
namespace {

ParserFactory tool_parser(const std::string& name, Json tools = Json::array()) {
  return [name, tools](ToolCallIdFn ids) { return make_tool_parser(name, tools, std::move(ids)); };
}

// ---- hermes (Qwen2.5, Qwen3) ----

TEST(HermesToolParser, OneCallOnly) {
  expect_parses(tool_parser("hermes"),
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
                "</tool_call>",
                {"", {{"get_weather", R"({"city": "Paris", "unit": "celsius"})"}}});
}

TEST(HermesToolParser, TextBeforeAndParallelCallsWithNestedUnicodeArguments) {
  const std::string text =
      "I'll check the weather in both cities.\n\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\"}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": [1, 2], \"opts\": "
      "{\"metric\": true, \"note\": \"say \\\"hi\\\" </tool_call> {\"}}}\n</tool_call>";
  expect_parses(tool_parser("hermes"), text,
                {"I'll check the weather in both cities.",
                 {{"get_weather", R"({"city": "東京"})"},
                  {"get_weather", R"({"city": "Zürich", "days": [1, 2], "opts": {"metric": true, "note": "say \"hi\" </tool_call> {"}})"}}});
}

TEST(HermesToolParser, ArgumentsStreamAsWrittenAndOtherKeyOrdersAreReadWhole) {
  // "arguments" before "name": read whole, then emitted (compact JSON).
  expect_parses(tool_parser("hermes"),
                "<tool_call>\n{\"arguments\": {\"query\": \"emoji 🎉\"}, \"name\": \"search\"}\n</tool_call>",
                {"", {{"search", R"({"query": "emoji 🎉"})"}}});
  // Arguments as a JSON string holding JSON are unwrapped.
  expect_parses(tool_parser("hermes"),
                "<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": \\\"x\\\"}\"}\n</tool_call>",
                {"", {{"search", R"({"query": "x"})"}}});
  std::unique_ptr<OutputParser> parser = make_tool_parser("hermes", Json::array(), counting_ids());
  const ParsedMessage whole = parse_whole(*parser, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":  [1,2]}}\n</tool_call>");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].arguments, "{\"a\":  [1,2]}");
}

TEST(HermesToolParser, MalformedCallsStayContent) {
  for (const std::string text : {
           "Use the <tool_call> tag to call tools.",
           "<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Paris'}}\n</tool_call>",
           "<tool_call>\n{\"function\": \"get_weather\", \"city\": \"Paris\"}\n</tool_call>",
           "<tool_call>\nI should call get_weather now.\n</tool_call>",
           "Almost a tag: <tool_ca",
           "<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>",
       })
    expect_parses(tool_parser("hermes"), text, {text, {}});
}

TEST(HermesToolParser, CallCutShortStillStreamsWhatWasWritten) {
  // finish_reason "length" in the middle of the arguments: the call stands with the text so far.
  std::unique_ptr<OutputParser> parser = make_tool_parser("hermes", Json::array(), counting_ids());
  const ParsedMessage whole = parse_whole(*parser, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par");
  EXPECT_EQ(whole.content, "Sure.");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].name, "get_weather");
  EXPECT_EQ(whole.tool_calls[0].arguments, "{\"city\": \"Par");
}

TEST(HermesToolParser, StreamHoldsBackAPartialTagAndSendsTheNameBeforeTheArgumentsEnd) {
  std::unique_ptr<OutputParser> parser = make_tool_parser("hermes", Json::array(), counting_ids());
  MessageDelta first;
  parser->feed("Checking. <tool_c", first);
  EXPECT_EQ(first.content, "Checking.");
  EXPECT_TRUE(first.tool_calls.empty());
  MessageDelta second;
  parser->feed("all>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", second);
  EXPECT_EQ(second.content, "");
  ASSERT_EQ(second.tool_calls.size(), 1u);
  EXPECT_EQ(second.tool_calls[0].id, "call_0");
  EXPECT_EQ(second.tool_calls[0].name, "get_weather");
  EXPECT_EQ(second.tool_calls[0].arguments, "{\"ci");
  MessageDelta third;
  parser->feed("ty\": \"Paris\"}}\n</tool_call>", third);
  ASSERT_EQ(third.tool_calls.size(), 1u);
  EXPECT_EQ(third.tool_calls[0].id, "");
  EXPECT_EQ(third.tool_calls[0].arguments, "ty\": \"Paris\"}");
}

TEST(HermesToolParser, PlainAnswersKeepTheirWhitespace) {
  expect_parses(tool_parser("hermes"), "The answer is 42.\n\nAnything else? ", {"The answer is 42.\n\nAnything else? ", {}});
  expect_parses(tool_parser("hermes"), "", {"", {}});
}

// ---- qwen3_coder ----

Json coder_tools() {
  return Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
      "filters": {"type": "object"}, "ratio": {"type": ["number", "null"]}}}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
      "path": {"type": "string"}, "content": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "list_files"}}])");
}

TEST(Qwen3CoderToolParser, ParametersConvertedByTheirSchemaTypes) {
  const std::string text =
      "Let me look that up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=filters>\n"
      "{\"wind\": [\"speed\", \"gust\"], \"rain\": null}\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n"
      "<parameter=note>\n42\n</parameter>\n</function>\n</tool_call>";
  expect_parses(tool_parser("qwen3_coder", coder_tools()), text,
                {"Let me look that up.",
                 {{"get_weather", R"({"city": "San Francisco", "days": 3, "metric": true,
                                      "filters": {"wind": ["speed", "gust"], "rain": null}, "ratio": 0.5, "note": "42"})"}}});
}

TEST(Qwen3CoderToolParser, MultiLineCodeValuesAndSeveralCalls) {
  const std::string text =
      "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.py\n</parameter>\n<parameter=content>\n"
      "def main():\n    print(\"</function> is just text here\")\n    return {\"ok\": True}\n\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=list_files>\n</function>\n</tool_call>";
  expect_parses(tool_parser("qwen3_coder", coder_tools()), text,
                {"",
                 {{"write_file", R"({"path": "src/main.py", "content": "def main():\n    print(\"</function> is just text here\")\n    return {\"ok\": True}\n"})"},
                  {"list_files", "{}"}}});
}

TEST(Qwen3CoderToolParser, ValuesThatDoNotConvertStayStrings) {
  expect_parses(tool_parser("qwen3_coder", coder_tools()),
                "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n<parameter=metric>\n"
                "yes\n</parameter>\n<parameter=city>\nnull\n</parameter>\n</function>\n</tool_call>",
                {"", {{"get_weather", R"({"days": "three", "metric": "yes", "city": null})"}}});
}

TEST(Qwen3CoderToolParser, MalformedCallsStayContent) {
  for (const std::string text : {"<tool_call>\nI think I should call something\n</tool_call>",
                                 "Write <tool_call> then <function=NAME>.", "<tool_call>\n<function=>\n</function>"})
    expect_parses(tool_parser("qwen3_coder", coder_tools()), text, {text, {}});
}

// ---- llama3_json (Llama 3.1 / 3.2 / 3.3) ----

TEST(Llama3JsonToolParser, CallWithAndWithoutPythonTag) {
  expect_parses(tool_parser("llama3_json"), "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                {"", {{"get_weather", R"({"city": "Paris"})"}}});
  expect_parses(tool_parser("llama3_json"),
                "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"café ☕\", \"filters\": {\"lang\": [\"fr\"]}}}; "
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                {"", {{"search", R"({"query": "café ☕", "filters": {"lang": ["fr"]}})"}, {"get_weather", R"({"city": "Oslo"})"}}});
}

TEST(Llama3JsonToolParser, AnswersAndJsonThatIsNotACallAreContent) {
  for (const std::string text : {"The weather in Paris is sunny, 21°C.", "{\"answer\": 42, \"unit\": \"m\"}",
                                 "<|python_tag|>print(sum(range(10)))", "  {\"name\": 5}"})
    expect_parses(tool_parser("llama3_json"), text, {text, {}});
}

// ---- mistral ----

TEST(MistralToolParser, JsonListForm) {
  expect_parses(tool_parser("mistral"),
                "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}]",
                {"", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", R"({"tz": "Europe/Paris"})"}}});
}

TEST(MistralToolParser, NamedArgsFormOfNewerTokenizers) {
  expect_parses(tool_parser("mistral"),
                "Sure, checking both.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Montréal\", \"days\": [1, 2]}"
                "[TOOL_CALLS]get_time[ARGS]{}",
                {"Sure, checking both.", {{"get_weather", R"({"city": "Montréal", "days": [1, 2]})"}, {"get_time", "{}"}}});
}

TEST(MistralToolParser, MalformedCallsStayContentAndIdsHaveNineCharacters) {
  for (const std::string text : {"[TOOL_CALLS]not a call at all", "[TOOL_CALLS][\"get_weather\"]", "Plain answer."})
    expect_parses(tool_parser("mistral"), text, {text, {}});
  std::unique_ptr<OutputParser> parser = make_tool_parser("mistral", Json::array());
  const ParsedMessage whole = parse_whole(*parser, "[TOOL_CALLS]f[ARGS]{}");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].id.size(), 9u);
}

// ---- openai (gpt-oss harmony) ----

TEST(HarmonyToolParser, AnalysisThenCall) {
  expect_parses(tool_parser("openai"),
                "<|channel|>analysis<|message|>User asks for the weather in Paris. Call get_weather.<|end|>"
                "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                "{\"city\":\"Paris\",\"extra\":{\"units\":[\"C\"]}}",
                {"", {{"get_weather", R"({"city":"Paris","extra":{"units":["C"]}})"}},
                 "User asks for the weather in Paris. Call get_weather."});
}

TEST(HarmonyToolParser, RecipientBeforeChannelAndFinalAnswer) {
  expect_parses(tool_parser("openai"),
                "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": \"x\"}<|call|>",
                {"", {{"lookup", R"({"q": "x"})"}}});
  expect_parses(tool_parser("openai"),
                "<|channel|>analysis<|message|>Simple greeting.<|end|><|start|>assistant<|channel|>final<|message|>"
                "Hello! 👋 How can I help?",
                {"Hello! 👋 How can I help?", {}, "Simple greeting."});
}

TEST(HarmonyToolParser, TextOutsideTheFormatIsContent) {
  expect_parses(tool_parser("openai"), "Just text, no channels.", {"Just text, no channels.", {}});
}

TEST(ToolParserNames, AreVllmsAndUnknownIsNull) {
  for (const std::string& name : tool_parser_names()) EXPECT_NE(make_tool_parser(name, Json::array()), nullptr) << name;
  EXPECT_EQ(make_tool_parser("pythonic", Json::array()), nullptr);
  EXPECT_TRUE(tool_parser_needs_special_tokens("mistral"));
  EXPECT_FALSE(tool_parser_needs_special_tokens("hermes"));
  EXPECT_EQ(random_tool_call_id().rfind("call_", 0), 0u);
  EXPECT_EQ(random_tool_call_id().size(), 29u);
}

}  // namespace
}  // namespace pagellm::server::test
