// The real chat templates of Qwen3, Llama 3, Gemma 3 and DeepSeek-V3 (assets/tokenizers/*/
// tokenizer_config.json), Llama 3.1 with tools and Mistral-7B-Instruct-v0.3 with tools
// (tests/golden/chat_template/templates/*/: the template as the model ships it) rendered on
// tests/golden/chat_template/conversations.json must equal what jinja2 renders as transformers
// configures it (tools/render_chat_template.py, run here).
// Where jinja2 fails (a template's raise_exception, or a TypeError on content it does not
// handle), we must fail too, and with raise_exception's message.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "jinja_oracle.h"
#include "tokenizer/chat_template.h"

namespace pagellm::test {
namespace {

// Families whose template ships in no npm tokenizer package keep it in the repository.
std::string config_path(const std::string& family) {
  const std::string kept = repo_path("tests/golden/chat_template/templates/" + family + "/tokenizer_config.json");
  if (std::filesystem::exists(kept)) return kept;
  return repo_path("assets/tokenizers/" + family + "/tokenizer_config.json");
}

TEST(ChatTemplateOracle, RealTemplatesMatchJinja2) {
  std::ifstream in(repo_path("tests/golden/chat_template/conversations.json"));
  ASSERT_TRUE(in) << "missing conversations.json";
  nlohmann::ordered_json cases = nlohmann::ordered_json::parse(in)["cases"];
  ASSERT_GE(cases.size(), 150u);

  nlohmann::ordered_json requests = nlohmann::ordered_json::array();
  for (const auto& c : cases) {
    nlohmann::ordered_json r = c;
    r["tokenizer_config"] = config_path(c["family"].get<std::string>());
    requests.push_back(r);
  }
  std::string why;
  std::vector<OracleResult> expected = run_jinja_oracle(requests, &why);
  ASSERT_EQ(expected.size(), cases.size()) << why;

  std::map<std::string, ChatTemplate> templates;
  std::map<std::string, std::pair<int, int>> per_family;  // passed, total
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string family = c["family"].get<std::string>();
    const std::string name = family + "/" + c["name"].get<std::string>();
    if (!templates.count(family)) {
      auto t = ChatTemplate::from_tokenizer_config(config_path(family));
      ASSERT_TRUE(t.has_value()) << t.status().message();
      templates.emplace(family, std::move(t).value());
    }
    ChatTemplateInputs inputs;
    inputs.messages = c["messages"];
    if (c.contains("tools")) inputs.tools = c["tools"];
    inputs.add_generation_prompt = c.value("add_generation_prompt", false);
    if (c.contains("kwargs")) inputs.extra_kwargs = c["kwargs"];
    Expected<std::string> got = templates.at(family).render(inputs);
    auto& [passed, total] = per_family[family];
    ++total;
    const OracleResult& want = expected[i];
    if (want.ok) {
      ASSERT_TRUE(got.has_value()) << name << ": " << got.status().message();
      EXPECT_EQ(*got, want.text) << name;
      passed += *got == want.text;
    } else {
      EXPECT_FALSE(got.has_value()) << name << ": jinja2 failed with " << want.error << " but we rendered";
      if (got.has_value()) continue;
      EXPECT_EQ(got.status().message().rfind("[chat_template] ", 0), 0u) << got.status().message();
      EXPECT_EQ(got.status().message().find('\n'), std::string::npos);
      const std::string prefix = "TemplateError: ";  // raise_exception
      if (want.error.rfind(prefix, 0) == 0) {
        EXPECT_NE(got.status().message().find(want.error.substr(prefix.size())), std::string::npos)
            << name << ": " << got.status().message() << " vs " << want.error;
      }
      ++passed;
    }
  }
  for (const auto& [family, counts] : per_family) {
    std::printf("[chat_template] %s: %d/%d conversations match jinja2\n", family.c_str(), counts.first, counts.second);
    EXPECT_GE(counts.second, 20) << family;
  }
  EXPECT_EQ(per_family.size(), 6u);
}

TEST(ChatTemplate, FromTokenizerConfigReadsSpecialTokenObjects) {
  // DeepSeek-V3 gives bos_token as {"__type": "AddedToken", "content": ...}.
  auto t = ChatTemplate::from_tokenizer_config(config_path("deepseek_v3"));
  ASSERT_TRUE(t.has_value()) << t.status().message();
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  in.add_generation_prompt = true;
  auto r = t->render(in);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(*r, "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>");
}

TEST(ChatTemplate, MissingTemplateAndFileAreOneLineErrors) {
  auto none = ChatTemplate::from_tokenizer_config(repo_path("assets/tokenizers/gptoss/tokenizer_config.json"));
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.status().message().find("has no chat_template"), std::string::npos) << none.status().message();
  auto missing = ChatTemplate::from_tokenizer_config("/nonexistent/tokenizer_config.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ChatTemplate, RaiseExceptionMessageIsReported) {
  auto t = ChatTemplate::from_string(
      "{% if messages|length == 0 %}\n  {{ raise_exception('Need at least one message: ' ~ 0) }}\n{% endif %}");
  ASSERT_TRUE(t.has_value()) << t.status().message();
  auto r = t->render({});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().message(), "[chat_template] line 2, column 6: Need at least one message: 0");
}

TEST(ChatTemplate, TemplateListPicksDefaultAndKwargsOverrideTokens) {
  std::string dir = std::filesystem::temp_directory_path() / ("pagellm_ct_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/tokenizer_config.json");
    f << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "unk_token": null,
             "chat_template": [{"name": "tool_use", "template": "TOOLS"},
                               {"name": "default", "template": "{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}{{ x }}"}]})";
  }
  auto t = ChatTemplate::from_tokenizer_config(dir + "/tokenizer_config.json");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(t.has_value()) << t.status().message();
  ChatTemplateInputs in;
  in.extra_kwargs = {{"x", 1.5}, {"eos_token", "E"}};
  auto r = t->render(in);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(*r, "<s>EFalse1.5");
}

TEST(ChatTemplate, RejectsBadInputs) {
  auto t = ChatTemplate::from_string("{{ messages }}");
  ASSERT_TRUE(t.has_value());
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::object();
  EXPECT_FALSE(t->render(in).has_value());
  in.messages = nlohmann::ordered_json::array({std::string("\xff\xfe")});
  auto bad_utf8 = t->render(in);
  ASSERT_FALSE(bad_utf8.has_value());
  EXPECT_NE(bad_utf8.status().message().find("UTF-8"), std::string::npos);
  EXPECT_FALSE(ChatTemplate::from_string("\xff{{ x }}").has_value());
}

}  // namespace
}  // namespace pagellm::test

namespace pagellm::test {
namespace {

std::string run_command(const std::string& cmd, int* status) {
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *status = ::pclose(pipe);
  return out;
}

TEST(ChatTemplateCli, PrintsTheRenderedPrompt) {
  const std::string dir = std::filesystem::temp_directory_path() / ("pagellm_ct_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir + "/messages.json") << R"([{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi 👋"}])";
  }
  int status = -1;
  const std::string out = run_command(std::string(PAGELLM_CLI) + " chat-template --tokenizer " +
                                          repo_path("assets/tokenizers/qwen3") + " --messages " + dir +
                                          "/messages.json --add-generation-prompt --kwargs '{\"enable_thinking\": false}'",
                                      &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out, "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nHi 👋<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const std::string err = run_command(std::string(PAGELLM_CLI) + " chat-template --tokenizer " +
                                          repo_path("assets/tokenizers/gptoss") + " --messages " + dir + "/messages.json 2>&1",
                                      &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("has no chat_template"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagellm::test
