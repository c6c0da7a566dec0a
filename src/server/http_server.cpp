#include "server/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "core/logging.h"

namespace pagellm::server {

namespace {

constexpr int kListenBacklog = 4096;
// Handlers parse JSON, render chat templates and tokenize: well within 1 MiB; thousands of
// connections then reserve only a few GiB of address space, touched lazily.
constexpr size_t kConnectionStackBytes = 1024 * 1024;

void set_socket_timeouts(int fd, int send_timeout_ms) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // SSE events are small: no Nagle delay
  timeval tv{send_timeout_ms / 1000, (send_timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler, ErrorResponseFn error_response)
    : options_(std::move(options)), handler_(std::move(handler)), error_response_(std::move(error_response)) {}

HttpServer::~HttpServer() {
  stop();
  if (!wait_idle(std::chrono::seconds(5))) {
    shutdown_connections();
    wait_idle(std::chrono::seconds(5));
  }
}

Status HttpServer::listen() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  if (int rc = ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return invalid_argument("[http] cannot resolve --host {}: {}", options_.host, gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(found, freeaddrinfo);
  int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) return internal_error("[http] socket(): {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    return Status(StatusCode::kUnavailable, fmt::format("[http] cannot listen on {}:{}: {}", options_.host,
                                                        options_.port, reason));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  listen_fd_ = fd;
  return Status::ok();
}

void HttpServer::start() { accept_thread_ = std::thread([this] { accept_loop(); }); }

void HttpServer::stop() {
  stopping_ = true;
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

bool HttpServer::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_for(lock, timeout, [this] { return connection_fds_.empty(); });
}

void HttpServer::shutdown_connections() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : connection_fds_) ::shutdown(fd, SHUT_RDWR);
}

int HttpServer::num_connections() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(connection_fds_.size());
}

void HttpServer::accept_loop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(10000);  // out of descriptors: let others close
      continue;
    }
    set_socket_timeouts(fd, options_.limits.send_timeout_ms);
    spawn_connection(fd);
  }
}

void HttpServer::spawn_connection(int fd) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int>(connection_fds_.size()) >= options_.max_connections) {
      const HttpResponse busy = error_response_(503, "[http] too many open connections; retry later");
      const std::string out = response_head(503, busy.content_type, busy.body.size(), false, {}) + busy.body;
      (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      return;
    }
    connection_fds_.insert(fd);
  }
  struct Start {
    HttpServer* server;
    int fd;
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kConnectionStackBytes);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  auto* start = new Start{this, fd};
  const int rc = ::pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        std::unique_ptr<Start> s(static_cast<Start*>(arg));
        s->server->serve_connection(s->fd);
        return nullptr;
      },
      start);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete start;
    LOG_WARN("[http] cannot start a connection thread: {}", std::strerror(rc));
    std::lock_guard<std::mutex> lock(mutex_);
    connection_fds_.erase(fd);
    ::close(fd);
    idle_.notify_all();
  }
}

void HttpServer::serve_connection(int fd) {
  auto connection = std::make_unique<HttpConnection>(fd, options_.limits, stopping_, error_response_);
  for (;;) {
    HttpRequest request;
    if (connection->read_request(request) != HttpConnection::ReadOutcome::kRequest) break;
    connection->begin_exchange(request.wants_keep_alive() && !stopping_.load());
    try {
      handler_(request, *connection);
    } catch (const std::exception& e) {
      LOG_ERROR("[http] handler of {} {} threw: {}", request.method, request.path, e.what());
      connection->respond(error_response_(500, fmt::format("[http] internal error: {}", e.what())));
    }
    if (!connection->finish_exchange()) break;
  }
  // Unregister before the descriptor is closed, so shutdown_connections() never touches a number
  // the kernel may already have given to a new connection. After this block the thread no longer
  // touches the server, which may then be destroyed.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    connection_fds_.erase(fd);
    idle_.notify_all();
  }
  connection.reset();  // closes the socket
}

}  // namespace pagellm::server
