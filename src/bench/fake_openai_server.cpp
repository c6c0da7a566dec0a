#include "bench/fake_openai_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "bench/bench_tokenizer.h"
#include "core/check.h"

namespace pagellm::bench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadBytes = 64 * 1024;
constexpr int kMaxEvents = 256;

std::string sse_event(const std::string& data) { return "data: " + data + "\n\n"; }

std::string token_chunk_json(bool is_chat) {
  if (is_chat) {
    return R"({"id":"chatcmpl-fake","object":"chat.completion.chunk","created":0,"model":"fake",)"
           R"("choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]})";
  }
  return R"({"id":"cmpl-fake","object":"text_completion","created":0,"model":"fake",)"
         R"("choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]})";
}

std::string usage_chunk_json(bool is_chat, int prompt_tokens, int completion_tokens) {
  return fmt::format(
      R"({{"id":"fake","object":"{}","created":0,"model":"fake","choices":[],)"
      R"("usage":{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}}}}})",
      is_chat ? "chat.completion.chunk" : "text_completion", prompt_tokens, completion_tokens,
      prompt_tokens + completion_tokens);
}

// What the fake needs from a request: where it went and how many tokens to send back.
struct ParsedRequest {
  std::string method, path;
  size_t total_bytes = 0;  // head + body
  int max_tokens = 16;
  int prompt_tokens = 0;
  std::string body;
};

// Parses one complete request at the start of `in`; nullopt while bytes are missing.
std::optional<ParsedRequest> parse_request(const std::string& in) {
  size_t head_end = in.find("\r\n\r\n");
  if (head_end == std::string::npos) return std::nullopt;
  ParsedRequest req;
  size_t line_end = in.find("\r\n");
  std::string request_line = in.substr(0, line_end);
  size_t sp1 = request_line.find(' '), sp2 = request_line.rfind(' ');
  req.method = request_line.substr(0, sp1);
  req.path = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t content_length = 0;
  std::string head = in.substr(0, head_end);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  if (size_t pos = head.find("content-length:"); pos != std::string::npos) {
    content_length = std::strtoul(head.c_str() + pos + 15, nullptr, 10);
  }
  req.total_bytes = head_end + 4 + content_length;
  if (in.size() < req.total_bytes) return std::nullopt;
  req.body = in.substr(head_end + 4, content_length);
  auto body = nlohmann::json::parse(req.body, nullptr, false);
  if (body.is_object()) {
    if (body.contains("max_tokens") && body["max_tokens"].is_number_integer()) {
      req.max_tokens = body["max_tokens"].get<int>();
    }
    if (body.contains("prompt") && body["prompt"].is_array()) {
      req.prompt_tokens = static_cast<int>(body["prompt"].size());
    } else if (body.contains("prompt") && body["prompt"].is_string()) {
      req.prompt_tokens = count_words(body["prompt"].get<std::string>());
    } else if (body.contains("messages") && body["messages"].is_array()) {
      for (const auto& m : body["messages"]) {
        if (m.contains("content") && m["content"].is_string()) {
          req.prompt_tokens += count_words(m["content"].get<std::string>());
        }
      }
    }
  }
  return req;
}

}  // namespace

