// HttpServer: a small HTTP/1.1 server with one thread per connection.
//
// Why not cpp-httplib: Debian ships it as a prebuilt library with a listen backlog of 5 (bursts of
// connections see SYN drops and 1 s retries), no way for a handler to see that its client hung up
// while it waits for tokens (we must abort the request at once to free its KV blocks), per-recv
// instead of per-head timeouts (slow-loris), and 413 answers that reset the connection before the
// client reads them. A thread per connection is simple and, with small stacks, holds thousands of
// streaming connections: each one mostly sleeps on its request's output channel.
//
//   accept thread ──▶ connection thread: loop { read head ─▶ screen ─▶ read body ─▶ handler(request, writer) }
//        │ no slot (max_connections, or max_connections_per_client from its address)
//        ▼
//   HttpOverflow: quick GETs (/health) answered, the rest 503
//   stop(): no new connections; connections finish their exchange and close; wait_idle() bounds it.
//
// Floods: one address holds at most max_connections_per_client slots; once fewer than 1/8 of the
// slots are free, waits for heads, bodies and next requests are cut to busy_timeout_ms; bodies of
// all connections together hold at most max_inflight_body_bytes (503 beyond).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>
#include <string>
#include <thread>

#include "core/status.h"
#include "server/http_connection.h"
#include "server/http_overflow.h"

namespace pagellm::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see port())
  int max_connections = 8192;  // beyond it new connections get 503 (quick routes still answer)
  int max_connections_per_client = 4096;  // from one address (0: no cap); beyond it as above
  size_t max_inflight_body_bytes = 256u << 20;  // request bodies being read or handled, together
  HttpLimits limits;
};

using HttpHandler = std::function<void(const HttpRequest& request, ResponseWriter& writer)>;

// What the server serves: a screen run on each head before its body is read, the handler of
// requests that pass it, and the GET paths answered even when no slot is free.
struct HttpService {
  HeadScreenFn screen_head;  // may be empty: every head passes
  HttpHandler handle;
  std::vector<std::string> quick_paths;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpService service, ErrorResponseFn error_response);
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
  // Takes a slot for fd (false: none free for it); `why_not` says why.
  bool take_slot(int fd, const std::string& client, std::string& why_not);
  void free_slot(int fd);
  void spawn_connection(int fd);
  void serve_connection(int fd);
  void serve_quick(int fd, const HttpRequest& request);  // on the overflow thread
  std::string busy_response(const std::string& message) const;

  HttpServerOptions options_;
  HttpService service_;
  ErrorResponseFn error_response_;
  int listen_fd_ = -1;
  int port_ = 0;
  ServerLoad load_;
  std::thread accept_thread_;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::map<int, std::string> connections_;  // open connection fd -> client address (raw bytes)
  std::unordered_map<std::string, int> connections_per_client_;
  std::unique_ptr<HttpOverflow> overflow_;  // last: its thread uses the members above
};

}  // namespace pagellm::server
