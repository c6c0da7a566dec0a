// HttpConnection: one accepted TCP connection, read and written by the one thread that serves it.
// It reads requests under limits that keep misbehaving clients cheap, and is the ResponseWriter its
// handlers answer through (a plain response, or a chunked stream for server-sent events).
//
//   idle (keep-alive) ── first byte ──▶ head (≤ head_timeout_ms in total: slow-loris) ──▶ screen ──▶ body ──▶ handler
//        │ idle_timeout_ms / stop           │ > max_head_bytes: 431             │ 401/404/405:   │ > max_body_bytes: 413
//        ▼                                  ▼ malformed, smuggling: 400         ▼ body not read  │ over the server's
//      close                            error response + lingering close                         ▼ body budget: 503
//
// While the server's slots run low (ServerLoad::slots_low), every wait for a next request, a head
// or a body is cut to busy_timeout_ms from the start of that wait: a flood of idle or half-sent
// connections then frees its slots within a second.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_message.h"

namespace pagellm::server {

// The bytes that request bodies of all connections may hold together. A connection reserves its
// body's declared length before reading it and returns it when the exchange ends.
class BodyBudget {
 public:
  explicit BodyBudget(size_t limit_bytes) : limit_bytes_(limit_bytes) {}
  bool try_reserve(size_t num_bytes);
  void release(size_t num_bytes) { used_bytes_.fetch_sub(num_bytes); }
  size_t used_bytes() const { return used_bytes_.load(); }
  size_t limit_bytes() const { return limit_bytes_; }

 private:
  const size_t limit_bytes_;
  std::atomic<size_t> used_bytes_{0};
};

// What the connections of one server share.
struct ServerLoad {
  explicit ServerLoad(size_t max_inflight_body_bytes) : body_budget(max_inflight_body_bytes) {}
  std::atomic<bool> stopping{false};
  std::atomic<bool> slots_low{false};  // most connection slots are taken: waits are short
  BodyBudget body_budget;
};

struct HttpLimits {
  size_t max_head_bytes = 64 * 1024;
  size_t max_body_bytes = 16 * 1024 * 1024;
  int idle_timeout_ms = 5000;   // waiting for the next request on a kept-alive connection
  int head_timeout_ms = 10000;  // first byte to end of head, in total (a slow-loris client is cut off)
  int body_timeout_ms = 60000;  // end of head to end of body, in total
  int send_timeout_ms = 30000;  // one blocked send at most (a client that stopped reading)
  int busy_timeout_ms = 1000;   // any of the waits above while the server's slots run low
};

// How a handler answers: exactly one respond(), or start_stream() + write_chunk()* + end_stream().
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual bool respond(const HttpResponse& response) = 0;
  virtual bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra_headers) = 0;
  virtual bool write_chunk(std::string_view data) = 0;
  virtual bool end_stream() = 0;
  // True once the client hung up or a write failed; handlers then abort their work.
  virtual bool client_gone() = 0;
};

// Builds the body of an error the HTTP layer answers by itself (400, 408, 413, 431, 503).
using ErrorResponseFn = std::function<HttpResponse(int status, const std::string& message)>;
// Looks at a request head before any of its body is read: a response returned here is sent at once
// and the body is never read (401, 404, 405 cost no memory); nullopt reads the body for the handler.
using HeadScreenFn = std::function<std::optional<HttpResponse>(const HttpRequest& head)>;

class HttpConnection : public ResponseWriter {
 public:
  HttpConnection(int fd, const HttpLimits& limits, ServerLoad& load, ErrorResponseFn error_response);
  ~HttpConnection() override;  // releases the body reservation, closes the socket

  enum class ReadOutcome { kRequest, kClosed };
  // Reads the next request. Bad requests, and those `screen` answers, are answered here; after
  // them the connection reads on when that is safe (no unread body, keep-alive), else kClosed.
  ReadOutcome read_request(HttpRequest& request, const HeadScreenFn& screen);
  // Before and after the handler of one request; finish_exchange() says whether to read another.
  // A HEAD request's responses go out without their body.
  void begin_exchange(const HttpRequest& request, bool may_keep_alive = true);
  bool finish_exchange();
  // After the request (and its body) is gone: returns the body's reservation to the budget and,
  // after a large body, hands freed heap back to the system.
  void release_body();

  bool respond(const HttpResponse& response) override;
  bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra_headers) override;
  bool write_chunk(std::string_view data) override;
  bool end_stream() override;
  bool client_gone() override;

 private:
  enum class Wait { kReady, kTimeout, kStopping };
  // Waits from `since` for at most timeout_ms, or busy_timeout_ms while slots run low.
  Wait wait_readable(std::chrono::steady_clock::time_point since, int timeout_ms);
  bool receive_some();  // appends to buffer_; false on EOF or error
  bool read_head(bool& timed_out);  // until buffer_ holds a head, or more than max_head_bytes
  bool read_body(size_t num_bytes, HttpBody& body, bool& timed_out);
  // Answers a request without handling it (screened, or over the body budget).
  bool answer_early(const HttpRequest& request, const HttpResponse& response, bool body_unread);
  bool send_all(std::string_view data);
  void reject(int status, const std::string& message);
  void lingering_close();

  int fd_;
  HttpLimits limits_;
  ServerLoad& load_;
  ErrorResponseFn error_response_;
  std::string buffer_;        // bytes read and not yet consumed: a head, a pipelined request
  size_t body_reserved_bytes_ = 0;  // taken from load_.body_budget for the current request
  bool keep_alive_ = false;   // of the current exchange
  bool is_head_ = false;      // the current exchange answers a HEAD request: no body is sent
  bool responded_ = false;    // respond() or start_stream() happened
  bool stream_open_ = false;  // a chunked body without its last chunk
  bool broken_ = false;       // a write failed or the peer hung up
};

}  // namespace pagellm::server
