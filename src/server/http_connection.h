// HttpConnection: one accepted TCP connection, read and written by the one thread that serves it.
// It reads requests under limits that keep misbehaving clients cheap, and is the ResponseWriter its
// handlers answer through (a plain response, or a chunked stream for server-sent events).
//
//   idle (keep-alive) ── first byte ──▶ head (≤ head_timeout_ms in total: slow-loris) ──▶ body
//        │ idle_timeout_ms / stop                 │ > max_head_bytes: 431        │ > max_body_bytes: 413
//        ▼                                        ▼ malformed: 400               ▼
//      close                                 error response + lingering close   handler
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "server/http_message.h"

namespace pagellm::server {

struct HttpLimits {
  size_t max_head_bytes = 64 * 1024;
  size_t max_body_bytes = 16 * 1024 * 1024;
  int idle_timeout_ms = 5000;   // waiting for the next request on a kept-alive connection
  int head_timeout_ms = 10000;  // first byte to end of head, in total (a slow-loris client is cut off)
  int body_timeout_ms = 60000;  // end of head to end of body, in total
  int send_timeout_ms = 30000;  // one blocked send at most (a client that stopped reading)
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

class HttpConnection : public ResponseWriter {
 public:
  HttpConnection(int fd, const HttpLimits& limits, const std::atomic<bool>& stopping, ErrorResponseFn error_response);
  ~HttpConnection() override;  // closes the socket

  enum class ReadOutcome { kRequest, kClosed };
  // Reads the next request. Bad requests are answered here (then kClosed).
  ReadOutcome read_request(HttpRequest& request);
  // Before and after the handler of one request; finish_exchange() says whether to read another.
  void begin_exchange(bool keep_alive);
  bool finish_exchange();

  bool respond(const HttpResponse& response) override;
  bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra_headers) override;
  bool write_chunk(std::string_view data) override;
  bool end_stream() override;
  bool client_gone() override;

 private:
  enum class Wait { kReady, kTimeout, kStopping };
  Wait wait_readable(int timeout_ms);
  bool receive_some();  // appends to buffer_; false on EOF or error
  bool read_until(size_t size_or_npos, int timeout_ms, bool& timed_out);
  bool send_all(std::string_view data);
  void reject(int status, const std::string& message);
  void lingering_close();

  int fd_;
  HttpLimits limits_;
  const std::atomic<bool>& stopping_;
  ErrorResponseFn error_response_;
  std::string buffer_;        // bytes read and not yet consumed (may hold a pipelined request)
  bool keep_alive_ = false;   // of the current exchange
  bool responded_ = false;    // respond() or start_stream() happened
  bool stream_open_ = false;  // a chunked body without its last chunk
  bool broken_ = false;       // a write failed or the peer hung up
};

}  // namespace pagellm::server
