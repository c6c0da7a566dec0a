// `pagellm serve` through raw HTTP: response shapes of every route, streaming framing (also with
// curl), abort on disconnect, API keys, the waiting-queue bound and graceful shutdown.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "http_test_client.h"
#include "serve_process.h"

namespace pagellm::e2e {
namespace {

using nlohmann::json;

class ServeApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = std::make_unique<ServeProcess>();
    ASSERT_TRUE(server_->ready()) << server_->log();
  }
  static void TearDownTestSuite() { server_.reset(); }
  int port() const { return server_->port(); }
  static std::unique_ptr<ServeProcess> server_;
};
std::unique_ptr<ServeProcess> ServeApiTest::server_;

json chat_body(int max_tokens) {
  return {{"model", kModelName},
          {"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

void expect_usage(const json& usage, int prompt_tokens, int completion_tokens) {
  EXPECT_EQ(usage["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(usage["completion_tokens"], completion_tokens);
  EXPECT_EQ(usage["total_tokens"], prompt_tokens + completion_tokens);
}

TEST_F(ServeApiTest, ChatCompletionHasOpenAiShape) {
  json body = chat_body(8);
  body["messages"] = {{{"role", "system"}, {"content", "Be brief."}},
                      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}, {{"type", "text"}, {"text", "there"}}}}}};
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  body["user"] = "ignored";
  body["some_unknown_field"] = {1, 2};
  const HttpResult r = http_post_json(port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json");
  const json j = r.json();
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], kModelName);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  const std::string finish = j["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 5);
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 8);
  if (finish == "length") {
    EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  }
}

TEST_F(ServeApiTest, CompletionsWithTokenIdPromptsAndN) {
  const json body = {{"model", kModelName}, {"prompt", {{1, 2, 3}, {4, 5, 6, 7}}}, {"max_tokens", 5},
                     {"n", 2},             {"ignore_eos", true},                  {"seed", 7}};
  const HttpResult r = http_post_json(port(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "text_completion");
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_TRUE(j["choices"][i]["text"].is_string());
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
  }
  expect_usage(j["usage"], 7, 20);
  // A single prompt of ids works too, and the same seed gives the same samples.
  const json one = {{"model", kModelName}, {"prompt", {1, 2, 3}}, {"max_tokens", 5}, {"n", 2}, {"ignore_eos", true}, {"seed", 7}};
  const json k = http_post_json(port(), "/v1/completions", one).json();
  ASSERT_EQ(k["choices"].size(), 2u);
  EXPECT_EQ(k["choices"][0]["text"], j["choices"][0]["text"]);
  EXPECT_EQ(k["choices"][1]["text"], j["choices"][1]["text"]);
}

