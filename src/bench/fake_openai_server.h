// A scripted OpenAI-compatible streaming server with known timings, for testing the bench and
// measuring the client's own capacity (`pagellm bench fake-server`). It answers every POST to
// /v1/completions or /v1/chat/completions with an SSE stream:
//
//   t0 = request fully received
//   t0 + first_chunk_delay_ms                       first token chunk
//   t0 + first_chunk_delay_ms + k·token_interval_ms  token chunk k (k = 1 .. n−1)
//   right after the last token                      usage chunk (choices: []), then data: [DONE]
//
// One thread, one epoll loop, keep-alive, chunked transfer coding; it records the peak number of
// requests in flight. Failure scripts: an HTTP error status, a malformed first event, a stream
// cut off mid-way. Never meant to face anything but 127.0.0.1.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace pagellm::bench {

struct FakeServerScript {
  int first_chunk_delay_ms = 50;
  int token_interval_ms = 10;   // 0: every token chunk at once (capacity tests)
  int num_tokens = 0;           // 0: the request's max_tokens
  bool send_usage = true;       // the final usage chunk
  int error_status = 0;         // e.g. 500: answer with this status and a JSON error body
  int error_every_nth = 1;      // with error_status: only requests 1, 1+n, 1+2n, ... fail
  bool malformed_first_event = false;
  bool cut_stream_after_first_token = false;  // close the socket mid-stream
  bool chunked = true;          // false: no Transfer-Encoding, body ends when the server closes
  bool keep_request_bodies = false;  // for tests that check what the client sent
};

class FakeOpenAiServer {
 public:
  // Listens on 127.0.0.1:port (0: any free port) and serves on its own thread until destroyed.
  static Expected<std::unique_ptr<FakeOpenAiServer>> start(const FakeServerScript& script,
                                                           uint16_t port = 0);
  ~FakeOpenAiServer();
  FakeOpenAiServer(const FakeOpenAiServer&) = delete;
  FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

  uint16_t port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int peak_requests_in_flight() const { return peak_in_flight_.load(); }
  int64_t num_requests() const { return num_requests_.load(); }
  int64_t num_events_sent() const { return num_events_sent_.load(); }
  // The JSON bodies of the requests received so far, in arrival order (keep_request_bodies).
  std::vector<std::string> request_bodies() const;

 private:
  class Loop;
  FakeOpenAiServer() = default;

  uint16_t port_ = 0;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  std::atomic<int> peak_in_flight_{0};
  std::atomic<int64_t> num_requests_{0};
  std::atomic<int64_t> num_events_sent_{0};
  mutable std::mutex bodies_mutex_;
  std::vector<std::string> request_bodies_;
};

}  // namespace pagellm::bench
