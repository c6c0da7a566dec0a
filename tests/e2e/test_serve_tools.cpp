// `pagellm serve --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3` on
// the random-weight e2e model: tool-call history round-trips, whole and streamed responses keep
// OpenAI's shapes (tool_calls, reasoning_content, finish_reason), a stream reassembles to the
// whole response, tool_choice and unimplemented fields are validated; and the official OpenAI JS
// client (tests/e2e/js/tools_client.test.mjs) reads it all.
//
// A random-weight model does not write tool-call markup by itself, so the parsers' text paths are
// tested on model-style texts in tests/unit/server; here the reasoning path runs end to end with a
// template whose generation prompt opens a <think> block (as Qwen3-2507 thinking templates do):
// the whole output is then reasoning.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "http_test_client.h"
#include "serve_process.h"

namespace pagellm::e2e {
namespace {

using nlohmann::json;

const std::vector<std::string> kToolFlags = {"--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                                             "--reasoning-parser", "qwen3"};

json weather_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

// A conversation that already called a tool: content null + tool_calls, then the tool's answer.
json history_body(bool stream) {
  json body = {{"model", kModelName}, {"max_tokens", 24}, {"temperature", 0}, {"stream", stream}};
  body["messages"] = json::parse(R"([
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc123", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temp_c\": 21, \"sky\": \"sunny\"}"}])");
  body["tools"] = weather_tools();
  return body;
}

// The message a stream adds up to, checking each chunk's shape on the way.
struct StreamedMessage {
  bool framed = false;
  bool done = false;
  std::string content, reasoning;
  json tool_calls = json::array();
  std::string finish_reason;
};

void expect_tool_call_delta(const json& piece, StreamedMessage& message) {
  ASSERT_TRUE(piece["index"].is_number_integer()) << piece;
  const size_t index = piece["index"].get<size_t>();
  if (piece.contains("id")) {
    ASSERT_EQ(index, message.tool_calls.size()) << piece;
    EXPECT_EQ(piece["type"], "function");
    message.tool_calls.push_back({{"id", piece["id"]}, {"type", "function"},
                                  {"function", {{"name", piece["function"]["name"]}, {"arguments", ""}}}});
  }
  ASSERT_LT(index, message.tool_calls.size()) << piece;
  message.tool_calls[index]["function"]["arguments"] =
      message.tool_calls[index]["function"]["arguments"].get<std::string>() + piece["function"]["arguments"].get<std::string>();
}

StreamedMessage read_stream(const HttpResult& r) {
  StreamedMessage message;
  std::vector<std::string> data;
  message.framed = parse_sse(r.body, data);
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] == "[DONE]") {
      message.done = i + 1 == data.size();
      continue;
    }
    const json event = json::parse(data[i]);
    EXPECT_EQ(event["object"], "chat.completion.chunk");
    const json& choice = event["choices"][0];
    const json& delta = choice["delta"];
    if (i == 0) EXPECT_EQ(delta["role"], "assistant");
    if (delta.contains("content")) message.content += delta["content"].get<std::string>();
    if (delta.contains("reasoning_content")) message.reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("tool_calls"))
      for (const json& piece : delta["tool_calls"]) expect_tool_call_delta(piece, message);
    if (!choice["finish_reason"].is_null()) message.finish_reason = choice["finish_reason"];
  }
  return message;
}

std::string text_or_empty(const json& value) { return value.is_string() ? value.get<std::string>() : ""; }

void expect_chat_message_shape(const json& message) {
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_TRUE(message["content"].is_string() || message["content"].is_null()) << message;
  ASSERT_TRUE(message.contains("reasoning_content")) << message;  // a reasoning parser runs
  EXPECT_TRUE(message["reasoning_content"].is_string() || message["reasoning_content"].is_null()) << message;
  if (message.contains("tool_calls"))
    for (const json& call : message["tool_calls"]) {
      EXPECT_EQ(call["type"], "function");
      EXPECT_TRUE(call["function"]["arguments"].is_string());
    }
}

class ServeToolsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = std::make_unique<ServeProcess>(kToolFlags);
    ASSERT_TRUE(server_->ready()) << server_->log();
  }
  static void TearDownTestSuite() { server_.reset(); }
  int port() const { return server_->port(); }
  static std::unique_ptr<ServeProcess> server_;
};
std::unique_ptr<ServeProcess> ServeToolsTest::server_;

TEST_F(ServeToolsTest, ToolCallHistoryRoundTripsWholeAndStreamed) {
  const HttpResult whole = http_post_json(port(), "/v1/chat/completions", history_body(false));
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json j = whole.json();
  expect_chat_message_shape(j["choices"][0]["message"]);
  const std::string finish = j["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop" || finish == "tool_calls") << finish;

  const HttpResult streamed = http_post_json(port(), "/v1/chat/completions", history_body(true));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const StreamedMessage message = read_stream(streamed);
  EXPECT_TRUE(message.framed) << streamed.body;
  EXPECT_TRUE(message.done);
  // Greedy: the stream adds up to the whole response, part by part.
  EXPECT_EQ(message.content, text_or_empty(j["choices"][0]["message"]["content"]));
  EXPECT_EQ(message.reasoning, text_or_empty(j["choices"][0]["message"]["reasoning_content"]));
  EXPECT_EQ(message.tool_calls.size(), j["choices"][0]["message"].value("tool_calls", json::array()).size());
  EXPECT_EQ(message.finish_reason, finish);
}

