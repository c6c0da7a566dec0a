// Chat and completion request fields around tools, reasoning and vLLM's extras: tool_choice is
// validated and carries its JSON Schema for constrained decoding; fields pagellm does not
// implement are a 400 naming them (values that ask for the default are accepted); fields other
// parts of the server own (response_format, logit_bias, guided_*, ...) pass through untouched.
#include <gtest/gtest.h>

#include "server/openai_request.h"

namespace pagellm::server::test {
namespace {

using Json = nlohmann::ordered_json;

ParseOptions options(bool auto_tool_choice) {
  ParseOptions o;
  o.served_model_name = "m";
  o.vocab_size = 1000;
  o.auto_tool_choice = auto_tool_choice;
  return o;
}

Json tools() {
  return Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "get_time"}}])");
}

Json chat(Json extra) {
  Json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [key, value] : extra.items()) body[key] = value;
  return body;
}

std::optional<ApiError> parse(const Json& body, bool auto_tool_choice, ChatRequest& out) {
  return parse_chat_request(body, options(auto_tool_choice), out);
}

TEST(ChatRequestTools, AutoNeedsTheServersToolParser) {
  ChatRequest parsed;
  ASSERT_FALSE(parse(chat({{"tools", tools()}}), false, parsed));  // /tokenize may still render it
  std::optional<ApiError> error = check_tool_choice_servable(parsed, options(false));
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "tool_choice");
  EXPECT_NE(error->message.find("--enable-auto-tool-choice"), std::string::npos);
  ChatRequest with_parser;
  ASSERT_FALSE(parse(chat({{"tools", tools()}}), true, with_parser));
  EXPECT_FALSE(check_tool_choice_servable(with_parser, options(true)));
  EXPECT_EQ(with_parser.tool_choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(with_parser.template_inputs.tools, tools());
  EXPECT_FALSE(with_parser.guided_json_schema);
}

TEST(ChatRequestTools, NoneKeepsToolsOutOfThePromptAndNeedsNoParser) {
  ChatRequest parsed;
  ASSERT_FALSE(parse(chat({{"tools", tools()}, {"tool_choice", "none"}}), false, parsed));
  EXPECT_EQ(parsed.tool_choice.mode, ToolChoice::Mode::kNone);
  EXPECT_TRUE(parsed.template_inputs.tools.is_null());
}

TEST(ChatRequestTools, NamedAndRequiredCarryTheirSchema) {
  ChatRequest named;
  ASSERT_FALSE(parse(chat({{"tools", tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}),
                     false, named));
  EXPECT_EQ(named.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.tool_choice.function, "get_weather");
  ASSERT_TRUE(named.guided_json_schema);
  EXPECT_EQ(*named.guided_json_schema, tools()[0]["function"]["parameters"]);
  ChatRequest required;
  ASSERT_FALSE(parse(chat({{"tools", tools()}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}), false, required));
  ASSERT_TRUE(required.guided_json_schema);
  EXPECT_EQ((*required.guided_json_schema)["maxItems"], 1);
  EXPECT_FALSE(required.parallel_tool_calls);
}

TEST(ChatRequestTools, BadToolsAndChoicesAre400s) {
  const std::vector<std::pair<Json, std::string>> bad = {
      {chat({{"tools", tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}), "tool_choice"},
      {chat({{"tools", tools()}, {"tool_choice", "sometimes"}}), "tool_choice"},
      {chat({{"tools", tools()}, {"tool_choice", {{"type", "function"}}}}), "tool_choice"},
      {chat({{"tool_choice", "required"}}), "tool_choice"},
      {chat({{"tools", "x"}}), "tools"},
      {chat({{"tools", {{{"type", "web_search"}}}}}), "tools[0].type"},
      {chat({{"tools", {{{"type", "function"}, {"function", {{"name", ""}}}}}}}), "tools[0].function"},
      {chat({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "x"}}}}}}}),
       "tools[0].function.parameters"},
  };
  for (const auto& [body, param] : bad) {
    ChatRequest parsed;
    std::optional<ApiError> error = parse(body, true, parsed);
    ASSERT_TRUE(error) << body.dump();
    EXPECT_EQ(error->http_status, 400);
    EXPECT_EQ(error->param, param) << body.dump();
  }
}

