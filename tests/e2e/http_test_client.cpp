#include "http_test_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace pagellm::e2e {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Incremental decoder of a response: head, then a Content-Length or chunked body.
class ResponseReader {
 public:
  // Feeds bytes; returns the newly decoded body bytes.
  std::string feed(const std::string& bytes) {
    buffer_ += bytes;
    std::string decoded;
    if (!have_head_) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end == std::string::npos) return decoded;
      result.head = buffer_.substr(0, end);
      buffer_.erase(0, end + 4);
      have_head_ = true;
      result.status = std::atoi(result.head.c_str() + result.head.find(' ') + 1);
      chunked_ = result.header("transfer-encoding").find("chunked") != std::string::npos;
      const std::string length = result.header("content-length");
      if (!length.empty()) content_length_ = std::stoull(length);
      if (result.status == 100) {  // interim response: read the real one
        have_head_ = false;
        return feed("");
      }
    }
    if (!chunked_) {
      decoded = buffer_;
      buffer_.clear();
      received_ += decoded.size();
      if (content_length_ && received_ >= *content_length_) complete_ = true;
    } else {
      for (;;) {
        if (data_left_ > 0) {
          const size_t take = std::min(data_left_, buffer_.size());
          decoded += buffer_.substr(0, take);
          buffer_.erase(0, take);
          data_left_ -= take;
          if (data_left_ > 0) break;
          need_crlf_ = true;
        }
        if (need_crlf_) {
          if (buffer_.size() < 2) break;
          buffer_.erase(0, 2);
          need_crlf_ = false;
        }
        const size_t line_end = buffer_.find("\r\n");
        if (line_end == std::string::npos) break;
        const size_t size = std::stoull(buffer_.substr(0, line_end), nullptr, 16);
        buffer_.erase(0, line_end + 2);
        if (size == 0) {
          complete_ = true;
          break;
        }
        data_left_ = size;
      }
    }
    result.body += decoded;
    return decoded;
  }
  bool complete() const { return complete_; }
  HttpResult result;

 private:
  std::string buffer_;
  bool have_head_ = false, chunked_ = false, complete_ = false;
  std::optional<size_t> content_length_;
  size_t received_ = 0, data_left_ = 0;
  bool need_crlf_ = false;
};

}  // namespace

std::string HttpResult::header(const std::string& lower_name) const {
  std::istringstream lines(head);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name != lower_name) continue;
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ')) value.erase(0, 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) value.pop_back();
    return value;
  }
  return "";
}

nlohmann::json HttpResult::json() const { return nlohmann::json::parse(body, nullptr, false); }

int connect_local(int port, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    ::close(fd);
    if (ms_left(deadline) == 0) return -1;
    ::usleep(20000);
  }
}

bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  return true;
}

namespace {
HttpResult exchange(int port, const std::string& raw, int timeout_ms,
                    const std::function<bool(const std::string&)>& on_body) {
  HttpResult failed;
  const int fd = connect_local(port);
  if (fd < 0) return failed;
  // A refused body (413) may reset the connection before all is sent: read what came back anyway.
  (void)send_all(fd, raw);
  ResponseReader reader;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buffer[65536];
  while (!reader.complete() && ms_left(deadline) > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, ms_left(deadline)) <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    const std::string decoded = reader.feed(std::string(buffer, static_cast<size_t>(n)));
    if (on_body && !decoded.empty() && !on_body(decoded)) break;
  }
  ::close(fd);
  return reader.result;
}

std::string post_text(const std::string& path, const std::string& body, const std::string& extra_headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}
}  // namespace

HttpResult raw_request(int port, const std::string& raw, int timeout_ms) { return exchange(port, raw, timeout_ms, nullptr); }

HttpResult http_get(int port, const std::string& path, const std::string& extra_headers) {
  return raw_request(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers + "\r\n");
}

HttpResult http_post(int port, const std::string& path, const std::string& body, const std::string& extra_headers) {
  return raw_request(port, post_text(path, body, extra_headers));
}

HttpResult http_post_json(int port, const std::string& path, const nlohmann::json& body,
                          const std::string& extra_headers) {
  return http_post(port, path, body.dump(), extra_headers);
}

HttpResult http_post_stream(int port, const std::string& path, const nlohmann::json& body,
                            const std::function<bool(const std::string&)>& on_event, int timeout_ms) {
  std::string pending;
  return exchange(port, post_text(path, body.dump(), ""), timeout_ms, [&](const std::string& bytes) {
    pending += bytes;
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0 && !on_event(event.substr(6))) return false;
    }
    return true;
  });
}

bool parse_sse(const std::string& stream, std::vector<std::string>& data) {
  size_t pos = 0;
  while (pos < stream.size()) {
    const size_t end = stream.find("\n\n", pos);
    if (end == std::string::npos) return false;  // an unterminated event
    const std::string event = stream.substr(pos, end - pos);
    if (event.rfind("data: ", 0) != 0 || event.find('\n') != std::string::npos) return false;
    data.push_back(event.substr(6));
    pos = end + 2;
  }
  return true;
}

std::optional<double> metric_value(const std::string& metrics_text, const std::string& prefix) {
  std::istringstream lines(metrics_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t space = line.rfind(' ');
    return std::stod(line.substr(space + 1));
  }
  return std::nullopt;
}

}  // namespace pagellm::e2e
