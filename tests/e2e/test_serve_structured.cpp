// Structured outputs through the real server on a random-weight model: whatever the weights, a
// constrained answer parses and keeps its schema, ends with "stop", and tool_choice required / named
// give calls whose arguments parse and match the function's parameters; logit_bias steers greedy
// decoding; bad constraints are 400s naming their field.
#include <future>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http_test_client.h"
#include "serve_process.h"

namespace pagellm::e2e {
namespace {

using nlohmann::json;

class ServeStructuredTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = std::make_unique<ServeProcess>(); }
  static void TearDownTestSuite() { server_.reset(); }
  static int port() { return server_->port(); }
  static std::unique_ptr<ServeProcess> server_;
};
std::unique_ptr<ServeProcess> ServeStructuredTest::server_;

json chat(const std::string& content, json extra) {
  json body = {{"model", kModelName}, {"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 400},
               {"temperature", 1.0}};
  body.update(extra);
  return body;
}

const json kPersonSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "role": {"enum": ["admin", "user"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
    "boss": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}]}
  },
  "required": ["name", "age", "role", "tags", "boss"],
  "additionalProperties": false
})");

void expect_person(const json& person) {
  ASSERT_TRUE(person.is_object()) << person.dump();
  EXPECT_EQ(person.size(), 5u) << person.dump();
  EXPECT_TRUE(person["name"].is_string() && person["name"].get<std::string>().size() <= 12 * 4) << person.dump();
  EXPECT_TRUE(person["age"].is_number_integer() && person["age"] >= 0 && person["age"] <= 120) << person.dump();
  EXPECT_TRUE(person["role"] == "admin" || person["role"] == "user") << person.dump();
  EXPECT_TRUE(person["tags"].is_array() && person["tags"].size() <= 3) << person.dump();
  EXPECT_TRUE(person["boss"].is_null() || person["boss"]["id"].is_number_integer()) << person.dump();
}

TEST_F(ServeStructuredTest, JsonSchemaOutputsParseAndEndWithStop) {
  for (int seed : {1, 2, 3, 4}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const HttpResult r = http_post_json(
        port(), "/v1/chat/completions",
        chat("A person, please", {{"seed", seed},
                                  {"response_format", {{"type", "json_schema"},
                                                       {"json_schema", {{"name", "person"}, {"schema", kPersonSchema}}}}}}));
    ASSERT_EQ(r.status, 200) << r.body;
    const json choice = r.json()["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop");
    expect_person(json::parse(choice["message"]["content"].get<std::string>(), nullptr, false));
  }
}

TEST_F(ServeStructuredTest, JsonObjectRegexChoiceAndGrammar) {
  const json object = http_post_json(port(), "/v1/chat/completions",
                                     chat("Any JSON", {{"seed", 7}, {"response_format", {{"type", "json_object"}}}}))
                          .json();
  // Any object may hold free text, which random weights rarely close within max_tokens: the text is
  // an object's beginning, and a whole object when the model stopped.
  const std::string text = object["choices"][0]["message"]["content"];
  EXPECT_EQ(text.rfind("{", 0), 0u) << text;
  if (object["choices"][0]["finish_reason"] == "stop")
    EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text;
  const json completion = {{"model", kModelName}, {"prompt", "Code:"}, {"max_tokens", 40}, {"temperature", 1.0}};
  json regex = completion;
  regex["guided_regex"] = "[0-9]{3}-[a-z]{2,4}";
  const std::string code = http_post_json(port(), "/v1/completions", regex).json()["choices"][0]["text"];
  EXPECT_TRUE(std::regex_match(code, std::regex("[0-9]{3}-[a-z]{2,4}"))) << code;
  json choice = completion;
  choice["structured_outputs"] = {{"choice", {"red", "green", "blue"}}};
  const std::string color = http_post_json(port(), "/v1/completions", choice).json()["choices"][0]["text"];
  EXPECT_TRUE(color == "red" || color == "green" || color == "blue") << color;
  json grammar = completion;
  // Bounded repetitions: the answer ends within max_tokens whatever the weights.
  grammar["guided_grammar"] = R"g(root ::= "(" num ("+" num){0,3} ")"
num ::= [1-9] [0-9]?)g";
  const std::string sum = http_post_json(port(), "/v1/completions", grammar).json()["choices"][0]["text"];
  EXPECT_TRUE(std::regex_match(sum, std::regex(R"(\([1-9][0-9]?(\+[1-9][0-9]?){0,3}\))"))) << sum;
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
  "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer"}},
  "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {
  "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}])");

