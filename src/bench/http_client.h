// A small non-blocking HTTP/1.1 client for many concurrent streamed POSTs, driven by one thread.
//
// One epoll loop owns every connection; nothing blocks and there is no thread per stream, so the
// client's own cost stays far below what it measures (≥ 1,024 streams, ≥ 50k events/s on a core).
// Connections are kept alive and reused for the next request; a request that finds its reused
// connection closed by the server before any response byte is retried once on a fresh one.
//
//   start_post() ─▶ connect ─▶ send ─▶ read ─▶ HttpResponseParser ─▶ SseParser ─▶ on_sse_event()
//                                                                └▶ on_finished() (ok or error)
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/base_url.h"
#include "core/status.h"

namespace pagellm::bench {

using Clock = std::chrono::steady_clock;

// What the caller learns about one POST. Callbacks run on the thread that calls poll().
class StreamHandler {
 public:
  virtual ~StreamHandler() = default;
  // One SSE event's data from a 2xx text/event-stream response; `now` is when its bytes were read.
  virtual void on_sse_event(std::string_view data, Clock::time_point now) = 0;
  // The exchange is over: ok, or why not (connection error, HTTP status with the body's start).
  virtual void on_finished(const Status& status, Clock::time_point now) = 0;
};

class HttpClient {
 public:
  // extra_headers: complete header lines such as "Authorization: Bearer KEY\r\n" (may be empty).
  explicit HttpClient(BaseUrl base_url, std::string extra_headers = "");
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `json_body` to base_url + path. The handler must live until its on_finished() call,
  // which may come from inside this call (an immediate connect error) or from a later poll().
  void start_post(const std::string& path, const std::string& json_body, StreamHandler* handler);

  // Waits up to timeout_ms (-1: until something happens) and handles all socket activity.
  Status poll(int timeout_ms);

  int num_in_flight() const { return num_in_flight_; }
  int num_open_connections() const { return static_cast<int>(connections_.size()); }

 private:
  struct Connection;

  Connection* open_connection();
  void send_request(Connection& conn);
  void handle_event(Connection& conn, uint32_t events);
  void handle_readable(Connection& conn);
  // Ends the current request; a reusable connection goes back to the idle pool.
  void finish(Connection& conn, const Status& status, bool reusable);
  void fail_or_retry(Connection& conn, const Status& status);
  void close_connection(Connection& conn);
  void watch(Connection& conn, uint32_t events);

  BaseUrl base_url_;
  std::string extra_headers_;
  int epoll_fd_ = -1;
  int num_in_flight_ = 0;
  std::vector<std::unique_ptr<Connection>> connections_;  // every open connection
  std::vector<Connection*> idle_;                          // open, keep-alive, no request
  std::vector<std::unique_ptr<Connection>> closed_;        // freed after the current poll()
  std::vector<char> read_buffer_;
};

// Raises this process's open-file limit to its hard limit (each stream holds a socket).
void raise_open_file_limit();

}  // namespace pagellm::bench
