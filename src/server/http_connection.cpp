#include "server/http_connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include <fmt/format.h>

namespace pagellm::server {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

constexpr int kStopCheckMs = 200;  // how often a waiting connection looks at the stop flag

}  // namespace

HttpConnection::HttpConnection(int fd, const HttpLimits& limits, const std::atomic<bool>& stopping,
                               ErrorResponseFn error_response)
    : fd_(fd), limits_(limits), stopping_(stopping), error_response_(std::move(error_response)) {}

HttpConnection::~HttpConnection() { ::close(fd_); }

HttpConnection::Wait HttpConnection::wait_readable(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (stopping_.load()) return Wait::kStopping;
    const int left = ms_left(deadline);
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, std::min(left, kStopCheckMs));
    if (ready > 0) return Wait::kReady;
    if (ready < 0 && errno != EINTR) return Wait::kReady;  // let recv() report the error
    if (left == 0) return Wait::kTimeout;
  }
}

bool HttpConnection::receive_some() {
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

// Reads until buffer_ holds `size` bytes (or, with npos, the end of a head) within timeout_ms.
bool HttpConnection::read_until(size_t size, int timeout_ms, bool& timed_out) {
  timed_out = false;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto done = [&] { return size == std::string::npos ? buffer_.find("\r\n\r\n") != std::string::npos : buffer_.size() >= size; };
  while (!done()) {
    if (size == std::string::npos && buffer_.size() > limits_.max_head_bytes) return true;  // caller answers 431
    const Wait wait = wait_readable(ms_left(deadline));
    if (wait == Wait::kStopping) return false;
    if (wait == Wait::kTimeout) {
      timed_out = true;
      return false;
    }
    if (!receive_some()) return false;
  }
  return true;
}

HttpConnection::ReadOutcome HttpConnection::read_request(HttpRequest& request) {
  if (buffer_.empty()) {
    if (wait_readable(limits_.idle_timeout_ms) != Wait::kReady || !receive_some()) return ReadOutcome::kClosed;
  }
  bool timed_out = false;
  if (!read_until(std::string::npos, limits_.head_timeout_ms, timed_out)) {
    if (timed_out) reject(408, "[http] request head not received in time");
    return ReadOutcome::kClosed;
  }
  const size_t head_end = buffer_.find("\r\n\r\n");
  if (head_end == std::string::npos || head_end > limits_.max_head_bytes) {
    reject(431, fmt::format("[http] request head larger than {} bytes", limits_.max_head_bytes));
    return ReadOutcome::kClosed;
  }
  Expected<HttpRequest> parsed = parse_request_head(std::string_view(buffer_).substr(0, head_end));
  if (!parsed.has_value()) {
    reject(400, parsed.status().message());
    return ReadOutcome::kClosed;
  }
  request = std::move(parsed).value();
  Expected<BodyFraming> framing = body_framing(request);
  if (!framing.has_value()) {
    reject(400, framing.status().message());
    return ReadOutcome::kClosed;
  }
  if (framing->is_chunked) {
    reject(411, "[http] chunked request bodies are not supported; send Content-Length");
    return ReadOutcome::kClosed;
  }
  if (framing->content_length > limits_.max_body_bytes) {
    reject(413, fmt::format("[http] request body of {} bytes exceeds the limit of {} bytes (--max-body-bytes)",
                            framing->content_length, limits_.max_body_bytes));
    return ReadOutcome::kClosed;
  }
  buffer_.erase(0, head_end + 4);
  if (framing->expects_continue && buffer_.size() < framing->content_length &&
      !send_all("HTTP/1.1 100 Continue\r\n\r\n"))
    return ReadOutcome::kClosed;
  if (!read_until(framing->content_length, limits_.body_timeout_ms, timed_out)) {
    if (timed_out) reject(408, "[http] request body not received in time");
    return ReadOutcome::kClosed;
  }
  request.body = buffer_.substr(0, framing->content_length);
  buffer_.erase(0, framing->content_length);
  return ReadOutcome::kRequest;
}

void HttpConnection::begin_exchange(bool keep_alive) {
  keep_alive_ = keep_alive;
  responded_ = stream_open_ = false;
}

bool HttpConnection::finish_exchange() {
  if (!responded_) respond(error_response_(500, "[http] the handler sent no response"));
  return keep_alive_ && !broken_ && !stream_open_ && !stopping_.load();
}

bool HttpConnection::send_all(std::string_view data) {
  while (!data.empty() && !broken_) {
    // MSG_NOSIGNAL: a peer that hung up gives EPIPE, not a process-killing SIGPIPE.
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) data.remove_prefix(static_cast<size_t>(n));
    else if (n < 0 && errno == EINTR) continue;
    else broken_ = true;  // includes EAGAIN after SO_SNDTIMEO: the client stopped reading
  }
  return !broken_;
}

bool HttpConnection::respond(const HttpResponse& response) {
  if (responded_) return false;
  responded_ = true;
  std::string out = response_head(response.status, response.content_type, response.body.size(), keep_alive_,
                                  response.extra_headers);
  out += response.body;
  return send_all(out);
}

bool HttpConnection::start_stream(int status, std::string_view content_type, const HttpHeaders& extra_headers) {
  if (responded_) return false;
  responded_ = stream_open_ = true;
  return send_all(response_head(status, content_type, std::nullopt, keep_alive_, extra_headers));
}

bool HttpConnection::write_chunk(std::string_view data) {
  if (!stream_open_ || data.empty()) return stream_open_ && !broken_;
  std::string framed = fmt::format("{:x}\r\n", data.size());
  framed.append(data);
  framed += "\r\n";
  return send_all(framed);
}

bool HttpConnection::end_stream() {
  if (!stream_open_) return false;
  stream_open_ = false;
  return send_all("0\r\n\r\n");
}

bool HttpConnection::client_gone() {
  if (broken_) return true;
  pollfd pfd{fd_, POLLRDHUP, 0};
  if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))) broken_ = true;
  return broken_;
}

void HttpConnection::reject(int status, const std::string& message) {
  keep_alive_ = false;
  responded_ = false;
  respond(error_response_(status, message));
  lingering_close();
}

// After an early error the client may still be sending (a 20 MB body): closing now would reset the
// connection and lose our response, so stop writing and drain its input for a short while first.
void HttpConnection::lingering_close() {
  ::shutdown(fd_, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  char sink[65536];
  while (ms_left(deadline) > 0) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, ms_left(deadline)) <= 0) break;
    if (::recv(fd_, sink, sizeof(sink), 0) <= 0) break;
  }
  buffer_.clear();
}

}  // namespace pagellm::server
