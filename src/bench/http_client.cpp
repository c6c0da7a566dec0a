#include "bench/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "bench/http_response_parser.h"
#include "bench/sse_parser.h"
#include "core/check.h"

namespace pagellm::bench {

namespace {

constexpr size_t kReadBufferBytes = 256 * 1024;
constexpr size_t kMaxErrorBodyBytes = 512;
constexpr int kMaxEventsPerWait = 512;

Status errno_status(const std::string& what, int err) {
  return Status(StatusCode::kUnavailable, fmt::format("[bench] {}: {}", what, std::strerror(err)));
}

}  // namespace

void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// One TCP connection and the request it carries, if any. It is the sink of its own response
// parser and SSE parser so decoded events go straight to the request's handler.
struct HttpClient::Connection : HttpResponseParser::BodySink, SseParser::EventSink {
  enum class Phase { kConnecting, kSending, kReceiving, kIdle };

  int fd = -1;
  size_t index = 0;            // position in HttpClient::connections_
  uint32_t watched_events = 0; // 0: not registered with epoll yet
  Phase phase = Phase::kConnecting;
  bool is_reused = false;           // carried an earlier request
  bool got_response_bytes = false;  // for the current request
  std::string request;              // bytes to send; kept for a retry
  size_t sent_bytes = 0;
  HttpResponseParser parser;
  SseParser sse;
  std::string error_body;  // start of a non-streamed body, for the error message
  StreamHandler* handler = nullptr;
  Clock::time_point read_time;  // when the bytes being parsed were read

  bool is_event_stream() const {
    return parser.status_code() / 100 == 2 &&
           parser.content_type().find("text/event-stream") != std::string::npos;
  }
  void on_body(std::string_view bytes) override {
    if (is_event_stream()) {
      sse.feed(bytes, *this);
    } else if (error_body.size() < kMaxErrorBodyBytes) {
      error_body.append(bytes.substr(0, kMaxErrorBodyBytes - error_body.size()));
    }
  }
  void on_event(std::string_view data) override { handler->on_sse_event(data, read_time); }
  void reset_for_request() {
    got_response_bytes = false;
    sent_bytes = 0;
    parser = HttpResponseParser();
    sse = SseParser();
    error_body.clear();
  }
};

HttpClient::HttpClient(BaseUrl base_url, std::string extra_headers)
    : base_url_(std::move(base_url)), extra_headers_(std::move(extra_headers)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  CHECK_MSG(epoll_fd_ >= 0, "epoll_create1: {}", std::strerror(errno));
  read_buffer_.resize(kReadBufferBytes);
}

HttpClient::~HttpClient() {
  for (auto& conn : connections_) ::close(conn->fd);
  ::close(epoll_fd_);
}

void HttpClient::start_post(const std::string& path, const std::string& json_body,
                            StreamHandler* handler) {
  std::string request = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: pagellm-bench\r\n"
      "Content-Type: application/json\r\nAccept: text/event-stream\r\n{}Content-Length: {}\r\n\r\n",
      path, base_url_.host_header(), extra_headers_, json_body.size());
  request += json_body;

  Connection* conn = nullptr;
  if (!idle_.empty()) {
    conn = idle_.back();
    idle_.pop_back();
    conn->is_reused = true;
    conn->phase = Connection::Phase::kSending;
  } else {
    conn = open_connection();
  }
  ++num_in_flight_;
  conn->handler = handler;
  conn->request = std::move(request);
  conn->reset_for_request();
  if (conn->fd < 0) {  // socket() or connect() failed at once
    finish(*conn, errno_status("connect to " + base_url_.host_header(), -conn->fd), false);
    return;
  }
  if (conn->phase == Connection::Phase::kConnecting) {
    watch(*conn, EPOLLOUT);
  } else {
    send_request(*conn);
  }
}

HttpClient::Connection* HttpClient::open_connection() {
  auto owned = std::make_unique<Connection>();
  Connection* conn = owned.get();
  conn->index = connections_.size();
  connections_.push_back(std::move(owned));

  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    conn->fd = -errno;  // finish() closes nothing for a negative fd
    return conn;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(base_url_.port);
  addr.sin_addr.s_addr = base_url_.ipv4_be;
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    ::close(fd);
    conn->fd = -err;
    return conn;
  }
  conn->fd = fd;
  conn->phase = rc == 0 ? Connection::Phase::kSending : Connection::Phase::kConnecting;
  return conn;
}

