// HttpServer: a small HTTP/1.1 server with one thread per connection.
//
// Why not cpp-httplib: Debian ships it as a prebuilt library with a listen backlog of 5 (bursts of
// connections see SYN drops and 1 s retries), no way for a handler to see that its client hung up
// while it waits for tokens (we must abort the request at once to free its KV blocks), per-recv
// instead of per-head timeouts (slow-loris), and 413 answers that reset the connection before the
// client reads them. A thread per connection is simple and, with small stacks, holds thousands of
// streaming connections: each one mostly sleeps on its request's output channel.
//
//   accept thread ──▶ connection thread: loop { read request ─▶ handler(request, writer) }
//   stop(): no new connections; connections finish their exchange and close; wait_idle() bounds it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/status.h"
#include "server/http_connection.h"

namespace pagellm::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see port())
  int max_connections = 8192;  // beyond it new connections get 503 and are closed
  HttpLimits limits;
};

using HttpHandler = std::function<void(const HttpRequest& request, ResponseWriter& writer)>;

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler, ErrorResponseFn error_response);
  ~HttpServer();  // stop() + wait for connection threads

  Status listen();  // binds and listens; the port is known afterwards
  int port() const { return port_; }
  void start();     // accept thread
  void stop();      // stop accepting; connections close after their current exchange
  // Waits until every connection thread ended; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout);
  // Shuts the sockets of remaining connections down, so their blocked reads and writes return.
  void shutdown_connections();
  int num_connections() const;

 private:
  void accept_loop();
  void spawn_connection(int fd);
  void serve_connection(int fd);

  HttpServerOptions options_;
  HttpHandler handler_;
  ErrorResponseFn error_response_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::set<int> connection_fds_;  // open connections (for shutdown_connections)
};

}  // namespace pagellm::server
