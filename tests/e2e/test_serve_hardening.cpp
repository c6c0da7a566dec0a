// The front door of `pagellm serve` under hostile HTTP: request smuggling framings are refused and
// the connection closed; refused requests (401, 404, 405) never have their bodies read; bodies in
// flight have a server-wide budget; one address cannot take every connection slot; /health stays
// answerable while a flood holds every slot; and the request-level holes (n × prompts above
// --max-waiting, doubles narrowed to float, HEAD, huge prompts) answer as a user expects.
// Raw sockets, loopback only (floods come from other 127.0.0.x source addresses to 127.0.0.1).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "http_test_client.h"
#include "serve_process.h"

namespace pagellm::e2e {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A connection to 127.0.0.1:port from `source` (another loopback address: a second "client").
int connect_from(const char* source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes the connection (or timeout_ms passes: then the
// text so far and `closed` false).
std::string read_until_close(int fd, int timeout_ms, bool* closed = nullptr) {
  std::string got;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buffer[65536];
  if (closed) *closed = false;
  while (Clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (::poll(&pfd, 1, std::max(left, 1)) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

std::string exchange_until_close(int port, const std::string& raw, int timeout_ms = 5000, bool* closed = nullptr) {
  const int fd = connect_local(port);
  if (fd < 0) return "";
  (void)send_all(fd, raw);
  std::string got = read_until_close(fd, timeout_ms, closed);
  ::close(fd);
  return got;
}

// `count` connections from `source` that each sent `partial_head` and wait (fewer if connect fails).
std::vector<int> open_half_sent(const char* source, int port, int count, const std::string& partial_head) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    const int fd = connect_from(source, port);
    if (fd < 0) break;
    send_all(fd, partial_head);
    fds.push_back(fd);
  }
  return fds;
}

// Status lines ("HTTP/1.1 404") in a stream of responses.
int count_responses(const std::string& stream) {
  int count = 0;
  for (size_t at = stream.find("HTTP/1.1 "); at != std::string::npos; at = stream.find("HTTP/1.1 ", at + 1))
    count += stream.size() > at + 12 && std::isdigit(static_cast<unsigned char>(stream[at + 9])) && stream[at + 12] == ' ';
  return count;
}

int status_of(const std::string& stream) { return stream.size() > 12 ? std::atoi(stream.c_str() + 9) : 0; }

// The OpenAI error object of the first response in `stream`.
json error_of(const std::string& stream) {
  const size_t body = stream.find("\r\n\r\n");
  if (body == std::string::npos) return json();
  const json parsed = json::parse(stream.substr(body + 4), nullptr, false);
  return parsed.is_object() && parsed.contains("error") ? parsed["error"] : json();
}

void expect_openai_error(const std::string& stream, int status, const std::string& code = "") {
  EXPECT_EQ(status_of(stream), status) << stream;
  const json error = error_of(stream);
  ASSERT_TRUE(error.is_object()) << stream;
  EXPECT_TRUE(error["message"].is_string());
  EXPECT_TRUE(error["type"].is_string());
  if (!code.empty()) {
    EXPECT_EQ(error["code"], code) << stream;
  }
}

// "0100007F:1F40": 127.0.0.1:port as /proc/net/tcp writes it.
std::string fmt_port(int port) {
  char text[32];
  std::snprintf(text, sizeof(text), "0100007F:%04X", port);
  return text;
}

// Resident memory of the server listening on `port` (found through its listening socket's inode).
long server_rss_kib(int port) {
  std::ifstream tcp("/proc/net/tcp");
  std::string line, inode;
  const std::string local = fmt_port(port);
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local_address, remote, state, queues, timer, retransmits, uid, timeout, node;
    fields >> slot >> local_address >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> node;
    if (state == "0A" && local_address == local) inode = node;
  }
  if (inode.empty()) return -1;
  const std::string target = "socket:[" + inode + "]";
  DIR* proc = ::opendir("/proc");
  long rss = -1;
  while (dirent* entry = ::readdir(proc)) {
    const std::string pid = entry->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string fd_dir = "/proc/" + pid + "/fd";
    DIR* fds = ::opendir(fd_dir.c_str());
    if (!fds) continue;
    bool owns = false;
    while (dirent* fd = ::readdir(fds)) {
      char link[128];
      const ssize_t n = ::readlink((fd_dir + "/" + fd->d_name).c_str(), link, sizeof(link) - 1);
      if (n > 0 && std::string(link, static_cast<size_t>(n)) == target) owns = true;
      if (owns) break;
    }
    ::closedir(fds);
    if (!owns) continue;
    std::ifstream status("/proc/" + pid + "/status");
    while (std::getline(status, line))
      if (line.rfind("VmRSS:", 0) == 0) rss = std::atol(line.c_str() + 6);
    break;
  }
  ::closedir(proc);
  return rss;
}

json completion(json extra = json::object()) {
  json body = {{"model", kModelName}, {"prompt", "Hello"}, {"max_tokens", 3}, {"ignore_eos", true}};
  for (auto& [key, value] : extra.items()) body[key] = value;
  return body;
}

// True once a small completion is answered 200, retried until `seconds` passed.
bool completes_within(int port, double seconds) {
  const auto started = Clock::now();
  while (seconds_since(started) < seconds) {
    if (http_post_json(port, "/v1/completions", completion()).status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string post_head(const std::string& path, size_t content_length, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(content_length) + "\r\n" + extra_headers + "\r\n";
}

TEST(ServeHardeningTest, SmugglingFramingsAre400AndClose) {
  ServeProcess server;
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  struct Case {
    const char* what;
    std::string head;
  };
  const std::vector<Case> cases = {
      {"two Content-Length values", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: " +
                                        std::to_string(smuggled.size()) + "\r\n\r\n"},
      {"a Content-Length list that disagrees", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 0, " +
                                                   std::to_string(smuggled.size()) + "\r\n\r\n"},
      {"Content-Length and Transfer-Encoding", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
                                               "Transfer-Encoding: chunked\r\n\r\n"},
      {"two Transfer-Encoding headers", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                                        "Transfer-Encoding: identity\r\n\r\n"},
      {"an unknown Transfer-Encoding", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"},
      {"no Host on HTTP/1.1", "GET /health HTTP/1.1\r\n\r\n"},
      {"two Host headers", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    bool closed = false;
    const std::string got = exchange_until_close(port, c.head + smuggled, 5000, &closed);
    expect_openai_error(got, 400);
    EXPECT_TRUE(closed) << "the connection stays open after a framing error";
    EXPECT_EQ(count_responses(got), 1) << "the smuggled request ran:\n" << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos);
  }
  // What is allowed stays allowed: equal duplicate lengths, HTTP/1.0 without Host.
  const std::string body = R"({"tokens": [1, 2]})";
  const std::string twice = "POST /detokenize HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  EXPECT_EQ(status_of(exchange_until_close(port, twice + body)), 200);
  EXPECT_EQ(status_of(exchange_until_close(port, "GET /health HTTP/1.0\r\n\r\n")), 200);
  EXPECT_EQ(http_get(port, "/health").status, 200);
}

TEST(ServeHardeningTest, RefusedRequestsAreAnsweredBeforeTheirBodyArrives) {
  ServeProcess server({"--api-key", "sekret"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  // Heads that announce 10 MB bodies that never come: each answer must not wait for the body.
  struct Case {
    std::string head;
    int status;
    std::string code;
  };
  const std::vector<Case> cases = {
      {post_head("/v1/completions", 10'000'000), 401, "invalid_api_key"},
      {post_head("/v1/completions", 10'000'000, "Authorization: Bearer wrong\r\n"), 401, "invalid_api_key"},
      {post_head("/v1/completions", 10'000'000, "Expect: 100-continue\r\n"), 401, "invalid_api_key"},
      {post_head("/v1/nothing-here", 10'000'000, "Authorization: Bearer sekret\r\n"), 404, "not_found"},
      {post_head("/health", 10'000'000), 405, "method_not_allowed"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.head);
    const auto started = Clock::now();
    bool closed = false;
    const std::string got = exchange_until_close(port, c.head, 5000, &closed);
    expect_openai_error(got, c.status, c.code);
    EXPECT_LT(seconds_since(started), 4.0) << "the server waited for the body";
    EXPECT_TRUE(closed) << "a connection with an unread body must close";
    EXPECT_EQ(got.find("100 Continue"), std::string::npos) << "asked for a body it refuses";
  }
  // The Bearer scheme is case-insensitive.
  for (const char* scheme : {"Bearer", "bearer", "BEARER"})
    EXPECT_EQ(http_get(port, "/v1/models", std::string("Authorization: ") + scheme + " sekret\r\n").status, 200) << scheme;
  // A refused request without a body keeps the connection: the next one is answered on it.
  const std::string two = "GET /v1/nothing-here HTTP/1.1\r\nHost: a\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  const std::string got = exchange_until_close(port, two);
  EXPECT_EQ(count_responses(got), 2) << got;
  EXPECT_EQ(status_of(got), 404);
  EXPECT_NE(got.find("HTTP/1.1 200 OK"), std::string::npos) << got;
}

TEST(ServeHardeningTest, UnauthenticatedBodiesCostNoMemory) {
  ServeProcess server({"--api-key", "sekret"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  const long before_kib = server_rss_kib(port);
  ASSERT_GT(before_kib, 0);
  // 32 clients push 4 MiB bodies (one byte short) without a key.
  const std::string body(4 << 20, ' ');
  std::vector<std::thread> senders;
  std::atomic<int> refused{0};
  for (int i = 0; i < 32; ++i)
    senders.emplace_back([&] {
      const int fd = connect_local(port);
      send_all(fd, post_head("/v1/completions", body.size() + 1) + body);  // may fail once refused: fine
      if (status_of(read_until_close(fd, 5000)) == 401) ++refused;
      ::close(fd);
    });
  for (auto& t : senders) t.join();
  EXPECT_EQ(refused, 32);
  const long after_kib = server_rss_kib(port);
  std::fprintf(stderr, "server RSS %ld -> %ld KiB\n", before_kib, after_kib);
  EXPECT_LT(after_kib - before_kib, 64 * 1024) << "RSS " << before_kib << " -> " << after_kib << " KiB";
  EXPECT_EQ(http_get(port, "/health").status, 200);
}

TEST(ServeHardeningTest, InflightBodiesHaveOneBudgetAndMemoryReturns) {
  ServeProcess server({"--max-inflight-body-bytes", std::to_string(64 << 20)});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  const long before_kib = server_rss_kib(port);
  // Bodies of 8 MiB sent one byte short and held: 8 fit the 64 MiB budget, the rest are refused at once.
  const size_t body_bytes = 8 << 20;
  const std::string body(body_bytes - 1, ' ');
  std::vector<int> held;
  int over_budget = 0;
  for (int i = 0; i < 12; ++i) {
    const int fd = connect_local(port);
    ASSERT_GE(fd, 0);
    send_all(fd, post_head("/detokenize", body_bytes));
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 300) > 0) {  // answered before sending any body: over the budget
      const std::string got = read_until_close(fd, 3000);
      expect_openai_error(got, 503, "service_unavailable");
      EXPECT_NE(got.find("Retry-After"), std::string::npos);
      ++over_budget;
      ::close(fd);
      continue;
    }
    send_all(fd, body);
    held.push_back(fd);
  }
  EXPECT_EQ(held.size(), 8u);
  EXPECT_EQ(over_budget, 4);
  const long held_kib = server_rss_kib(port);
  std::fprintf(stderr, "server RSS %ld KiB, %ld KiB with the held bodies\n", before_kib, held_kib);
  EXPECT_LT(held_kib - before_kib, 64 * 1024 + 48 * 1024) << "RSS " << before_kib << " -> " << held_kib << " KiB";
  // The holders hang up: their shares return, and a body of the same size is read and answered.
  for (int fd : held) ::close(fd);
  const std::string full = std::string(R"({"tokens": [1, 2]})") + std::string(body_bytes - 18, ' ');
  HttpResult ok;
  for (const auto started = Clock::now(); ok.status != 200 && seconds_since(started) < 5.0;) {
    ok = http_post(port, "/detokenize", full);
    if (ok.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(ok.status, 200) << ok.body;
  // Memory returns near where it started.
  long after_kib = 0;
  for (int i = 0; i < 20; ++i) {
    after_kib = server_rss_kib(port);
    if (after_kib - before_kib < 32 * 1024) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "server RSS %ld KiB after the bodies were freed\n", after_kib);
  EXPECT_LT(after_kib - before_kib, 32 * 1024) << "RSS " << before_kib << " -> " << after_kib << " KiB";
}

TEST(ServeHardeningTest, OneAddressCannotTakeEverySlot) {
  ServeProcess server({"--max-connections", "64", "--max-connections-per-client", "24"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  // 40 connections from 127.0.0.2 that never finish a head: 24 get slots, 16 are turned away.
  const std::vector<int> flood = open_half_sent("127.0.0.2", port, 40, "POST /v1/completions HTTP/1.1\r\nHost: a\r\n");
  ASSERT_EQ(flood.size(), 40u);
  // Others are served meanwhile.
  EXPECT_EQ(http_get(port, "/health").status, 200);
  const HttpResult r = http_post_json(port, "/v1/completions", completion());
  EXPECT_EQ(r.status, 200) << r.body;
  // The turned-away ones get a 503 once their head is overdue (a second); the others still wait.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  int turned_away = 0;
  for (int fd : flood) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) > 0) {
      const std::string got = read_until_close(fd, 1000);
      if (status_of(got) == 503) {
        ++turned_away;
        EXPECT_NE(got.find("--max-connections-per-client"), std::string::npos) << got;
      }
    }
  }
  EXPECT_EQ(turned_away, 16);
  for (int fd : flood) ::close(fd);
}

TEST(ServeHardeningTest, HealthAnswersWhileAFloodHoldsEverySlot) {
  ServeProcess server({"--max-connections", "32", "--max-connections-per-client", "0"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  // 40 connections from 127.0.0.3 with unfinished heads: every slot taken, 8 more waiting outside.
  const std::vector<int> flood = open_half_sent("127.0.0.3", port, 40, "GET /health HTTP/1.1\r\n");
  ASSERT_EQ(flood.size(), 40u);
  // Work that needs a slot is refused with an OpenAI-shaped 503 while none is free...
  const HttpResult busy = http_post_json(port, "/v1/completions", completion());
  EXPECT_EQ(busy.status, 503) << busy.body;
  EXPECT_EQ(busy.json()["error"]["code"], "service_unavailable");
  // ...but /health answers...
  const auto started = Clock::now();
  EXPECT_EQ(http_get(port, "/health").status, 200);
  EXPECT_LT(seconds_since(started), 2.0);
  // ...and work is served again once the half-sent heads were cut short (slots ran low: ~1 s).
  EXPECT_TRUE(completes_within(port, 5.0));
  int cut = 0;
  for (int fd : flood) {
    const std::string got = read_until_close(fd, 500);
    cut += status_of(got) == 408 || status_of(got) == 503;
    ::close(fd);
  }
  EXPECT_EQ(cut, 40);
}

// A soak: for a few seconds a client keeps up to 200 half-sent connections open, replacing each
// as the server cuts it; /health is asked every 50 ms meanwhile and must always answer 200.
TEST(ServeHardeningTest, SoakUnderAFloodKeepsHealthAt200) {
  ServeProcess server({"--max-connections", "64"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  std::atomic<bool> flooding{true};
  std::atomic<int> opened{0};
  std::thread flood([&] {
    std::deque<int> open;
    while (flooding) {
      const int fd = connect_from("127.0.0.4", port);
      if (fd >= 0) {
        send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{");
        open.push_back(fd);
        ++opened;
      }
      while (open.size() > 200) {
        ::close(open.front());
        open.pop_front();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (int fd : open) ::close(fd);
  });
  int probes = 0, healthy = 0;
  double slowest_s = 0;
  const auto soak_start = Clock::now();
  while (seconds_since(soak_start) < 5.0) {
    const auto started = Clock::now();
    healthy += http_get(port, "/health").status == 200;
    slowest_s = std::max(slowest_s, seconds_since(started));
    ++probes;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  flooding = false;
  flood.join();
  EXPECT_GT(opened, 500);
  EXPECT_GT(probes, 40);
  EXPECT_EQ(healthy, probes);
  EXPECT_LT(slowest_s, 2.0);
  EXPECT_TRUE(completes_within(port, 5.0));
}

TEST(ServeHardeningTest, RequestLevelHoles) {
  ServeProcess server({"--max-waiting", "4"});
  ASSERT_TRUE(server.ready()) << server.log();
  const int port = server.port();
  auto expect_error = [](const HttpResult& r, int status, const std::string& param, const std::string& needle) {
    EXPECT_EQ(r.status, status) << r.body;
    const json error = r.json()["error"];
    EXPECT_EQ(error["param"], param) << r.body;
    EXPECT_NE(error["message"].get<std::string>().find(needle), std::string::npos) << r.body;
  };
  // More choices than --max-waiting on an idle server can never be served: 400, not 429.
  expect_error(http_post_json(port, "/v1/completions", completion({{"n", 5}})), 400, "n", "--max-waiting");
  expect_error(http_post_json(port, "/v1/completions", completion({{"prompt", {"a", "b", "c"}}, {"n", 2}})), 400, "n",
               "--max-waiting");
  EXPECT_EQ(http_post_json(port, "/v1/completions", completion({{"n", 4}})).status, 200);
  // Doubles are checked as received: a tiny top_p is valid (keeps the top token)...
  const HttpResult tiny_top_p = http_post_json(port, "/v1/completions", completion({{"top_p", 1e-300}}));
  EXPECT_EQ(tiny_top_p.status, 200) << tiny_top_p.body;
  EXPECT_EQ(tiny_top_p.json()["usage"]["completion_tokens"], 3);
  // ...and a repetition_penalty that would overflow float logits is refused, naming the field.
  expect_error(http_post_json(port, "/v1/completions", completion({{"repetition_penalty", 1e-40}})), 400,
               "repetition_penalty", "1e-40");
  expect_error(http_post_json(port, "/v1/completions", completion({{"top_p", -1e-300}})), 400, "top_p", "top_p");
  const HttpResult smallest = http_post_json(port, "/v1/completions", completion({{"repetition_penalty", 1e-6}}));
  EXPECT_EQ(smallest.status, 200) << smallest.body;
  // HEAD gets no body; every 405 says what is allowed.
  bool closed = false;
  const std::string head = exchange_until_close(port, "HEAD /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                                                5000, &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(status_of(head), 405) << head;
  EXPECT_NE(head.find("Allow: GET"), std::string::npos) << head;
  EXPECT_EQ(head.size(), head.find("\r\n\r\n") + 4) << "a HEAD response carries a body:\n" << head;
  const HttpResult post_on_get = http_post(port, "/v1/models", "{}");
  EXPECT_EQ(post_on_get.status, 405);
  EXPECT_EQ(post_on_get.header("allow"), "GET");
  const HttpResult get_on_post = http_get(port, "/v1/completions");
  EXPECT_EQ(get_on_post.status, 405);
  EXPECT_EQ(get_on_post.header("allow"), "POST");
  // A prompt whose bytes cannot fit max_model_len tokens is refused without tokenizing it.
  std::string huge;
  while (huge.size() < (12u << 20)) huge += "hello world ";
  auto started = Clock::now();
  json body = completion({{"prompt", huge}});
  body.erase("max_tokens");
  expect_error(http_post_json(port, "/v1/completions", body), 400, "prompt", "bytes");
  EXPECT_LT(seconds_since(started), 3.0);
  const json chat = {{"model", kModelName}, {"messages", {{{"role", "user"}, {"content", huge}}}}};
  expect_error(http_post_json(port, "/v1/chat/completions", chat), 400, "messages", "bytes");
  // Below that bound prompts are tokenized and judged by their token count.
  std::string long_words;
  while (long_words.size() < 20000) long_words += " hello";
  body["prompt"] = long_words;
  const HttpResult counted = http_post_json(port, "/v1/completions", body);
  expect_error(counted, 400, "prompt", "tokens");
  EXPECT_EQ(counted.body.find("bytes"), std::string::npos) << counted.body;
}

}  // namespace
}  // namespace pagellm::e2e
