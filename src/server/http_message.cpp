#include "server/http_message.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <new>

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

size_t HttpRequest::count_headers(std::string_view lower_name) const {
  return static_cast<size_t>(std::count_if(headers.begin(), headers.end(), [&](const auto& h) { return h.first == lower_name; }));
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
  // RFC 9112 §3.2: exactly one Host on HTTP/1.1, at most one on HTTP/1.0.
  const size_t num_hosts = request.count_headers("host");
  if (num_hosts > 1) return invalid_argument("[http] more than one Host header");
  if (num_hosts == 0 && request.minor_version == 1) return invalid_argument("[http] an HTTP/1.1 request needs a Host header");
  return request;
}

namespace {

// One Content-Length value: "53", or a list of equal values ("53, 53", as RFC 9110 §8.6 allows).
Status read_content_length(std::string_view value, std::optional<size_t>& length) {
  while (true) {
    const size_t comma = value.find(',');
    const std::string_view item = trim(value.substr(0, comma));
    size_t parsed = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), parsed);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      return invalid_argument("[http] malformed Content-Length");
    if (length && *length != parsed) return invalid_argument("[http] conflicting Content-Length values");
    length = parsed;
    if (comma == std::string_view::npos) return Status::ok();
    value.remove_prefix(comma + 1);
  }
}

}  // namespace

// The framing rules of RFC 9112 §6: a message whose length two parties could read differently
// (request smuggling) is refused, and the connection closed after the 400.
Expected<BodyFraming> body_framing(const HttpRequest& request) {
  BodyFraming framing;
  const size_t num_encodings = request.count_headers("transfer-encoding");
  if (num_encodings > 1) return invalid_argument("[http] more than one Transfer-Encoding header");
  if (num_encodings == 1) {
    if (request.minor_version == 0) return invalid_argument("[http] Transfer-Encoding in an HTTP/1.0 request");
    if (request.header("content-length")) return invalid_argument("[http] both Content-Length and Transfer-Encoding");
    if (to_lower(*request.header("transfer-encoding")) != "chunked")
      return invalid_argument("[http] unsupported Transfer-Encoding '{}'", *request.header("transfer-encoding"));
    framing.is_chunked = true;
  }
  std::optional<size_t> length;
  for (const auto& [name, value] : request.headers)
    if (name == "content-length") PAGELLM_RETURN_IF_ERROR(read_content_length(value, length));
  framing.content_length = length.value_or(0);
  if (const std::string* expect = request.header("expect"))
    framing.expects_continue = to_lower(*expect) == "100-continue";
  return framing;
}

void* allocate_body_bytes(size_t num_bytes) {
  if (num_bytes < kMappedBodyBytes) return ::operator new(num_bytes);
  void* mapped = ::mmap(nullptr, num_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  return mapped;
}

void free_body_bytes(void* bytes, size_t num_bytes) {
  if (num_bytes < kMappedBodyBytes) ::operator delete(bytes);
  else ::munmap(bytes, num_bytes);
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