TEST_F(ServeToolsTest, ToolChoiceIsValidated) {
  json named = history_body(false);
  named["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  HttpResult r = http_post_json(port(), "/v1/chat/completions", named);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "tool_choice");

  json required = history_body(false);
  required.erase("tools");
  required["tool_choice"] = "required";
  r = http_post_json(port(), "/v1/chat/completions", required);
  EXPECT_EQ(r.status, 400) << r.body;

  json none = history_body(false);
  none["tool_choice"] = "none";
  r = http_post_json(port(), "/v1/chat/completions", none);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(r.json()["choices"][0]["message"].contains("tool_calls"));
}

TEST_F(ServeToolsTest, UnimplementedFieldsAre400sNamingThem) {
  for (const char* field : {"use_beam_search", "continue_final_message", "return_tokens_as_token_ids"}) {
    json body = history_body(false);
    body[field] = true;
    const HttpResult r = http_post_json(port(), "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << field << ": " << r.body;
    EXPECT_EQ(r.json()["error"]["param"], field);
    EXPECT_EQ(r.json()["error"]["code"], "not_supported");
  }
  json completion = {{"model", kModelName}, {"prompt", "Hi"}, {"max_tokens", 2}, {"best_of", 4}};
  const HttpResult r = http_post_json(port(), "/v1/completions", completion);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "best_of");
}

TEST_F(ServeToolsTest, StopTokenTextStaysOutUnlessAsked) {
  // The greedy first token after [1, 2, 3], as text; its ids as stop_token_ids end the request at once.
  const json probe = {{"model", kModelName}, {"prompt", {1, 2, 3}}, {"max_tokens", 1}, {"temperature", 0},
                      {"skip_special_tokens", false}};
  const HttpResult first = http_post_json(port(), "/v1/completions", probe);
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string token_text = first.json()["choices"][0]["text"];
  const HttpResult ids = http_post_json(port(), "/tokenize", {{"model", kModelName}, {"prompt", token_text}});
  ASSERT_EQ(ids.status, 200) << ids.body;
  for (bool include : {false, true}) {
    json body = probe;
    body["max_tokens"] = 4;
    body["stop_token_ids"] = ids.json()["tokens"];
    body["include_stop_str_in_output"] = include;
    const HttpResult r = http_post_json(port(), "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json choice = r.json()["choices"][0];
    if (choice["finish_reason"] != "stop") GTEST_SKIP() << "the greedy token's text does not tokenize back to it";
    EXPECT_EQ(choice["text"], include ? token_text : "") << r.body;
  }
}

// ---- reasoning end to end: a template that opens the think block ----

class ServeReasoningTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    template_path_ = std::filesystem::temp_directory_path() / ("pagellm_think_template_" + std::to_string(::getpid()) + ".jinja");
    std::ofstream(template_path_) << "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + "
                                     "message.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
                                     "{{ '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}";
    server_ = std::make_unique<ServeProcess>(
        std::vector<std::string>{"--reasoning-parser", "qwen3", "--chat-template", template_path_.string()});
    ASSERT_TRUE(server_->ready()) << server_->log();
  }
  static void TearDownTestSuite() {
    server_.reset();
    std::filesystem::remove(template_path_);
  }
  int port() const { return server_->port(); }
  static std::unique_ptr<ServeProcess> server_;
  static std::filesystem::path template_path_;
};
std::unique_ptr<ServeProcess> ServeReasoningTest::server_;
std::filesystem::path ServeReasoningTest::template_path_;

json question(bool stream) {
  return {{"model", kModelName}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}, {"stream", stream},
          {"messages", {{{"role", "user"}, {"content", "Why is the sky blue?"}}}}};
}

TEST_F(ServeReasoningTest, OutputInsideAnOpenThinkBlockIsReasoningWholeAndStreamed) {
  const HttpResult whole = http_post_json(port(), "/v1/chat/completions", question(false));
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json message = whole.json()["choices"][0]["message"];
  ASSERT_TRUE(message["reasoning_content"].is_string()) << message;
  EXPECT_FALSE(message["reasoning_content"].get<std::string>().empty());
  EXPECT_TRUE(message["content"].is_null()) << message;  // 12 random tokens never close the block

  const HttpResult streamed = http_post_json(port(), "/v1/chat/completions", question(true));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const StreamedMessage parts = read_stream(streamed);
  EXPECT_TRUE(parts.framed && parts.done) << streamed.body;
  EXPECT_EQ(parts.reasoning, message["reasoning_content"].get<std::string>());
  EXPECT_EQ(parts.content, "");
  EXPECT_EQ(parts.finish_reason, "length");

  json hidden = question(false);
  hidden["include_reasoning"] = false;
  const HttpResult without = http_post_json(port(), "/v1/chat/completions", hidden);
  ASSERT_EQ(without.status, 200) << without.body;
  EXPECT_TRUE(without.json()["choices"][0]["message"]["reasoning_content"].is_null()) << without.body;
}

