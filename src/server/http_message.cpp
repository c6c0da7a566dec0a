#include "server/http_message.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

namespace pagellm::server {

namespace {

std::string to_lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// RFC 9110 token characters (method and header names).
bool is_token(std::string_view text) {
  if (text.empty()) return false;
  for (unsigned char c : text) {
    if (std::isalnum(c)) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) == std::string_view::npos) return false;
  }
  return true;
}

bool has_control_chars(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; });
}

Status parse_request_line(std::string_view line, HttpRequest& request) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return invalid_argument("[http] malformed request line");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return invalid_argument("[http] malformed method");
  if (target.empty() || target.front() != '/' || has_control_chars(target) || target.find(' ') != target.npos)
    return invalid_argument("[http] malformed request target");
  if (version == "HTTP/1.1") request.minor_version = 1;
  else if (version == "HTTP/1.0") request.minor_version = 0;
  else return invalid_argument("[http] unsupported HTTP version");
  request.method = std::string(method);
  const size_t question = target.find('?');
  request.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) request.query = std::string(target.substr(question + 1));
  return Status::ok();
}

}  // namespace

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return &value;
  return nullptr;
}

bool HttpRequest::wants_keep_alive() const {
  const std::string* connection = header("connection");
  const std::string value = connection ? to_lower(*connection) : "";
  if (minor_version == 0) return value.find("keep-alive") != std::string::npos;
  return value.find("close") == std::string::npos;
}

Expected<HttpRequest> parse_request_head(std::string_view head) {
  HttpRequest request;
  size_t line_end = head.find("\r\n");
  PAGELLM_RETURN_IF_ERROR(parse_request_line(head.substr(0, line_end), request));
  while (line_end != std::string_view::npos) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string_view line = head.substr(start, line_end == std::string_view::npos ? head.npos : line_end - start);
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return invalid_argument("[http] malformed header line");
    const std::string_view value = trim(line.substr(colon + 1));
    if (has_control_chars(value)) return invalid_argument("[http] control characters in a header value");
    request.headers.emplace_back(to_lower(line.substr(0, colon)), std::string(value));
  }
  return request;
}

Expected<BodyFraming> body_framing(const HttpRequest& request) {
  BodyFraming framing;
  if (const std::string* encoding = request.header("transfer-encoding")) {
    if (to_lower(*encoding).find("chunked") == std::string::npos)
      return invalid_argument("[http] unsupported Transfer-Encoding");
    framing.is_chunked = true;
  }
  if (const std::string* length = request.header("content-length")) {
    if (framing.is_chunked) return invalid_argument("[http] both Content-Length and Transfer-Encoding");
    const char* end = length->data() + length->size();
    auto [ptr, ec] = std::from_chars(length->data(), end, framing.content_length);
    if (ec != std::errc() || ptr != end || length->empty()) return invalid_argument("[http] malformed Content-Length");
  }
  if (const std::string* expect = request.header("expect"))
    framing.expects_continue = to_lower(*expect) == "100-continue";
  return framing;
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string response_head(int status, std::string_view content_type, std::optional<size_t> content_length,
                          bool keep_alive, const HttpHeaders& extra_headers) {
  std::string head = fmt::format("HTTP/1.1 {} {}\r\n", status, reason_phrase(status));
  if (!content_type.empty()) head += fmt::format("Content-Type: {}\r\n", content_type);
  if (content_length) head += fmt::format("Content-Length: {}\r\n", *content_length);
  else head += "Transfer-Encoding: chunked\r\n";
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : extra_headers) head += fmt::format("{}: {}\r\n", name, value);
  head += "\r\n";
  return head;
}

}  // namespace pagellm::server
