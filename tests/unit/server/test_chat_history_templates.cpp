// Tool-call history as OpenAI clients send it — an assistant turn with content null (or absent)
// and tool_calls whose arguments are JSON strings, then tool messages with tool_call_id — goes
// through the server's request parsing and every real chat template (assets/tokenizers/*), and
// must render exactly what jinja2 renders (tools/render_chat_template.py, run at test time, as
// tests/unit/tokenizer/test_chat_template_oracle.cpp does) for the messages as vLLM hands them to
// templates: content "" for null, arguments parsed into mappings. Where jinja2 refuses (Gemma 3's
// template allows only alternating user/assistant turns), we must refuse too.
#include <gtest/gtest.h>

#include <map>

#include "../tokenizer/jinja_oracle.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"

namespace pagellm::server::test {
namespace {

using Json = nlohmann::ordered_json;
using pagellm::test::repo_path;

const char* const kFamilies[] = {"qwen3", "llama3", "gemma3", "deepseek_v3"};

Json weather_tool() {
  return Json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                     "required": ["city"]}}})");
}

Json call(const std::string& id, const std::string& name, const std::string& arguments) {
  return Json{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

struct HistoryCase {
  std::string name;
  Json messages;  // as a client sends them
  Json expected;  // as vLLM gives them to the template
};

std::vector<HistoryCase> cases() {
  const Json user = {{"role", "user"}, {"content", "Weather in Paris and 東京 for 2 days?"}};
  std::vector<HistoryCase> out;
  {
    Json assistant = {{"role", "assistant"}, {"content", nullptr},
                      {"tool_calls", {call("call_a1", "get_weather", R"({"city": "Paris", "days": 2})")}}};
    Json tool = {{"role", "tool"}, {"tool_call_id", "call_a1"}, {"content", "{\"temp\": 21, \"sky\": \"☀️\"}"}};
    Json expected_assistant = assistant;
    expected_assistant["content"] = "";
    expected_assistant["tool_calls"][0]["function"]["arguments"] = Json::parse(R"({"city": "Paris", "days": 2})");
    out.push_back({"content_null_one_call", {user, assistant, tool}, {user, expected_assistant, tool}});
  }
  {
    Json assistant = {{"role", "assistant"}, {"content", "Checking both."},
                      {"tool_calls", {call("call_b1", "get_weather", R"({"city": "Paris"})"),
                                      call("call_b2", "get_weather", R"({"city": "東京", "days": 2})")}}};
    Json tool1 = {{"role", "tool"}, {"tool_call_id", "call_b1"}, {"content", "21C"}};
    Json tool2 = {{"role", "tool"}, {"tool_call_id", "call_b2"},
                  {"content", Json::array({{{"type", "text"}, {"text", "18C"}}, {{"type", "text"}, {"text", "rain"}}})}};
    Json answer = {{"role", "assistant"}, {"content", "Paris 21C, Tokyo 18C with rain."}};
    Json expected_assistant = assistant;
    expected_assistant["tool_calls"][0]["function"]["arguments"] = Json::parse(R"({"city": "Paris"})");
    expected_assistant["tool_calls"][1]["function"]["arguments"] = Json::parse(R"({"city": "東京", "days": 2})");
    Json expected_tool2 = tool2;
    expected_tool2["content"] = "18C\nrain";
    out.push_back({"content_text_two_calls_then_answer",
                   {user, assistant, tool1, tool2, answer, {{"role", "user"}, {"content", "Thanks!"}}},
                   {user, expected_assistant, tool1, expected_tool2, answer, {{"role", "user"}, {"content", "Thanks!"}}}});
  }
  {
    // Content absent, arguments not JSON (vLLM passes {}), and an empty arguments string.
    Json assistant = {{"role", "assistant"},
                      {"tool_calls", {call("call_c1", "get_weather", "not json"), call("call_c2", "get_weather", "")}}};
    Json tool = {{"role", "tool"}, {"tool_call_id", "call_c1"}, {"content", "error"}};
    Json expected_assistant = assistant;
    expected_assistant["content"] = "";
    expected_assistant["tool_calls"][0]["function"]["arguments"] = Json::object();
    expected_assistant["tool_calls"][1]["function"]["arguments"] = Json::object();
    out.push_back({"content_absent_bad_arguments", {user, assistant, tool}, {user, expected_assistant, tool}});
  }
  return out;
}

TEST(ChatHistoryTemplates, ToolCallHistoryRendersAsJinja2RendersVllmsMessages) {
  ParseOptions options;
  options.served_model_name = "m";
  options.vocab_size = 1000;
  Json requests = Json::array();
  std::vector<std::pair<std::string, ChatTemplateInputs>> ours;
  for (const char* family : kFamilies) {
    for (const HistoryCase& c : cases()) {
      const Json body = {{"model", "m"}, {"messages", c.messages}, {"tools", {weather_tool()}}, {"tool_choice", "none"}};
      ChatRequest parsed;
      std::optional<ApiError> error = parse_chat_request(body, options, parsed);
      ASSERT_FALSE(error) << c.name << ": " << error->message;
      EXPECT_EQ(parsed.template_inputs.messages, c.expected) << c.name;
      // tool_choice "none" keeps the tools out of the prompt; render them too, as vLLM does by default.
      parsed.template_inputs.tools = Json::array({weather_tool()});
      ours.emplace_back(std::string(family) + "/" + c.name, parsed.template_inputs);
      requests.push_back({{"tokenizer_config", repo_path(std::string("assets/tokenizers/") + family + "/tokenizer_config.json")},
                          {"messages", c.expected},
                          {"tools", {weather_tool()}},
                          {"add_generation_prompt", true}});
    }
  }
  std::string why;
  const std::vector<pagellm::test::OracleResult> expected = pagellm::test::run_jinja_oracle(requests, &why);
  ASSERT_EQ(expected.size(), ours.size()) << why;
  std::map<std::string, ChatTemplate> templates;
  int rendered = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    const std::string family = ours[i].first.substr(0, ours[i].first.find('/'));
    if (!templates.count(family)) {
      auto t = ChatTemplate::from_tokenizer_config(repo_path("assets/tokenizers/" + family + "/tokenizer_config.json"));
      ASSERT_TRUE(t.has_value()) << t.status().message();
      templates.emplace(family, std::move(t).value());
    }
    ours[i].second.add_generation_prompt = true;
    Expected<std::string> got = templates.at(family).render(ours[i].second);
    if (expected[i].ok) {
      ASSERT_TRUE(got.has_value()) << ours[i].first << ": " << got.status().message();
      EXPECT_EQ(*got, expected[i].text) << ours[i].first;
      ++rendered;
    } else {
      EXPECT_FALSE(got.has_value()) << ours[i].first << ": jinja2 failed with " << expected[i].error;
    }
  }
  // Qwen3, Llama 3 and DeepSeek-V3 render every case; Gemma 3's template refuses tool turns.
  EXPECT_EQ(rendered, 9);
}

TEST(ChatHistoryTemplates, MalformedToolCallsAreA400) {
  ParseOptions options;
  options.served_model_name = "m";
  options.vocab_size = 1000;
  for (const Json& calls : {Json("x"), Json::array({Json("x")}), Json::array({{{"function", {{"arguments", "{}"}}}}})}) {
    const Json body = {{"model", "m"},
                       {"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"tool_calls", calls}}}}};
    ChatRequest parsed;
    std::optional<ApiError> error = parse_chat_request(body, options, parsed);
    ASSERT_TRUE(error) << calls.dump();
    EXPECT_EQ(error->param.rfind("messages[1].tool_calls", 0), 0u) << error->param;
  }
}

}  // namespace
}  // namespace pagellm::server::test