void expect_valid_call(const json& call) {
  ASSERT_TRUE(call["function"]["arguments"].is_string()) << call.dump();
  const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
  if (call["function"]["name"] == "get_weather") {
    EXPECT_TRUE(args["city"].is_string() && args["days"].is_number_integer()) << call.dump();
  } else {
    EXPECT_EQ(call["function"]["name"], "get_time") << call.dump();
    EXPECT_TRUE(args["zone"] == "UTC" || args["zone"] == "CET") << call.dump();
  }
  EXPECT_EQ(call["type"], "function");
  EXPECT_TRUE(call["id"].is_string());
}

TEST_F(ServeStructuredTest, NamedAndRequiredToolChoiceGiveSchemaValidCalls) {
  for (int seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const json named = http_post_json(port(), "/v1/chat/completions",
                                      chat("Weather?", {{"seed", seed},
                                                        {"tools", kTools},
                                                        {"tool_choice", {{"type", "function"},
                                                                         {"function", {{"name", "get_weather"}}}}}}))
                           .json();
    const json message = named["choices"][0]["message"];
    ASSERT_EQ(message["tool_calls"].size(), 1u) << named.dump();
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
    expect_valid_call(message["tool_calls"][0]);
    const json required = http_post_json(port(), "/v1/chat/completions",
                                         chat("Anything", {{"seed", seed}, {"tools", kTools}, {"tool_choice", "required"},
                                                           {"parallel_tool_calls", false}}))
                              .json();
    const json calls = required["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << required.dump();
    expect_valid_call(calls[0]);
    EXPECT_EQ(required["choices"][0]["finish_reason"], "tool_calls");
  }
}

TEST_F(ServeStructuredTest, LogitBiasSteersGreedyDecoding) {
  const json body = {{"model", kModelName}, {"prompt", {1, 2, 3}}, {"max_tokens", 6}, {"temperature", 0},
                     {"logit_bias", {{"4242", 100}}}};
  const HttpResult r = http_post_json(port(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json tokenized = http_post_json(port(), "/tokenize", {{"model", kModelName}, {"prompt", r.json()["choices"][0]["text"]}}).json();
  EXPECT_EQ(tokenized["tokens"], json(std::vector<int>(6, 4242))) << r.body;
}

// vLLM's prompt_logprobs: per completion choice (the same for each of n), once per chat response.
void expect_prompt_logprobs(const json& list, const std::vector<int>& prompt, size_t top_k) {
  ASSERT_TRUE(list.is_array()) << list;
  ASSERT_EQ(list.size(), prompt.size()) << list;
  EXPECT_TRUE(list[0].is_null()) << list;
  for (size_t i = 1; i < list.size(); ++i) {
    const json& entry = list[i];
    const std::string key = std::to_string(prompt[i]);
    ASSERT_TRUE(entry.contains(key)) << i << ": " << entry;  // the prompt token itself
    EXPECT_LE(entry.size(), top_k + 1) << entry;
    EXPECT_GE(entry.size(), top_k) << entry;
    EXPECT_LE(entry[key]["logprob"].get<double>(), 0.0);
    EXPECT_GE(entry[key]["rank"].get<int>(), 1);
    EXPECT_TRUE(entry[key]["decoded_token"].is_string());
    for (const auto& [id, value] : entry.items()) {  // the most likely token is at least as likely
      if (value["rank"] == 1) {
        EXPECT_GE(value["logprob"].get<double>(), entry[key]["logprob"].get<double>()) << entry;
      }
    }
  }
}

TEST_F(ServeStructuredTest, PromptLogprobs) {
  const std::vector<int> prompt = {1, 2, 3, 4, 5};
  json body = {{"model", kModelName}, {"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"n", 2},
               {"prompt_logprobs", 3}};
  HttpResult r = http_post_json(port(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json choices = r.json()["choices"];
  expect_prompt_logprobs(choices[0]["prompt_logprobs"], prompt, 3);
  EXPECT_EQ(choices[0]["prompt_logprobs"], choices[1]["prompt_logprobs"]);
  // The same prompt again: the prefix cache holds it now, and the numbers stay.
  r = http_post_json(port(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["choices"][0]["prompt_logprobs"], choices[0]["prompt_logprobs"]);

  const HttpResult chat_r = http_post_json(port(), "/v1/chat/completions", chat("Hi", {{"prompt_logprobs", 0}, {"max_tokens", 2}}));
  ASSERT_EQ(chat_r.status, 200) << chat_r.body;
  const json chat_body = chat_r.json();
  ASSERT_EQ(chat_body["prompt_logprobs"].size(), chat_body["usage"]["prompt_tokens"].get<size_t>()) << chat_r.body;
  EXPECT_TRUE(chat_body["prompt_logprobs"][0].is_null());
  EXPECT_EQ(chat_body["prompt_logprobs"][1].size(), 1u) << chat_r.body;  // k = 0: the prompt token only

  body["prompt_logprobs"] = 21;
  r = http_post_json(port(), "/v1/completions", body);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "prompt_logprobs");
  body["prompt_logprobs"] = 1;
  body["stream"] = true;
  r = http_post_json(port(), "/v1/completions", body);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "prompt_logprobs");
}

TEST_F(ServeStructuredTest, BadConstraintsAreBadRequests) {
  auto refused = [&](const json& extra) {
    return http_post_json(port(), "/v1/chat/completions", chat("x", extra)).json()["error"];
  };
  json error = refused({{"guided_json", {{"type", "object"}, {"not", {{"type", "null"}}}}}});
  EXPECT_EQ(error["param"], "guided_json");
  EXPECT_NE(error["message"].get<std::string>().find("unsupported JSON Schema keyword 'not'"), std::string::npos);
  error = refused({{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a+"}});
  EXPECT_EQ(error["param"], "guided_regex");
  error = refused({{"guided_regex", "(a"}});
  EXPECT_EQ(error["param"], "guided_regex");
  error = refused({{"logit_bias", {{"12", 300}}}});
  EXPECT_EQ(error["param"], "logit_bias");
  error = refused({{"response_format", {{"type", "yaml"}}}});
  EXPECT_EQ(error["param"], "response_format.type");
}

// Async scheduling (the GPU default) fills a step's masks while its forward runs, after the step
// before is committed: concurrent constrained requests get the answers they get without it.
TEST(ServeStructuredAsyncTest, AsyncSchedulingGivesTheSyncAnswers) {
  const std::vector<json> bodies = {
      chat("A person, please", {{"seed", 1}, {"response_format", {{"type", "json_schema"},
                                                                  {"json_schema", {{"name", "person"}, {"schema", kPersonSchema}}}}}}),
      chat("Another person", {{"seed", 2}, {"response_format", {{"type", "json_schema"},
                                                                {"json_schema", {{"name", "person"}, {"schema", kPersonSchema}}}}}}),
      chat("Anything", {{"seed", 3}, {"tools", kTools}, {"tool_choice", "required"}}),
      chat("Weather?", {{"seed", 4}, {"tools", kTools},
                        {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}),
      chat("Free text", {{"seed", 5}, {"max_tokens", 30}}),
  };
  // The content and the calls (names and arguments; their ids are random) of each answer, sent all at once.
  auto answers = [&](int port) {
    std::vector<std::future<HttpResult>> pending;
    for (const json& body : bodies)
      pending.push_back(std::async(std::launch::async, [=] { return http_post_json(port, "/v1/chat/completions", body); }));
    std::vector<json> out;
    for (auto& result : pending) {
      const HttpResult r = result.get();
      EXPECT_EQ(r.status, 200) << r.body;
      json message = r.json()["choices"][0]["message"];
      json calls = json::array();
      for (const json& call : message.value("tool_calls", json::array())) calls.push_back(call["function"]);
      out.push_back({{"content", message["content"]}, {"calls", calls}, {"finish", r.json()["choices"][0]["finish_reason"]}});
    }
    return out;
  };
  ServeProcess sync({"--no-async-scheduling"});
  ServeProcess async({"--async-scheduling"});
  ASSERT_TRUE(sync.ready() && async.ready());
  const std::vector<json> want = answers(sync.port()), got = answers(async.port());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i]["finish"], "stop");
    expect_person(json::parse(got[i]["content"].get<std::string>(), nullptr, false));
  }
  EXPECT_EQ(got[2]["finish"], "tool_calls");
  EXPECT_FALSE(got[2]["calls"].empty());
}

}  // namespace
}  // namespace pagellm::e2e
