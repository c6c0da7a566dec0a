#include "server/http_overflow.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace pagellm::server {

namespace {

constexpr int kHeadDeadlineMs = 1000;   // a waiting socket's head must be complete by then
constexpr size_t kMaxPending = 1024;     // sockets waiting at most (the oldest is pushed out)
constexpr size_t kMaxQuickHeadBytes = 8192;
constexpr int kPollStepMs = 100;

bool is_quick_request(const HttpRequest& request, const std::vector<std::string>& quick_paths) {
  if (request.method != "GET" && request.method != "HEAD") return false;
  if (std::find(quick_paths.begin(), quick_paths.end(), request.path) == quick_paths.end()) return false;
  Expected<BodyFraming> framing = body_framing(request);
  return framing.has_value() && !framing->is_chunked && framing->content_length == 0;
}

}  // namespace

HttpOverflow::HttpOverflow(std::vector<std::string> quick_paths, QuickFn serve_quick)
    : quick_paths_(std::move(quick_paths)), serve_quick_(std::move(serve_quick)) {}

HttpOverflow::~HttpOverflow() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  if (wake_pipe_[1] >= 0) (void)!::write(wake_pipe_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (Waiting& waiting : incoming_) ::close(waiting.fd);
  for (int fd : wake_pipe_)
    if (fd >= 0) ::close(fd);
}

void HttpOverflow::start() {
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) wake_pipe_[0] = wake_pipe_[1] = -1;
  thread_ = std::thread([this] { loop(); });
}

void HttpOverflow::admit(int fd, std::string busy) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.push_back(Waiting{fd, Clock::now() + std::chrono::milliseconds(kHeadDeadlineMs), {}, std::move(busy)});
  }
  if (wake_pipe_[1] >= 0) (void)!::write(wake_pipe_[1], "x", 1);
}

// The 503 goes out without blocking; what the client already sent is read first, so closing does
// not reset the connection before it sees the answer.
void HttpOverflow::refuse(Waiting& waiting) {
  (void)!::send(waiting.fd, waiting.busy.data(), waiting.busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(waiting.fd, SHUT_WR);
  char sink[16384];
  for (int i = 0; i < 4 && ::recv(waiting.fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
  }
  ::close(waiting.fd);
  waiting.fd = -1;
}

bool HttpOverflow::advance(Waiting& waiting) {
  char chunk[4096];
  const ssize_t n = ::recv(waiting.fd, chunk, sizeof(chunk), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {  // the client hung up
    ::close(waiting.fd);
    waiting.fd = -1;
    return true;
  }
  waiting.head.append(chunk, static_cast<size_t>(n));
  const size_t head_end = waiting.head.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    if (waiting.head.size() <= kMaxQuickHeadBytes) return false;
    refuse(waiting);
    return true;
  }
  Expected<HttpRequest> request = parse_request_head(std::string_view(waiting.head).substr(0, head_end));
  if (!request.has_value() || !is_quick_request(*request, quick_paths_)) {
    refuse(waiting);
    return true;
  }
  serve_quick_(waiting.fd, *request);  // owns and closes the socket
  waiting.fd = -1;
  return true;
}

void HttpOverflow::loop() {
  std::vector<Waiting> waiting;  // oldest first
  std::vector<pollfd> polled;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) break;
      for (Waiting& w : incoming_) waiting.push_back(std::move(w));
      incoming_.clear();
    }
    if (waiting.size() > kMaxPending) {
      const size_t excess = waiting.size() - kMaxPending;
      for (size_t i = 0; i < excess; ++i) refuse(waiting[i]);
      waiting.erase(waiting.begin(), waiting.begin() + static_cast<std::ptrdiff_t>(excess));
    }
    polled.assign(1, pollfd{wake_pipe_[0], POLLIN, 0});
    for (const Waiting& w : waiting) polled.push_back(pollfd{w.fd, POLLIN, 0});
    ::poll(polled.data(), polled.size(), kPollStepMs);
    if (polled[0].revents & POLLIN) {
      char sink[256];
      while (::read(wake_pipe_[0], sink, sizeof(sink)) > 0) {
      }
    }
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < waiting.size(); ++i) {
      const bool ready = polled[i + 1].revents != 0;
      if (ready && advance(waiting[i])) continue;
      if (waiting[i].fd >= 0 && now >= waiting[i].deadline) refuse(waiting[i]);
    }
    waiting.erase(std::remove_if(waiting.begin(), waiting.end(), [](const Waiting& w) { return w.fd < 0; }),
                  waiting.end());
  }
  for (Waiting& w : waiting) ::close(w.fd);
}

}  // namespace pagellm::server
