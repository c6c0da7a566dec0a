#include "bench/http_response_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace pagellm::bench {

namespace {

constexpr size_t kMaxHeadBytes = 64 * 1024;
constexpr size_t kMaxLineBytes = 4 * 1024;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

Status HttpResponseParser::feed(std::string_view bytes, BodySink& sink) {
  if (state_ == State::kHeaders) {
    // Headers may straddle reads; keep them until the blank line, then parse once.
    size_t old_size = head_.size();
    head_.append(bytes);
    size_t search_from = old_size >= 3 ? old_size - 3 : 0;
    size_t end = head_.find("\r\n\r\n", search_from);
    size_t sep = 4;
    if (end == std::string::npos) {
      end = head_.find("\n\n", search_from);
      sep = 2;
    }
    if (end == std::string::npos) {
      if (head_.size() > kMaxHeadBytes) return internal_error("[bench] response headers too long");
      return Status::ok();
    }
    size_t body_start_in_bytes = end + sep - old_size;
    head_.resize(end);
    PAGELLM_RETURN_IF_ERROR(parse_head(head_));
    bytes.remove_prefix(body_start_in_bytes);
  }
  while (!bytes.empty() && state_ != State::kDone) {
    if (state_ == State::kBody) {
      if (body_mode_ == BodyMode::kUntilClose) {
        sink.on_body(bytes);
        return Status::ok();
      }
      size_t n = static_cast<size_t>(std::min<uint64_t>(body_remaining_bytes_, bytes.size()));
      sink.on_body(bytes.substr(0, n));
      bytes.remove_prefix(n);
      body_remaining_bytes_ -= n;
      if (body_remaining_bytes_ == 0) state_ = State::kDone;
    } else {
      PAGELLM_RETURN_IF_ERROR(feed_chunked(bytes, sink));
    }
  }
  return Status::ok();
}

Status HttpResponseParser::on_eof() {
  if (state_ == State::kDone) return Status::ok();
  if (state_ == State::kBody && body_mode_ == BodyMode::kUntilClose) {
    state_ = State::kDone;
    return Status::ok();
  }
  if (state_ == State::kHeaders) {
    return Status(StatusCode::kUnavailable,
                  head_.empty() ? "[bench] server closed the connection before responding"
                                : "[bench] server closed the connection inside the headers");
  }
  return Status(StatusCode::kUnavailable, "[bench] server closed the connection mid-response");
}

Status HttpResponseParser::parse_head(std::string_view head) {
  size_t eol = head.find('\n');
  std::string_view status_line = trim(head.substr(0, eol));
  // "HTTP/1.1 200 OK"
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12) {
    return internal_error("[bench] bad HTTP status line '{}'", std::string(status_line));
  }
  keep_alive_ = status_line[7] != '0';  // HTTP/1.0 closes unless told otherwise
  std::string_view code = status_line.substr(9, 3);
  auto [ptr, ec] = std::from_chars(code.data(), code.data() + code.size(), status_code_);
  if (ec != std::errc() || ptr != code.data() + 3) {
    return internal_error("[bench] bad HTTP status line '{}'", std::string(status_line));
  }
  while (eol != std::string_view::npos) {
    head.remove_prefix(eol + 1);
    eol = head.find('\n');
    PAGELLM_RETURN_IF_ERROR(parse_header_line(trim(head.substr(0, eol))));
  }
  bool no_body = status_code_ == 204 || status_code_ == 304 || status_code_ / 100 == 1;
  if (no_body || (body_mode_ == BodyMode::kContentLength && body_remaining_bytes_ == 0)) {
    state_ = State::kDone;
  } else {
    state_ = body_mode_ == BodyMode::kChunked ? State::kChunkSize : State::kBody;
  }
  return Status::ok();
}

Status HttpResponseParser::parse_header_line(std::string_view line) {
  if (line.empty()) return Status::ok();
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    return internal_error("[bench] bad HTTP header line '{}'", std::string(line));
  }
  std::string name = lower(trim(line.substr(0, colon)));
  std::string_view value = trim(line.substr(colon + 1));
  if (name == "content-length" && body_mode_ != BodyMode::kChunked) {
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), body_remaining_bytes_);
    if (ec != std::errc()) return internal_error("[bench] bad Content-Length '{}'", std::string(value));
    body_mode_ = BodyMode::kContentLength;
  } else if (name == "transfer-encoding" && lower(value).find("chunked") != std::string::npos) {
    body_mode_ = BodyMode::kChunked;  // chunked wins over Content-Length (RFC 9112 6.3)
  } else if (name == "connection") {
    std::string v = lower(value);
    if (v.find("close") != std::string::npos) keep_alive_ = false;
    if (v.find("keep-alive") != std::string::npos) keep_alive_ = true;
  } else if (name == "content-type") {
    content_type_ = lower(value);
  }
  return Status::ok();
}

bool HttpResponseParser::take_line(std::string_view& bytes) {
  size_t eol = bytes.find('\n');
  if (eol == std::string_view::npos) {
    line_.append(bytes);
    bytes = {};
    return false;
  }
  line_.append(bytes.substr(0, eol));
  bytes.remove_prefix(eol + 1);
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  return true;
}

Status HttpResponseParser::feed_chunked(std::string_view& bytes, BodySink& sink) {
  switch (state_) {
    case State::kChunkSize: {
      if (!take_line(bytes)) {
        if (line_.size() > kMaxLineBytes) return internal_error("[bench] chunk-size line too long");
        return Status::ok();
      }
      std::string_view size_text = trim(std::string_view(line_).substr(0, line_.find(';')));
      uint64_t size = 0;
      auto [ptr, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
      if (ec != std::errc() || ptr != size_text.data() + size_text.size()) {
        return internal_error("[bench] bad chunk size '{}'", line_);
      }
      line_.clear();
      body_remaining_bytes_ = size;
      state_ = size == 0 ? State::kTrailer : State::kChunkData;
      return Status::ok();
    }
    case State::kChunkData: {
      size_t n = static_cast<size_t>(std::min<uint64_t>(body_remaining_bytes_, bytes.size()));
      sink.on_body(bytes.substr(0, n));
      bytes.remove_prefix(n);
      body_remaining_bytes_ -= n;
      if (body_remaining_bytes_ == 0) state_ = State::kChunkDataEnd;
      return Status::ok();
    }
    case State::kChunkDataEnd: {
      if (!take_line(bytes)) return Status::ok();
      if (!line_.empty()) return internal_error("[bench] chunk data longer than its size");
      state_ = State::kChunkSize;
      return Status::ok();
    }
    case State::kTrailer: {
      if (!take_line(bytes)) return Status::ok();
      if (line_.empty()) state_ = State::kDone;
      line_.clear();
      return Status::ok();
    }
    default:
      return internal_error("[bench] response parser in a bad state");
  }
}

}  // namespace pagellm::bench