void HttpClient::watch(Connection& conn, uint32_t events) {
  if (conn.watched_events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = &conn;
  int op = conn.watched_events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  CHECK_MSG(epoll_ctl(epoll_fd_, op, conn.fd, &ev) == 0, "epoll_ctl: {}", std::strerror(errno));
  conn.watched_events = events;
}

void HttpClient::send_request(Connection& conn) {
  while (conn.sent_bytes < conn.request.size()) {
    ssize_t n = ::send(conn.fd, conn.request.data() + conn.sent_bytes,
                       conn.request.size() - conn.sent_bytes, MSG_NOSIGNAL);
    if (n > 0) {
      conn.sent_bytes += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      watch(conn, EPOLLOUT);
      return;
    } else {
      fail_or_retry(conn, errno_status("send to " + base_url_.host_header(), errno));
      return;
    }
  }
  conn.phase = Connection::Phase::kReceiving;
  watch(conn, EPOLLIN | EPOLLRDHUP);
}

Status HttpClient::poll(int timeout_ms) {
  epoll_event events[kMaxEventsPerWait];
  int n = epoll_wait(epoll_fd_, events, kMaxEventsPerWait, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return Status::ok();
    return errno_status("epoll_wait", errno);
  }
  for (int i = 0; i < n; ++i) {
    handle_event(*static_cast<Connection*>(events[i].data.ptr), events[i].events);
  }
  // Connections closed while handling this batch are freed only now: a later event of the same
  // batch may still point at one of them (it is then ignored: fd == -1).
  closed_.clear();
  return Status::ok();
}

void HttpClient::handle_event(Connection& conn, uint32_t events) {
  if (conn.fd < 0) return;
  switch (conn.phase) {
    case Connection::Phase::kConnecting: {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(conn.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0 && (events & EPOLLERR)) err = ECONNREFUSED;
      if (err != 0) {
        finish(conn, errno_status("connect to " + base_url_.host_header(), err), false);
        return;
      }
      conn.phase = Connection::Phase::kSending;
      send_request(conn);
      return;
    }
    case Connection::Phase::kSending:
      send_request(conn);
      return;
    case Connection::Phase::kReceiving:
      handle_readable(conn);
      return;
    case Connection::Phase::kIdle:
      close_connection(conn);  // the server closed an idle keep-alive connection
      return;
  }
}

void HttpClient::handle_readable(Connection& conn) {
  for (;;) {
    ssize_t n = ::recv(conn.fd, read_buffer_.data(), read_buffer_.size(), 0);
    if (n > 0) {
      conn.read_time = Clock::now();
      conn.got_response_bytes = true;
      Status st = conn.parser.feed(std::string_view(read_buffer_.data(), n), conn);
      if (!st.is_ok()) {
        finish(conn, st, false);
        return;
      }
      if (conn.parser.is_complete()) break;
      if (static_cast<size_t>(n) < read_buffer_.size()) return;  // drained; wait for more
      continue;
    }
    if (n == 0) {
      Status st = conn.parser.on_eof();
      if (!st.is_ok()) {
        fail_or_retry(conn, st);
        return;
      }
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    fail_or_retry(conn, errno_status("recv from " + base_url_.host_header(), errno));
    return;
  }
  // The response is complete.
  const HttpResponseParser& parser = conn.parser;
  Status status;
  if (parser.status_code() / 100 != 2) {
    status = Status(StatusCode::kUnavailable,
                    fmt::format("[bench] HTTP {}: {}", parser.status_code(), conn.error_body));
  } else if (!conn.is_event_stream()) {
    status = Status(StatusCode::kUnavailable,
                    fmt::format("[bench] expected a text/event-stream response, got '{}': {}",
                                parser.content_type(), conn.error_body));
  } else if (conn.sse.has_partial_event()) {
    status = Status(StatusCode::kUnavailable, "[bench] the stream ended inside an SSE event");
  }
  finish(conn, status, parser.keep_alive());
}

void HttpClient::fail_or_retry(Connection& conn, const Status& status) {
  // A kept-alive connection may have been closed by the server just as we reused it; that is not
  // the request's fault, so it gets one fresh connection.
  if (!conn.is_reused || conn.got_response_bytes) {
    finish(conn, status, false);
    return;
  }
  StreamHandler* handler = conn.handler;
  std::string request = std::move(conn.request);
  conn.handler = nullptr;
  close_connection(conn);
  Connection* fresh = open_connection();
  fresh->handler = handler;
  fresh->request = std::move(request);
  if (fresh->fd < 0) {
    finish(*fresh, errno_status("connect to " + base_url_.host_header(), -fresh->fd), false);
  } else if (fresh->phase == Connection::Phase::kConnecting) {
    watch(*fresh, EPOLLOUT);
  } else {
    send_request(*fresh);
  }
}

void HttpClient::finish(Connection& conn, const Status& status, bool reusable) {
  StreamHandler* handler = conn.handler;
  Clock::time_point now = conn.got_response_bytes ? conn.read_time : Clock::now();
  conn.handler = nullptr;
  --num_in_flight_;
  if (reusable) {
    conn.phase = Connection::Phase::kIdle;
    conn.request.clear();
    watch(conn, EPOLLIN | EPOLLRDHUP);
    idle_.push_back(&conn);
  } else {
    close_connection(conn);
  }
  if (handler != nullptr) handler->on_finished(status, now);
}

void HttpClient::close_connection(Connection& conn) {
  if (conn.fd >= 0) ::close(conn.fd);  // also removes it from the epoll set
  conn.fd = -1;
  auto idle_it = std::find(idle_.begin(), idle_.end(), &conn);
  if (idle_it != idle_.end()) idle_.erase(idle_it);
  size_t index = conn.index;
  CHECK(index < connections_.size() && connections_[index].get() == &conn);
  closed_.push_back(std::move(connections_[index]));
  if (index + 1 != connections_.size()) {
    connections_[index] = std::move(connections_.back());
    connections_[index]->index = index;
  }
  connections_.pop_back();
}

}  // namespace pagellm::bench
