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
#include <algorithm>
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

// The peer's address as raw bytes (an IPv4-mapped IPv6 address as its IPv4 bytes): the key of the
// per-client connection cap.
std::string client_address(const sockaddr_storage& peer) {
  if (peer.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(peer).sin_addr;
    return std::string(reinterpret_cast<const char*>(&in), sizeof(in));
  }
  if (peer.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&in6)) return std::string(reinterpret_cast<const char*>(&in6) + 12, 4);
    return std::string(reinterpret_cast<const char*>(&in6), sizeof(in6));
  }
  return {};
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, HttpService service, ErrorResponseFn error_response)
    : options_(std::move(options)),
      service_(std::move(service)),
      error_response_(std::move(error_response)),
      load_(options_.max_inflight_body_bytes) {}

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

void HttpServer::start() {
  overflow_ = std::make_unique<HttpOverflow>(service_.quick_paths,
                                             [this](int fd, const HttpRequest& request) { serve_quick(fd, request); });
  overflow_->start();
  accept_thread_ = std::thread([this] { accept_loop(); });
}

void HttpServer::stop() {
  load_.stopping = true;
  if (accept_thread_.joinable()) accept_thread_.join();
  overflow_.reset();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

bool HttpServer::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_for(lock, timeout, [this] { return connections_.empty(); });
}

void HttpServer::shutdown_connections() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [fd, client] : connections_) ::shutdown(fd, SHUT_RDWR);
}

int HttpServer::num_connections() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(connections_.size());
}

std::string HttpServer::busy_response(const std::string& message) const {
  HttpResponse busy = error_response_(503, message);
  busy.extra_headers.emplace_back("Retry-After", "1");
  return response_head(503, busy.content_type, busy.body.size(), false, busy.extra_headers) + busy.body;
}

void HttpServer::accept_loop() {
  while (!load_.stopping.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) continue;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(10000);  // out of descriptors: let others close
      continue;
    }
    set_socket_timeouts(fd, options_.limits.send_timeout_ms);
    std::string why_not;
    if (take_slot(fd, client_address(peer), why_not)) spawn_connection(fd);
    else overflow_->admit(fd, busy_response(why_not));
  }
}

bool HttpServer::take_slot(int fd, const std::string& client, std::string& why_not) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int num_open = static_cast<int>(connections_.size());
  if (num_open >= options_.max_connections) {
    why_not = fmt::format("[http] too many open connections ({}, --max-connections); retry later", num_open);
    return false;
  }
  int& from_client = connections_per_client_[client];
  if (options_.max_connections_per_client > 0 && from_client >= options_.max_connections_per_client) {
    why_not = fmt::format("[http] too many open connections from your address ({}, --max-connections-per-client); "
                          "retry later", from_client);
    return false;
  }
  ++from_client;
  connections_.emplace(fd, client);
  const int num_free_when_low = std::max(1, options_.max_connections / 8);
  load_.slots_low = options_.max_connections - (num_open + 1) < num_free_when_low;
  return true;
}

// Unregisters before the descriptor is closed, so shutdown_connections() never touches a number
// the kernel may already have given to a new connection.
void HttpServer::free_slot(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = connections_.find(fd);
  if (it != connections_.end()) {
    auto count = connections_per_client_.find(it->second);
    if (count != connections_per_client_.end() && --count->second <= 0) connections_per_client_.erase(count);
    connections_.erase(it);
  }
  const int num_free_when_low = std::max(1, options_.max_connections / 8);
  load_.slots_low = options_.max_connections - static_cast<int>(connections_.size()) < num_free_when_low;
  idle_.notify_all();
}

void HttpServer::spawn_connection(int fd) {
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
    free_slot(fd);
    ::close(fd);
  }
}

void HttpServer::serve_connection(int fd) {
  auto connection = std::make_unique<HttpConnection>(fd, options_.limits, load_, error_response_);
  for (bool again = true; again;) {
    {
      HttpRequest request;
      if (connection->read_request(request, service_.screen_head) != HttpConnection::ReadOutcome::kRequest) break;
      connection->begin_exchange(request);
      try {
        service_.handle(request, *connection);
      } catch (const std::exception& e) {
        LOG_ERROR("[http] handler of {} {} threw: {}", request.method, request.path, e.what());
        connection->respond(error_response_(500, fmt::format("[http] internal error: {}", e.what())));
      }
      again = connection->finish_exchange();
    }  // the request and its body are freed here
    connection->release_body();
  }
  connection->release_body();
  // After free_slot the thread no longer touches the server, which may then be destroyed.
  free_slot(fd);
  connection.reset();  // closes the socket
}

void HttpServer::serve_quick(int fd, const HttpRequest& request) {
  HttpConnection connection(fd, options_.limits, load_, error_response_);
  connection.begin_exchange(request, /*may_keep_alive=*/false);
  try {
    service_.handle(request, connection);
  } catch (const std::exception& e) {
    connection.respond(error_response_(500, fmt::format("[http] internal error: {}", e.what())));
  }
  connection.finish_exchange();
}

}  // namespace pagellm::server
