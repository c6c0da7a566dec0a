#include "server/http_connection.h"

#include <malloc.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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

constexpr int kStopCheckMs = 200;  // how often a waiting connection looks at the stop flag and the load
constexpr int kLingerMs = 2000;      // draining a refused request's input before closing
constexpr int kLingerBusyMs = 200;   // the same while slots run low

}  // namespace

bool BodyBudget::try_reserve(size_t num_bytes) {
  size_t used = used_bytes_.load();
  do {
    if (num_bytes > limit_bytes_ - std::min(used, limit_bytes_)) return false;
  } while (!used_bytes_.compare_exchange_weak(used, used + num_bytes));
  return true;
}

HttpConnection::HttpConnection(int fd, const HttpLimits& limits, ServerLoad& load, ErrorResponseFn error_response)
    : fd_(fd), limits_(limits), load_(load), error_response_(std::move(error_response)) {}

HttpConnection::~HttpConnection() {
  release_body();
  ::close(fd_);
}

HttpConnection::Wait HttpConnection::wait_readable(Clock::time_point since, int timeout_ms) {
  for (;;) {
    if (load_.stopping.load()) return Wait::kStopping;
    const int limit_ms = load_.slots_low.load() ? std::min(timeout_ms, limits_.busy_timeout_ms) : timeout_ms;
    const int left = ms_left(since + std::chrono::milliseconds(limit_ms));
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

// Reads until buffer_ holds the end of a head (or more than max_head_bytes: the caller answers 431).
bool HttpConnection::read_head(bool& timed_out) {
  timed_out = false;
  const Clock::time_point started = Clock::now();
  while (buffer_.find("\r\n\r\n") == std::string::npos) {
    if (buffer_.size() > limits_.max_head_bytes) return true;
    const Wait wait = wait_readable(started, limits_.head_timeout_ms);
    if (wait == Wait::kStopping) return false;
    if (wait == Wait::kTimeout) {
      timed_out = true;
      return false;
    }
    if (!receive_some()) return false;
  }
  return true;
}

// Moves num_bytes of body into `body`: what buffer_ already holds, then straight from the socket
// (never more, so a pipelined request stays unread). The capacity is reserved once; pages are only
// touched as bytes arrive.
bool HttpConnection::read_body(size_t num_bytes, HttpBody& body, bool& timed_out) {
  timed_out = false;
  body.reserve(num_bytes);
  const size_t buffered = std::min(num_bytes, buffer_.size());
  body.assign(buffer_.data(), buffered);
  buffer_.erase(0, buffered);
  const Clock::time_point started = Clock::now();
  char chunk[65536];
  while (body.size() < num_bytes) {
    const Wait wait = wait_readable(started, limits_.body_timeout_ms);
    if (wait == Wait::kStopping) return false;
    if (wait == Wait::kTimeout) {
      timed_out = true;
      return false;
    }
    const ssize_t n = ::recv(fd_, chunk, std::min(sizeof(chunk), num_bytes - body.size()), 0);
    if (n > 0) body.append(chunk, static_cast<size_t>(n));
    else if (!(n < 0 && errno == EINTR)) return false;
  }
  return true;
}

bool HttpConnection::answer_early(const HttpRequest& request, const HttpResponse& response, bool body_unread) {
  begin_exchange(request);
  if (body_unread) keep_alive_ = false;
  respond(response);
  if (keep_alive_ && !broken_ && !load_.stopping.load()) return true;
  lingering_close();
  return false;
}

HttpConnection::ReadOutcome HttpConnection::read_request(HttpRequest& request, const HeadScreenFn& screen) {
  for (;;) {
    if (buffer_.empty()) {
      if (wait_readable(Clock::now(), limits_.idle_timeout_ms) != Wait::kReady || !receive_some())
        return ReadOutcome::kClosed;
    }
    bool timed_out = false;
    if (!read_head(timed_out)) {
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
    buffer_.erase(0, head_end + 4);
    const size_t body_bytes = framing->content_length;
    if (std::optional<HttpResponse> early = screen ? screen(request) : std::nullopt) {
      if (answer_early(request, *early, body_bytes > 0)) continue;
      return ReadOutcome::kClosed;
    }
    if (body_bytes > limits_.max_body_bytes) {
      reject(413, fmt::format("[http] request body of {} bytes exceeds the limit of {} bytes (--max-body-bytes)",
                              body_bytes, limits_.max_body_bytes));
      return ReadOutcome::kClosed;
    }
    if (!load_.body_budget.try_reserve(body_bytes)) {
      HttpResponse busy = error_response_(
          503, fmt::format("[http] the server holds too many request bodies right now ({} bytes, "
                           "--max-inflight-body-bytes); retry later", load_.body_budget.limit_bytes()));
      busy.extra_headers.emplace_back("Retry-After", "1");
      answer_early(request, busy, /*body_unread=*/true);
      return ReadOutcome::kClosed;
    }
    body_reserved_bytes_ = body_bytes;
    if (framing->expects_continue && buffer_.size() < body_bytes && !send_all("HTTP/1.1 100 Continue\r\n\r\n"))
      return ReadOutcome::kClosed;
    if (!read_body(body_bytes, request.body, timed_out)) {
      if (timed_out) reject(408, "[http] request body not received in time");
      return ReadOutcome::kClosed;
    }
    return ReadOutcome::kRequest;
  }
}

void HttpConnection::release_body() {
  if (body_reserved_bytes_ == 0) return;
  load_.body_budget.release(body_reserved_bytes_);
  // The body itself was a mapping of its own (HttpBody); what handling a large one allocated
  // (its parsed JSON, the prompt's text and ids) sits in malloc's free lists: hand those pages back.
  if (body_reserved_bytes_ >= kMappedBodyBytes) ::malloc_trim(0);
  body_reserved_bytes_ = 0;
}

void HttpConnection::begin_exchange(const HttpRequest& request, bool may_keep_alive) {
  keep_alive_ = may_keep_alive && request.wants_keep_alive() && !load_.stopping.load();
  is_head_ = request.method == "HEAD";
  responded_ = stream_open_ = false;
}

bool HttpConnection::finish_exchange() {
  if (!responded_) respond(error_response_(500, "[http] the handler sent no response"));
  return keep_alive_ && !broken_ && !stream_open_ && !load_.stopping.load();
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
  if (!is_head_) out += response.body;
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
  keep_alive_ = is_head_ = false;
  responded_ = false;
  respond(error_response_(status, message));
  lingering_close();
}

// After an early error the client may still be sending (a 20 MB body): closing now would reset the
// connection and lose our response, so stop writing and drain its input for a short while first
// (shorter while slots run low: a flood's connections must give their slots back).
void HttpConnection::lingering_close() {
  ::shutdown(fd_, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::milliseconds(load_.slots_low.load() ? kLingerBusyMs : kLingerMs);
  char sink[65536];
  while (ms_left(deadline) > 0) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, ms_left(deadline)) <= 0) break;
    if (::recv(fd_, sink, sizeof(sink), 0) <= 0) break;
  }
  buffer_.clear();
  buffer_.shrink_to_fit();
}

}  // namespace pagellm::server
