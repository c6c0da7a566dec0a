// The server a benchmark talks to: "http://HOST[:PORT][/PREFIX]" parsed once, up front.
// Only plain HTTP to IPv4 literals or "localhost" is supported (no TLS, no DNS): the bench only
// ever sends traffic to the address the user named.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace pagellm::bench {

struct BaseUrl {
  std::string host;         // as written by the user, sent in the Host header
  uint32_t ipv4_be = 0;     // resolved address, network byte order
  uint16_t port = 80;
  std::string path_prefix;  // "" or "/something" (no trailing slash)

  // Joins the prefix and an endpoint such as "/v1/completions".
  std::string path_for(const std::string& endpoint) const;
  std::string host_header() const;  // "host:port"
};

Expected<BaseUrl> parse_base_url(const std::string& url);

}  // namespace pagellm::bench