TEST(RequestFields, UnimplementedFieldsAre400sNamingThem) {
  for (const char* field : {"use_beam_search", "best_of", "allowed_token_ids", "bad_words", "logits_processors",
                            "truncate_prompt_tokens", "return_tokens_as_token_ids", "cache_salt", "priority",
                            "functions", "function_call", "audio", "prediction", "reasoning_effort", "documents",
                            "chat_template", "continue_final_message", "echo", "store", "service_tier", "modalities"}) {
    Json value = Json::array({1});
    if (std::string(field) == "use_beam_search" || std::string(field) == "continue_final_message" ||
        std::string(field) == "echo" || std::string(field) == "store" || std::string(field) == "return_tokens_as_token_ids")
      value = true;
    if (std::string(field) == "best_of" || std::string(field) == "priority") value = 3;
    if (std::string(field) == "service_tier") value = "flex";
    ChatRequest parsed;
    std::optional<ApiError> error = parse(chat({{field, value}}), false, parsed);
    ASSERT_TRUE(error) << field;
    EXPECT_EQ(error->param, field);
    EXPECT_EQ(error->code, "not_supported");
  }
  ChatRequest parsed;
  EXPECT_FALSE(parse(chat({{"use_beam_search", false}, {"best_of", 1}, {"echo", false}, {"store", false},
                           {"modalities", {"text"}}, {"service_tier", "auto"}, {"functions", nullptr},
                           {"spaces_between_special_tokens", true}, {"user", "u"}, {"metadata", {{"k", "v"}}},
                           {"some_unknown_field", 1}}),
                     false, parsed));
}

// Structured-output fields pass request parsing (structured_request.cpp reads them); the logits
// fields pagellm does not implement are refused there.
TEST(RequestFields, StructuredOutputFieldsPassAndUnimplementedLogitsFieldsAreRefused) {
  ChatRequest parsed;
  EXPECT_FALSE(parse(chat({{"response_format", {{"type", "json_object"}}}, {"logit_bias", {{"5", 10}}},
                           {"guided_json", {{"type", "object"}}}, {"structured_outputs", {{"regex", "a+"}}},
                           {"prompt_logprobs", 0}}),
                     false, parsed));
  for (const char* field : {"structural_tag", "guided_whitespace_pattern"}) {
    ChatRequest refused;
    const std::optional<ApiError> error = parse(chat({{field, 1}}), false, refused);
    ASSERT_TRUE(error) << field;
    EXPECT_EQ(error->param, field);
  }
}

// prompt_logprobs: 0..20 reach the sampling params; out of range, or with a stream, is a 400.
TEST(RequestFields, PromptLogprobsAreBoundedAndNotStreamed) {
  ChatRequest parsed;
  ASSERT_FALSE(parse(chat({{"prompt_logprobs", 7}}), false, parsed));
  EXPECT_EQ(parsed.common.sampling.num_prompt_logprobs, 7);
  for (const Json& extra : {Json{{"prompt_logprobs", -1}}, Json{{"prompt_logprobs", 21}},
                            Json{{"prompt_logprobs", 1}, {"stream", true}}}) {
    ChatRequest refused;
    const std::optional<ApiError> error = parse(chat(extra), false, refused);
    ASSERT_TRUE(error) << extra;
    EXPECT_EQ(error->param, "prompt_logprobs") << extra;
  }
}

TEST(RequestFields, DetokenizationFieldsAreRead) {
  ChatRequest parsed;
  ASSERT_FALSE(parse(chat({{"skip_special_tokens", false}, {"include_stop_str_in_output", true},
                           {"add_special_tokens", true}, {"include_reasoning", false}}),
                     false, parsed));
  EXPECT_FALSE(parsed.common.skip_special_tokens);
  EXPECT_TRUE(parsed.common.include_stop_str_in_output);
  EXPECT_EQ(parsed.common.add_special_tokens, true);
  EXPECT_FALSE(parsed.include_reasoning);
  ChatRequest bad;
  std::optional<ApiError> error = parse(chat({{"skip_special_tokens", "no"}}), false, bad);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "skip_special_tokens");
  CompletionRequest completion;
  error = parse_completion_request(Json{{"model", "m"}, {"prompt", "x"}, {"use_beam_search", true}}, options(false), completion);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "use_beam_search");
}

}  // namespace
}  // namespace pagellm::server::test