class FakeOpenAiServer::Loop {
 public:
  Loop(const FakeServerScript& script, int listen_fd, FakeOpenAiServer* owner)
      : script_(script), listen_fd_(listen_fd), owner_(owner) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHECK(epoll_fd_ >= 0 && stop_fd_ >= 0);
    add(listen_fd_, EPOLLIN);
    add(stop_fd_, EPOLLIN);
    for (bool is_chat : {false, true}) token_frame_[is_chat] = frame(sse_event(token_chunk_json(is_chat)));
  }
  ~Loop() {
    for (auto& [fd, conn] : conns_) ::close(fd);
    ::close(listen_fd_);
    ::close(stop_fd_);
    ::close(epoll_fd_);
  }

  void request_stop() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof(one));
  }

  void run() {
    epoll_event events[kMaxEvents];
    while (running_) {
      int n = epoll_wait(epoll_fd_, events, kMaxEvents, next_timeout_ms());
      for (int i = 0; i < n; ++i) handle(events[i].data.fd, events[i].events);
      fire_due_timers();
    }
  }

 private:
  struct Conn {
    int fd = -1;
    uint64_t id = 0;
    std::string in, out;
    size_t out_offset = 0;
    bool is_streaming = false;
    bool close_after_flush = false;
    bool is_chat = false;
    bool watching_out = false;
    int num_tokens = 0, tokens_sent = 0, prompt_tokens = 0;
    Clock::time_point first_due{};
  };
  struct Timer {
    Clock::time_point due;
    int fd;
    uint64_t conn_id;
    bool operator>(const Timer& other) const { return due > other.due; }
  };

  std::string frame(const std::string& payload) const {
    if (!script_.chunked) return payload;
    return fmt::format("{:x}\r\n{}\r\n", payload.size(), payload);
  }
  void add(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0);
  }
  void set_watch_out(Conn& conn, bool on) {
    if (conn.watching_out == on) return;
    epoll_event ev{};
    ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
    ev.data.fd = conn.fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.fd, &ev);
    conn.watching_out = on;
  }
  int next_timeout_ms() const {
    if (timers_.empty()) return -1;
    auto wait = timers_.top().due - Clock::now();
    if (wait <= Clock::duration::zero()) return 0;
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
  }

  void handle(int fd, uint32_t events) {
    if (fd == stop_fd_) {
      running_ = false;
    } else if (fd == listen_fd_) {
      accept_all();
    } else if (auto it = conns_.find(fd); it != conns_.end()) {
      Conn& conn = *it->second;
      if (events & EPOLLOUT) flush(conn);
      if (conns_.count(fd) && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) read_from(conn);
    }
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto conn = std::make_unique<Conn>();
      conn->fd = fd;
      conn->id = ++next_conn_id_;
      conns_[fd] = std::move(conn);
      add(fd, EPOLLIN);
    }
  }

  void read_from(Conn& conn) {
    char buf[kReadBytes];
    for (;;) {
      ssize_t n = ::recv(conn.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        conn.in.append(buf, n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(conn);  // EOF or error
      return;
    }
    if (conn.is_streaming) return;  // the client does not pipeline; ignore until done
    if (auto req = parse_request(conn.in)) {
      conn.in.erase(0, req->total_bytes);
      start_response(conn, *req);
    }
  }

  void start_response(Conn& conn, const ParsedRequest& req) {
    if (script_.keep_request_bodies) {
      std::lock_guard<std::mutex> lock(owner_->bodies_mutex_);
      owner_->request_bodies_.push_back(req.body);
    }
    int64_t number = ++owner_->num_requests_;
    bool is_completion = req.path.find("/v1/completions") != std::string::npos ||
                         req.path.find("/v1/chat/completions") != std::string::npos;
    if (req.method != "POST" || !is_completion) {
      send_error(conn, 404, "no such route: " + req.path);
      return;
    }
    if (script_.error_status != 0 && (number - 1) % std::max(1, script_.error_every_nth) == 0) {
      send_error(conn, script_.error_status, "scripted failure");
      return;
    }
    conn.is_chat = req.path.find("chat") != std::string::npos;
    conn.num_tokens = script_.num_tokens > 0 ? script_.num_tokens : std::max(1, req.max_tokens);
    conn.tokens_sent = 0;
    conn.prompt_tokens = req.prompt_tokens;
    conn.is_streaming = true;
    conn.first_due = Clock::now() + std::chrono::milliseconds(script_.first_chunk_delay_ms);
    ++in_flight_;
    if (in_flight_ > owner_->peak_in_flight_.load()) owner_->peak_in_flight_.store(in_flight_);
    conn.out += std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n") +
                (script_.chunked ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n") + "\r\n";
    timers_.push({conn.first_due, conn.fd, conn.id});
    flush(conn);  // last: it may close (and free) conn
  }

  void send_error(Conn& conn, int status, const std::string& message) {
    std::string body = nlohmann::json{{"error", {{"message", message}, {"type", "server_error"},
                                                 {"param", nullptr}, {"code", status}}}}.dump();
    conn.out += fmt::format("HTTP/1.1 {} Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                            status, body.size(), body);
    flush(conn);
  }

  Clock::time_point token_due(const Conn& conn, int k) const {
    return conn.first_due + std::chrono::milliseconds(static_cast<int64_t>(k) * script_.token_interval_ms);
  }

  void fire_due_timers() {
    Clock::time_point now = Clock::now();
    while (!timers_.empty() && timers_.top().due <= now) {
      Timer timer = timers_.top();
      timers_.pop();
      auto it = conns_.find(timer.fd);
      if (it == conns_.end() || it->second->id != timer.conn_id) continue;  // closed meanwhile
      emit_due_tokens(*it->second, now);
    }
  }

  void emit_due_tokens(Conn& conn, Clock::time_point now) {
    int64_t events = 0;
    while (conn.tokens_sent < conn.num_tokens && token_due(conn, conn.tokens_sent) <= now) {
      if (conn.tokens_sent == 0 && script_.malformed_first_event) {
        conn.out += frame("data: {this is not json\n\n");
      } else {
        conn.out += token_frame_[conn.is_chat];
      }
      ++conn.tokens_sent;
      ++events;
      if (script_.cut_stream_after_first_token) {
        owner_->num_events_sent_ += events;
        conn.close_after_flush = true;
        finish_stream(conn);
        flush(conn);
        return;
      }
    }
    if (conn.tokens_sent == conn.num_tokens) {
      if (script_.send_usage) {
        conn.out += frame(sse_event(usage_chunk_json(conn.is_chat, conn.prompt_tokens, conn.num_tokens)));
        ++events;
      }
      conn.out += frame(sse_event("[DONE]"));
      ++events;
      if (script_.chunked) conn.out += "0\r\n\r\n";
      if (!script_.chunked) conn.close_after_flush = true;
      finish_stream(conn);
    } else {
      timers_.push({token_due(conn, conn.tokens_sent), conn.fd, conn.id});
    }
    owner_->num_events_sent_ += events;
    flush(conn);
  }

  void finish_stream(Conn& conn) {
    conn.is_streaming = false;
    --in_flight_;
  }

  void flush(Conn& conn) {
    while (conn.out_offset < conn.out.size()) {
      ssize_t n = ::send(conn.fd, conn.out.data() + conn.out_offset, conn.out.size() - conn.out_offset,
                         MSG_NOSIGNAL);
      if (n > 0) {
        conn.out_offset += n;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_watch_out(conn, true);
        return;
      } else {
        close_conn(conn);
        return;
      }
    }
    conn.out.clear();
    conn.out_offset = 0;
    set_watch_out(conn, false);
    if (conn.close_after_flush) {
      close_conn(conn);
      return;
    }
    // A kept-alive connection may already hold the next request.
    if (!conn.is_streaming && !conn.in.empty()) {
      if (auto req = parse_request(conn.in)) {
        conn.in.erase(0, req->total_bytes);
        start_response(conn, *req);
      }
    }
  }

  void close_conn(Conn& conn) {
    if (conn.is_streaming) finish_stream(conn);
    int fd = conn.fd;
    ::close(fd);
    conns_.erase(fd);  // destroys conn
  }

  FakeServerScript script_;
  int listen_fd_;
  FakeOpenAiServer* owner_;
  int epoll_fd_ = -1, stop_fd_ = -1;
  bool running_ = true;
  int in_flight_ = 0;
  uint64_t next_conn_id_ = 0;
  std::string token_frame_[2];  // [is_chat]: one framed token event, rendered once
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
};

Expected<std::unique_ptr<FakeOpenAiServer>> FakeOpenAiServer::start(const FakeServerScript& script,
                                                                    uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return internal_error("[bench] fake server socket: {}", std::strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 4096) != 0) {
    int err = errno;
    ::close(fd);
    return Status(StatusCode::kUnavailable,
                  fmt::format("[bench] fake server cannot listen on 127.0.0.1:{}: {}", port, std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<FakeOpenAiServer> server(new FakeOpenAiServer());
  server->port_ = ntohs(addr.sin_port);
  server->loop_ = std::make_unique<Loop>(script, fd, server.get());
  server->thread_ = std::thread([loop = server->loop_.get()] { loop->run(); });
  return server;
}

std::vector<std::string> FakeOpenAiServer::request_bodies() const {
  std::lock_guard<std::mutex> lock(bodies_mutex_);
  return request_bodies_;
}

FakeOpenAiServer::~FakeOpenAiServer() {
  if (loop_) loop_->request_stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pagellm::bench
