// HttpRequest / HttpResponse: the HTTP/1.1 messages the server reads and writes, and the parsing of
// a request head. Plain values; the socket side lives in http_connection.h.
//
//   request head:  METHOD SP target SP HTTP/1.x CRLF  (name ":" OWS value OWS CRLF)*  CRLF
//   target:        /path?query   (path and query are split; no percent-decoding is needed by our routes)
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pagellm::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;  // names lower-cased

// Request bodies of kMappedBodyBytes and more live in anonymous mappings of their own, given back
// to the system the moment they are freed: glibc keeps large blocks freed into its per-thread
// arenas resident (malloc_trim does not shrink them), so after a burst of big bodies the server's
// memory would stay high. Pages are touched only as bytes arrive.
inline constexpr size_t kMappedBodyBytes = 1 << 20;
void* allocate_body_bytes(size_t num_bytes);
void free_body_bytes(void* bytes, size_t num_bytes);

template <class T>
struct BodyAllocator {
  using value_type = T;
  BodyAllocator() = default;
  template <class U>
  BodyAllocator(const BodyAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(allocate_body_bytes(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { free_body_bytes(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const BodyAllocator<U>&) const { return true; }
};
using HttpBody = std::basic_string<char, std::char_traits<char>, BodyAllocator<char>>;  // reads as a string_view

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string path;     // "/v1/completions"
  std::string query;    // after '?', may be empty
  int minor_version = 1;  // HTTP/1.<minor>
  HttpHeaders headers;
  HttpBody body;

  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view lower_name) const;
  size_t count_headers(std::string_view lower_name) const;
  // HTTP/1.1 keeps the connection unless "Connection: close"; HTTP/1.0 closes unless "keep-alive".
  bool wants_keep_alive() const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders extra_headers;
};

// How the request body is framed, as read from the head.
struct BodyFraming {
  size_t content_length = 0;
  bool is_chunked = false;     // Transfer-Encoding: chunked (not supported: answered with 411)
  bool expects_continue = false;  // Expect: 100-continue
};

std::string_view reason_phrase(int status);

// Parses the head (without its final empty line). kInvalidArgument on any syntax error, and on a
// missing (HTTP/1.1) or repeated Host.
Expected<HttpRequest> parse_request_head(std::string_view head);
// kInvalidArgument (400, then close) for framing two parties could read differently: Content-Length
// values that disagree, Content-Length with Transfer-Encoding, a repeated or unknown Transfer-Encoding.
Expected<BodyFraming> body_framing(const HttpRequest& request);

// "HTTP/1.1 200 OK\r\n" + headers + "\r\n". With content_length nullopt the body is chunked.
std::string response_head(int status, std::string_view content_type, std::optional<size_t> content_length,
                          bool keep_alive, const HttpHeaders& extra_headers);

}  // namespace pagellm::server