TEST_F(ServeApiTest, CompletionsEchoAndStringPrompts) {
  const json body = {{"model", kModelName}, {"prompt", {"Hello", "The sky is"}}, {"max_tokens", 3},
                     {"echo", true},       {"temperature", 0}};
  const HttpResult r = http_post_json(port(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["text"].get<std::string>().rfind("Hello", 0), 0u);
  EXPECT_EQ(j["choices"][1]["text"].get<std::string>().rfind("The sky is", 0), 0u);
}

TEST_F(ServeApiTest, CompletionLogprobs) {
  const json body = {{"model", kModelName}, {"prompt", "Once upon"}, {"max_tokens", 4},
                     {"logprobs", 3},      {"ignore_eos", true},     {"temperature", 0}};
  const HttpResult r = http_post_json(port(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json lp = r.json()["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  ASSERT_EQ(lp["text_offset"].size(), 4u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 3u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 4u);
  }
  // Greedy: the sampled token is the most likely one.
  double best = -1e9;
  for (auto& [token, value] : lp["top_logprobs"][0].items()) best = std::max(best, value.get<double>());
  EXPECT_NEAR(lp["token_logprobs"][0].get<double>(), best, 1e-4);
}

TEST_F(ServeApiTest, ChatLogprobs) {
  json body = chat_body(3);
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  body["ignore_eos"] = true;
  const HttpResult r = http_post_json(port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json content = r.json()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  for (const json& entry : content) {
    EXPECT_TRUE(entry["token"].is_string());
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(entry["bytes"].is_array());
    EXPECT_EQ(entry["top_logprobs"].size(), 2u);
  }
}

// Reads a whole SSE response and checks its framing: data events, role first, [DONE] last.
struct StreamResult {
  std::vector<json> chunks;  // without [DONE]
  bool framed = false, done = false;
  std::string text;
  int token_events = 0;
  std::optional<json> usage;
  std::string finish_reason;
};

StreamResult read_stream(const HttpResult& r, bool chat) {
  StreamResult s;
  std::vector<std::string> data;
  s.framed = parse_sse(r.body, data);
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] == "[DONE]") {
      s.done = i + 1 == data.size();
      continue;
    }
    json chunk = json::parse(data[i]);
    if (chunk["choices"].empty()) {
      s.usage = chunk["usage"];
    } else {
      const json& choice = chunk["choices"][0];
      s.text += chat ? choice["delta"]["content"].get<std::string>() : choice["text"].get<std::string>();
      if (!choice["finish_reason"].is_null()) s.finish_reason = choice["finish_reason"];
      ++s.token_events;
    }
    s.chunks.push_back(std::move(chunk));
  }
  return s;
}

TEST_F(ServeApiTest, StreamedChatFramingMatchesWholeResponse) {
  json body = chat_body(12);
  body["ignore_eos"] = true;
  const json whole = http_post_json(port(), "/v1/chat/completions", body).json();
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const HttpResult r = http_post_json(port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_EQ(r.header("transfer-encoding"), "chunked");
  const StreamResult s = read_stream(r, true);
  EXPECT_TRUE(s.framed) << r.body;
  EXPECT_TRUE(s.done);
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_EQ(s.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(s.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(s.chunks[0]["id"], s.chunks.back()["id"]);
  for (size_t i = 1; i < s.chunks.size(); ++i)
    if (!s.chunks[i]["choices"].empty()) {
      EXPECT_FALSE(s.chunks[i]["choices"][0]["delta"].contains("role")) << i;
    }
  ASSERT_TRUE(s.usage.has_value());
  EXPECT_TRUE(s.chunks.back()["choices"].empty());
  EXPECT_EQ((*s.usage)["completion_tokens"], 12);
  EXPECT_EQ(s.token_events, 12);  // one event per token
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.text, whole["choices"][0]["message"]["content"]);
  EXPECT_EQ((*s.usage)["prompt_tokens"], whole["usage"]["prompt_tokens"]);
}

TEST_F(ServeApiTest, StreamedCompletionWithoutUsageEndsWithDone) {
  const json body = {{"model", kModelName}, {"prompt", "Hello"}, {"max_tokens", 5}, {"stream", true}, {"ignore_eos", true}};
  const HttpResult r = http_post_json(port(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200);
  const StreamResult s = read_stream(r, false);
  EXPECT_TRUE(s.framed);
  EXPECT_TRUE(s.done);
  EXPECT_FALSE(s.usage.has_value());
  EXPECT_EQ(s.token_events, 5);
  EXPECT_EQ(s.chunks[0]["object"], "text_completion");
  EXPECT_FALSE(s.chunks[0].contains("usage"));
}

TEST_F(ServeApiTest, CurlSeesWellFramedSse) {
  const std::string command =
      "curl -sN --max-time 60 " + server_->base_url() +
      "/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\":\"test-model\",\"messages\":"
      "[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":6,\"ignore_eos\":true,\"stream\":true}'";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int rc = ::pclose(pipe);
  if (WEXITSTATUS(rc) == 127) GTEST_SKIP() << "curl not installed";
  std::vector<std::string> data;
  EXPECT_TRUE(parse_sse(out, data)) << out;
  ASSERT_EQ(data.size(), 7u) << out;  // 6 token events + [DONE]
  EXPECT_EQ(data.back(), "[DONE]");
}

TEST_F(ServeApiTest, ClientDisconnectAbortsAndFreesBlocks) {
  const json body = {{"model", kModelName}, {"prompt", "Tell me a long story"}, {"max_tokens", 900},
                     {"ignore_eos", true},  {"stream", true}};
  const double aborted_before =
      metric_value(http_get(port(), "/metrics").body, "pagellm:request_success_total{model_name=\"test-model\",finished_reason=\"abort\"}")
          .value_or(-1);
  int events = 0;
  bool saw_blocks_in_use = false;
  http_post_stream(port(), "/v1/completions", body, [&](const std::string&) {
    if (++events == 3)
      saw_blocks_in_use = metric_value(http_get(port(), "/metrics").body, "pagellm:kv_cache_blocks_used").value_or(0) > 0;
    return events < 5;  // hang up after 5 events
  });
  EXPECT_EQ(events, 5);
  EXPECT_TRUE(saw_blocks_in_use);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  double aborted = aborted_before, used = -1, running = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string metrics = http_get(port(), "/metrics").body;
    aborted = metric_value(metrics, "pagellm:request_success_total{model_name=\"test-model\",finished_reason=\"abort\"}").value_or(-1);
    used = metric_value(metrics, "pagellm:kv_cache_blocks_used").value_or(-1);
    running = metric_value(metrics, "pagellm:num_requests_running").value_or(-1);
    if (aborted == aborted_before + 1 && used == 0 && running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(aborted, aborted_before + 1);
  EXPECT_EQ(used, 0);
  EXPECT_EQ(running, 0);
}

TEST_F(ServeApiTest, ModelsHealthVersionMetrics) {
  const json models = http_get(port(), "/v1/models").json();
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], kModelName);
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["owned_by"], "pagellm");
  EXPECT_EQ(models["data"][0]["max_model_len"], kMaxModelLen);
  EXPECT_EQ(http_get(port(), "/health").status, 200);
  const json version = http_get(port(), "/version").json();
  EXPECT_TRUE(version["version"].is_string());
  EXPECT_EQ(version["backend"], "cpu");
  EXPECT_TRUE(version.contains("git_commit"));
  const HttpResult metrics = http_get(port(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.header("content-type").rfind("text/plain", 0), 0u);
  for (const char* name :
       {"pagellm:num_requests_running{", "pagellm:num_requests_waiting{", "pagellm:request_success_total{",
        "pagellm:prompt_tokens_total{", "pagellm:generation_tokens_total{", "pagellm:kv_cache_usage_perc{",
        "pagellm:kv_cache_blocks_used{", "pagellm:kv_cache_blocks_total{", "pagellm:prefix_cache_queries_total{",
        "pagellm:prefix_cache_hits_total{", "pagellm:num_preemptions_total{",
        "pagellm:time_to_first_token_seconds_bucket{", "pagellm:inter_token_latency_seconds_count{",
        "pagellm:e2e_request_latency_seconds_sum{", "pagellm:request_queue_time_seconds_bucket{"})
    EXPECT_NE(metrics.body.find(name), std::string::npos) << name;
  EXPECT_NE(metrics.body.find("# TYPE pagellm:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(metrics.body.find("le=\"+Inf\""), std::string::npos);
}

// The vllm:* families carry the same counts as pagellm's, in vLLM's names, labels and buckets (vLLM's
// Grafana dashboard reads time_per_output_token_seconds and latency buckets past 60 s).
TEST_F(ServeApiTest, MetricsAlsoAsVllmExportsThem) {
  const json body = {{"model", kModelName}, {"prompt", {{1, 2, 3}}}, {"max_tokens", 4}};
  ASSERT_EQ(http_post_json(port(), "/v1/completions", body).status, 200);
  const std::string labels = "{model_name=\"" + std::string(kModelName) + "\",engine=\"0\"";
  // The engine books a finished request just after its last output reaches the handler.
  std::string text = http_get(port(), "/metrics").body;
  for (int i = 0; i < 200 && metric_value(text, "vllm:request_generation_tokens_count" + labels).value_or(0) < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    text = http_get(port(), "/metrics").body;
  }
  for (const char* family : {"num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "gpu_cache_usage_perc",
                             "num_preemptions_total", "prompt_tokens_total", "generation_tokens_total",
                             "prefix_cache_queries_total", "prefix_cache_hits_total"})
    EXPECT_TRUE(metric_value(text, "vllm:" + std::string(family) + labels).has_value()) << family;
  EXPECT_EQ(metric_value(text, "vllm:generation_tokens_total" + labels),
            metric_value(text, "pagellm:generation_tokens_total{model_name=\"" + std::string(kModelName) + "\"}"));
  EXPECT_GE(metric_value(text, "vllm:request_success_total" + labels + ",finished_reason=\"length\"}").value_or(0), 1);
  EXPECT_GE(metric_value(text, "vllm:request_generation_tokens_count" + labels).value_or(0), 1);
  EXPECT_GE(metric_value(text, "vllm:time_per_output_token_seconds_count" + labels).value_or(0), 3);
  EXPECT_GE(metric_value(text, "vllm:time_per_output_token_seconds_bucket" + labels + ",le=\"80\"}").value_or(0), 3);
  EXPECT_GE(metric_value(text, "vllm:e2e_request_latency_seconds_bucket" + labels + ",le=\"7680\"}").value_or(0), 1);
  EXPECT_GE(metric_value(text, "vllm:time_to_first_token_seconds_bucket" + labels + ",le=\"2560\"}").value_or(0), 1);
  EXPECT_NE(text.find("# TYPE vllm:request_queue_time_seconds histogram"), std::string::npos);
  // And an access log line per answered request, as vLLM's HTTP server writes.
  EXPECT_NE(server_->log().find("POST /v1/completions 200 OK"), std::string::npos);
  EXPECT_NE(text.find("pagellm:e2e_request_latency_seconds_bucket{model_name=\"" + std::string(kModelName) +
                      "\",le=\"1800\"}"),
            std::string::npos);
}

// --generation-config FOLDER with do_sample false: requests that name no temperature are greedy (two
// unseeded runs agree), one that asks for temperature 1 still samples as it asked.
TEST(ServeGenerationConfig, DefaultsApplyToFieldsRequestsLeaveOut) {
  const std::string dir = ::testing::TempDir() + "pagellm_e2e_gen_config";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/generation_config.json") << R"({"do_sample": false, "max_new_tokens": 6})";
  ServeProcess server({"--generation-config", dir});
  ASSERT_TRUE(server.ready()) << server.log();
  EXPECT_NE(server.log().find("temperature=0, max_tokens=6"), std::string::npos) << server.log();
  const json body = {{"model", kModelName}, {"prompt", "Hello there"}};
  const json first = http_post_json(server.port(), "/v1/completions", body).json();
  const json second = http_post_json(server.port(), "/v1/completions", body).json();
  EXPECT_EQ(first["usage"]["completion_tokens"], 6);
  EXPECT_EQ(first["choices"][0]["text"], second["choices"][0]["text"]);
}

// Several --served-model-name values: each is a model clients may name, listed by /v1/models, and
// responses say the name the request used.
TEST(ServeModelNames, EveryServedNameAnswers) {
  ServeProcess server({"--served-model-name", "alias-a"});  // after the default test-model
  ASSERT_TRUE(server.ready()) << server.log();
  const json models = http_get(server.port(), "/v1/models").json();
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], kModelName);
  EXPECT_EQ(models["data"][1]["id"], "alias-a");
  const HttpResult aliased = http_post_json(server.port(), "/v1/completions",
                                            json{{"model", "alias-a"}, {"prompt", "Hi"}, {"max_tokens", 2}});
  ASSERT_EQ(aliased.status, 200) << aliased.body;
  EXPECT_EQ(aliased.json()["model"], "alias-a");
  EXPECT_EQ(http_post_json(server.port(), "/v1/completions", json{{"model", "other"}, {"prompt", "Hi"}}).status, 404);
}

TEST_F(ServeApiTest, TokenizeAndDetokenize) {
  const json tokens = http_post_json(port(), "/tokenize", {{"prompt", "Hello world"}}).json();
  ASSERT_TRUE(tokens["tokens"].is_array()) << tokens.dump();
  EXPECT_EQ(tokens["count"], tokens["tokens"].size());
  EXPECT_EQ(tokens["max_model_len"], kMaxModelLen);
  const json text = http_post_json(port(), "/detokenize", {{"tokens", tokens["tokens"]}}).json();
  EXPECT_EQ(text["prompt"], "Hello world");
  const json chat = http_post_json(port(), "/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}).json();
  EXPECT_GT(chat["count"].get<int>(), 3);
  EXPECT_EQ(http_post_json(port(), "/detokenize", {{"tokens", {-1}}}).status, 400);
}

TEST_F(ServeApiTest, RoutesMethodsAndSuffix) {
  const HttpResult missing = http_get(port(), "/v1/nothing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(missing.json()["error"]["message"].is_string());
  EXPECT_EQ(http_get(port(), "/v1/completions").status, 405);
  const HttpResult suffix = http_post_json(port(), "/v1/completions", {{"model", kModelName}, {"prompt", "a"}, {"suffix", "b"}});
  EXPECT_EQ(suffix.status, 400);
  EXPECT_NE(suffix.json()["error"]["message"].get<std::string>().find("not supported"), std::string::npos);
}

TEST(ServeApiKeyTest, BearerKeyRequiredExceptHealth) {
  ServeProcess server({"--api-key", "sekret"});
  ASSERT_TRUE(server.ready()) << server.log();
  const json body = chat_body(2);
  const HttpResult none = http_post_json(server.port(), "/v1/chat/completions", body);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.json()["error"]["code"], "invalid_api_key");
  EXPECT_EQ(http_post_json(server.port(), "/v1/chat/completions", body, "Authorization: Bearer wrong\r\n").status, 401);
  EXPECT_EQ(http_get(server.port(), "/v1/models").status, 401);
  EXPECT_EQ(http_post_json(server.port(), "/v1/chat/completions", body, "Authorization: Bearer sekret\r\n").status, 200);
  EXPECT_EQ(http_get(server.port(), "/health").status, 200);
}

TEST(ServeQueueTest, FullWaitingQueueAnswers429) {
  ServeProcess server({"--max-waiting", "2"});
  ASSERT_TRUE(server.ready()) << server.log();
  const json slow = {{"model", kModelName}, {"prompt", "x"}, {"max_tokens", 600}, {"ignore_eos", true}, {"stream", true}};
  std::atomic<int> started{0};
  std::vector<std::thread> streams;
  for (int i = 0; i < 2; ++i)
    streams.emplace_back([&] {
      bool counted = false;
      http_post_stream(server.port(), "/v1/completions", slow, [&](const std::string&) {
        if (!counted) ++started;
        counted = true;
        return started < 3;  // keep streaming until the test has its answer
      });
    });
  while (started < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const HttpResult third = http_post_json(server.port(), "/v1/completions", {{"model", kModelName}, {"prompt", "y"}, {"max_tokens", 2}});
  EXPECT_EQ(third.status, 429) << third.body;
  EXPECT_EQ(third.json()["error"]["type"], "rate_limit_error");
  started = 3;
  for (auto& t : streams) t.join();
}

TEST(ServeShutdownTest, SigtermEndsStreamsAndExitsZero) {
  auto server = std::make_unique<ServeProcess>();
  ASSERT_TRUE(server->ready()) << server->log();
  const json body = {{"model", kModelName}, {"prompt", "x"}, {"max_tokens", 900}, {"ignore_eos", true}, {"stream", true}};
  std::atomic<int> events{0};
  HttpResult result;
  std::thread stream([&] {
    result = http_post_stream(server->port(), "/v1/completions", body, [&](const std::string&) {
      ++events;
      return true;
    });
  });
  while (events < 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(server->stop(SIGTERM, 10000), 0) << server->log();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(8));
  stream.join();
  // The in-flight stream was ended properly: finish_reason "abort", then [DONE].
  std::vector<std::string> data;
  EXPECT_TRUE(parse_sse(result.body, data));
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(json::parse(data[data.size() - 2])["choices"][0]["finish_reason"], "abort");
}

}  // namespace
}  // namespace pagellm::e2e
