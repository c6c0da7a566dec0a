// Bad input never takes the server down nor disturbs others: each malformed request gets the right
// 4xx with an OpenAI-shaped error while a valid stream runs alongside and completes intact; floods
// of dropped connections and slow-loris heads leave the server responsive.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "http_test_client.h"
#include "serve_process.h"

namespace pagellm::e2e {
namespace {

using nlohmann::json;

// A valid greedy stream running in the background; finish() says whether it came through intact.
class BackgroundStream {
 public:
  BackgroundStream(int port, int max_tokens) : max_tokens_(max_tokens) {
    thread_ = std::thread([this, port] {
      const json body = {{"model", kModelName}, {"prompt", "A long and steady story"}, {"max_tokens", max_tokens_},
                         {"ignore_eos", true},  {"temperature", 0},                       {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
      result_ = http_post_stream(port, "/v1/completions", body, [this](const std::string&) {
        ++events_;
        return true;
      });
    });
  }
  ~BackgroundStream() {
    if (thread_.joinable()) thread_.join();
  }
  int events() const { return events_; }
  void expect_intact() {
    thread_.join();
    std::vector<std::string> data;
    ASSERT_TRUE(parse_sse(result_.body, data));
    ASSERT_GE(data.size(), 3u);
    EXPECT_EQ(data.back(), "[DONE]");
    const json usage = json::parse(data[data.size() - 2])["usage"];
    EXPECT_EQ(usage["completion_tokens"], max_tokens_);
    EXPECT_EQ(static_cast<int>(data.size()) - 2, max_tokens_);  // token events
    EXPECT_EQ(json::parse(data[data.size() - 3])["choices"][0]["finish_reason"], "length");
  }

 private:
  int max_tokens_;
  std::atomic<int> events_{0};
  HttpResult result_;
  std::thread thread_;
};

void expect_error(const HttpResult& r, int status, const std::string& param = "", const std::string& needle = "") {
  EXPECT_EQ(r.status, status) << r.head << "\n" << r.body;
  const json j = r.json();
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param"));
  EXPECT_TRUE(e.contains("code"));
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << r.body;
  }
  if (!needle.empty()) {
    EXPECT_NE(e["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  }
}

json completion(json extra) {
  json body = {{"model", kModelName}, {"prompt", "Hello"}, {"max_tokens", 4}};
  if (extra.is_object()) body.update(extra);
  return body;
}

json chat(json extra) {
  json body = {{"model", kModelName}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}};
  if (extra.is_object()) body.update(extra);
  return body;
}

TEST(ServeRobustnessTest, BadRequestsGetOpenAiErrorsWhileAStreamRuns) {
  ServeProcess server;
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  BackgroundStream stream(port, 150);
  while (stream.events() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  expect_error(http_post(port, "/v1/completions", "{\"model\": \"test-model\", \"prompt\": "), 400);
  expect_error(http_post(port, "/v1/chat/completions", "[1, 2, 3]"), 400);
  expect_error(http_post(port, "/v1/completions", std::string(5000, '[') + std::string(5000, ']')), 400);
  expect_error(http_post_json(port, "/v1/completions", completion({{"max_tokens", "ten"}})), 400, "max_tokens");
  expect_error(http_post_json(port, "/v1/completions", completion({{"temperature", "hot"}})), 400, "temperature");
  expect_error(http_post_json(port, "/v1/chat/completions", chat({{"stream", "yes"}})), 400, "stream");
  expect_error(http_post_json(port, "/v1/chat/completions", chat({{"messages", "hi"}})), 400, "messages");
  expect_error(http_post_json(port, "/v1/chat/completions", chat({{"messages", {{{"role", "user"}, {"content", 5}}}}})), 400);
  expect_error(http_post_json(port, "/v1/completions", completion({{"prompt", {1, "a"}}})), 400, "prompt");
  expect_error(http_post_json(port, "/v1/completions", completion({{"max_tokens", -5}})), 400, "max_tokens");
  expect_error(http_post_json(port, "/v1/completions", completion({{"max_tokens", 0}})), 400, "max_tokens");
  // Huge max_tokens: the message names the prompt length and max_model_len.
  expect_error(http_post_json(port, "/v1/completions", completion({{"max_tokens", 1000000000000LL}})), 400, "max_tokens",
               "1024");
  expect_error(http_post_json(port, "/v1/completions", completion({{"max_tokens", 1020}, {"prompt", {1, 2, 3, 4, 5, 6}}})),
               400, "max_tokens", "6 tokens and max_tokens is 1020");
  expect_error(http_post_json(port, "/v1/completions", completion({{"temperature", -0.5}})), 400, "temperature");
  expect_error(http_post_json(port, "/v1/completions", completion({{"top_p", 1.5}})), 400, "top_p");
  expect_error(http_post_json(port, "/v1/completions", completion({{"top_k", -2}})), 400, "top_k");
  expect_error(http_post_json(port, "/v1/completions", completion({{"n", 0}})), 400, "n");
  expect_error(http_post_json(port, "/v1/completions", completion({{"logprobs", 100}})), 400, "logprobs");
  expect_error(http_post_json(port, "/v1/completions", completion({{"presence_penalty", 3}})), 400, "presence_penalty");
  expect_error(http_post_json(port, "/v1/completions", completion({{"stop", {1, 2}}})), 400, "stop");
  expect_error(http_post_json(port, "/v1/completions", completion({{"min_tokens", 10}})), 400, "min_tokens");
  expect_error(http_post_json(port, "/v1/chat/completions", chat({{"top_logprobs", 2}})), 400, "top_logprobs");
  const HttpResult unknown = http_post_json(port, "/v1/completions", completion({{"model", "gpt-4"}}));
  expect_error(unknown, 404, "model");
  EXPECT_EQ(unknown.json()["error"]["code"], "model_not_found");
  json no_model = completion({});
  no_model.erase("model");
  expect_error(http_post_json(port, "/v1/completions", no_model), 400, "model");
  expect_error(http_post_json(port, "/v1/chat/completions", chat({{"messages", json::array()}})), 400, "messages");
  expect_error(http_post_json(port, "/v1/chat/completions", chat({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}})), 400);
  expect_error(http_post_json(port, "/v1/chat/completions",
                              chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}})), 400);
  expect_error(http_post(port, "/v1/completions", "{\"model\":\"test-model\",\"prompt\":\"\xff\xfe\xc3\"}"), 400);
  expect_error(http_post(port, "/v1/completions", std::string("{\"model\":\"test-model\",\"prompt\":\"a") + '\0' + "b\"}"), 400);
  // A 20 MB body is refused before it is read.
  const std::string big = "{\"model\":\"test-model\",\"prompt\":\"" + std::string(20 << 20, 'a') + "\"}";
  expect_error(http_post(port, "/v1/completions", big), 413);
  // Prompts longer than max_model_len, as ids and as text; ids outside the vocabulary.
  expect_error(http_post_json(port, "/v1/completions", completion({{"prompt", std::vector<int>(2000, 100)}})), 400,
               "max_tokens", "1024");
  std::string words;
  for (int i = 0; i < 1500; ++i) words += " hello";
  json long_text = completion({{"prompt", words}});
  long_text.erase("max_tokens");
  expect_error(http_post_json(port, "/v1/completions", long_text), 400, "prompt", "1024");
  expect_error(http_post_json(port, "/v1/completions", completion({{"prompt", {1, 151936}}})), 400, "prompt");
  expect_error(http_post_json(port, "/v1/completions", completion({{"prompt", {{1}, {-1}}}})), 400, "prompt");
  expect_error(http_post_json(port, "/v1/completions", completion({{"stop_token_ids", {999999999}}})), 400, "stop_token_ids");
  // Broken HTTP itself.
  expect_error(raw_request(port, "GARBAGE\r\n\r\n"), 400);
  expect_error(raw_request(port, "POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n"), 400);
  expect_error(raw_request(port, "GET /health HTTP/1.1\r\nX: " + std::string(100000, 'h') + "\r\n\r\n"), 431);
  EXPECT_GT(stream.events(), 2);
  stream.expect_intact();
  EXPECT_EQ(http_get(port, "/health").status, 200);
}

TEST(ServeRobustnessTest, ThousandsOfDroppedConnectionsAndSlowLoris) {
  ServeProcess server({"--header-timeout-s", "2"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  BackgroundStream stream(port, 120);
  while (stream.events() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Slow-loris: heads that never finish, a byte at a time.
  std::vector<int> slow;
  for (int i = 0; i < 50; ++i) {
    const int fd = connect_local(port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
    slow.push_back(fd);
  }
  // 2,000 connections opened and dropped: silent, mid-head, mid-body.
  for (int i = 0; i < 2000; ++i) {
    const int fd = connect_local(port);
    ASSERT_GE(fd, 0) << i;
    if (i % 3 == 1) send_all(fd, "POST /v1/completions HTTP/1.1\r\nContent-Len");
    if (i % 3 == 2) send_all(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"model\"");
    ::close(fd);
  }
  // The server still answers promptly while the slow heads trickle.
  for (int round = 0; round < 3; ++round) {
    for (int fd : slow) send_all(fd, "X");
    const auto started = std::chrono::steady_clock::now();
    const HttpResult r = http_post_json(port, "/v1/completions", {{"model", kModelName}, {"prompt", "Hi"}, {"max_tokens", 2}});
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  // The slow heads are cut off once --header-timeout-s passed (408, then the connection closes).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  for (int fd : slow) {
    std::string got;
    char buffer[4096];
    ssize_t n;
    while ((n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0) got.append(buffer, static_cast<size_t>(n));
    EXPECT_NE(got.find("408"), std::string::npos) << got;
    ::close(fd);
  }
  stream.expect_intact();
}

}  // namespace
}  // namespace pagellm::e2e