TEST_F(ServeReasoningTest, ToolsWithoutAutoToolChoiceAreRefusedUnlessNone) {
  json body = question(false);
  body["tools"] = weather_tools();
  HttpResult r = http_post_json(port(), "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "tool_choice");
  body["tool_choice"] = "none";
  r = http_post_json(port(), "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 200) << r.body;
}

// ---- structured outputs after the reasoning (vLLM: the grammar starts after </think>) ----

const json kCitySchema = json::parse(R"({"type": "object", "properties": {
  "city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 9}},
  "required": ["city", "days"], "additionalProperties": false})");

json city_format() { return {{"type", "json_schema"}, {"json_schema", {{"name", "city"}, {"schema", kCitySchema}}}}; }

void expect_city(const json& message) {
  ASSERT_TRUE(message["content"].is_string()) << message;
  const json city = json::parse(message["content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(city.is_object()) << message;
  EXPECT_EQ(city.size(), 2u) << message;
  EXPECT_TRUE(city["city"].is_string()) << message;
  EXPECT_TRUE(city["days"].is_number_integer() && city["days"] >= 1 && city["days"] <= 9) << message;
}

// The id of a text that is one token of the e2e model's Qwen3 tokenizer.
int token_id(int port, const std::string& text) {
  const json tokens = http_post_json(port, "/tokenize", {{"model", kModelName}, {"prompt", text}}).json()["tokens"];
  EXPECT_EQ(tokens.size(), 1u) << text << " is " << tokens;
  return tokens.empty() ? -1 : tokens[0].get<int>();
}

TEST_F(ServeReasoningTest, TheModelReasonsFreelyBeforeAConstrainedAnswer) {
  // The template opened <think>: a token the schema forbids first (a JSON object starts with '{')
  // is free while the model reasons, so greedy decoding picks the biased word every time.
  json body = question(false);
  body["response_format"] = city_format();
  body["max_tokens"] = 5;
  body["logit_bias"] = {{std::to_string(token_id(port(), "hello")), 100}};
  HttpResult r = http_post_json(port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["choices"][0]["message"]["reasoning_content"], "hellohellohellohellohello") << r.body;
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "length") << r.body;

  // Once </think> is out, the answer follows the schema and ends with stop, whatever the weights
  // (the bias that forced </think> cannot pull it into the answer: the mask refuses it there).
  body["logit_bias"] = {{std::to_string(token_id(port(), "</think>")), 100}};
  body["max_tokens"] = 200;
  body["temperature"] = 1.0;
  body.erase("ignore_eos");
  for (int seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    body["seed"] = seed;
    for (bool stream : {false, true}) {
      body["stream"] = stream;
      r = http_post_json(port(), "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      if (stream) {
        const StreamedMessage parts = read_stream(r);
        EXPECT_EQ(parts.finish_reason, "stop") << r.body;
        expect_city({{"content", parts.content}});
        continue;
      }
      const json choice = r.json()["choices"][0];
      EXPECT_EQ(choice["finish_reason"], "stop") << r.body;
      expect_city(choice["message"]);
    }
  }
}

TEST_F(ServeToolsTest, ThinkingOffConstrainsFromTheFirstTokenThinkingOnAfterTheReasoning) {
  // enable_thinking=false renders an empty, closed think block: the answer is constrained at once.
  json body = {{"model", kModelName}, {"max_tokens", 200}, {"temperature", 1.0}, {"response_format", city_format()},
               {"messages", {{{"role", "user"}, {"content", "Plan a trip"}}}},
               {"chat_template_kwargs", {{"enable_thinking", false}}}};
  for (int seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    body["seed"] = seed;
    const HttpResult r = http_post_json(port(), "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "stop") << r.body;
    expect_city(r.json()["choices"][0]["message"]);
  }
  // Thinking on (Qwen3's default): the model writes <think>...</think> first; forcing </think> ends
  // the reasoning at once and the answer after it follows the schema. A tool_choice by name too.
  body.erase("chat_template_kwargs");
  body["logit_bias"] = {{std::to_string(token_id(port(), "</think>")), 100}};
  const HttpResult answer = http_post_json(port(), "/v1/chat/completions", body);
  ASSERT_EQ(answer.status, 200) << answer.body;
  expect_city(answer.json()["choices"][0]["message"]);
  body.erase("response_format");
  body["tools"] = weather_tools();
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const HttpResult call = http_post_json(port(), "/v1/chat/completions", body);
  ASSERT_EQ(call.status, 200) << call.body;
  const json message = call.json()["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u) << call.body;
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  const json args = json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(args.is_object() && args["city"].is_string()) << call.body;
}

// ---- the official OpenAI JS client ----

TEST(OpenAiJsToolsTest, NodeTestsPass) {
  ServeProcess server(kToolFlags);
  ASSERT_TRUE(server.ready()) << server.log();
  EXPECT_NODE_TESTS_PASS("tools_client.test.mjs", server, 4);
}

}  // namespace
}  // namespace pagellm::e2e
