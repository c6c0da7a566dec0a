#include "bench/base_url.h"

#include <arpa/inet.h>

#include <charconv>

namespace pagellm::bench {

std::string BaseUrl::path_for(const std::string& endpoint) const {
  if (endpoint.empty() || endpoint[0] != '/') return path_prefix + "/" + endpoint;
  return path_prefix + endpoint;
}

std::string BaseUrl::host_header() const { return host + ":" + std::to_string(port); }

namespace {

Expected<uint32_t> resolve_ipv4(const std::string& host) {
  std::string literal = host == "localhost" ? "127.0.0.1" : host;
  in_addr addr{};
  if (inet_pton(AF_INET, literal.c_str(), &addr) != 1) {
    return invalid_argument(
        "[bench] host '{}' is not supported: use localhost or an IPv4 literal such as 127.0.0.1",
        host);
  }
  return addr.s_addr;
}

}  // namespace

Expected<BaseUrl> parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) {
    return invalid_argument("[bench] https is not supported (base url '{}'): use http://", url);
  }
  if (url.rfind(scheme, 0) != 0) {
    return invalid_argument("[bench] base url must start with http://, got '{}'", url);
  }
  std::string rest = url.substr(scheme.size());
  BaseUrl out;
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) out.path_prefix = rest.substr(slash);
  while (!out.path_prefix.empty() && out.path_prefix.back() == '/') out.path_prefix.pop_back();

  size_t colon = authority.find(':');
  out.host = authority.substr(0, colon);
  if (out.host.empty()) return invalid_argument("[bench] base url '{}' has no host", url);
  if (colon != std::string::npos) {
    std::string port_text = authority.substr(colon + 1);
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      return invalid_argument("[bench] bad port '{}' in base url '{}'", port_text, url);
    }
    out.port = static_cast<uint16_t>(port);
  }
  PAGELLM_ASSIGN_OR_RETURN(out.ipv4_be, resolve_ipv4(out.host));
  return out;
}

}  // namespace pagellm::bench
